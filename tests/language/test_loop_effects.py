"""The proof that a loop body carries no Python state (language/loop_effects.py),
through the cases it must catch: break, helpers and methods that mutate outer
objects, global/nonlocal, partials and callable objects, outer iterators,
compile-time switches (only the taken branch counts), stores into outer
attributes and dicts. Each kernel is compiled rolled and fully unrolled
(tests/support/rolling.py `check`): where the proof cannot show a body clean the
loop is traced concretely, and both give what numpy gives.

Kernels live in this file on purpose: rolling reads the kernel's source (AST).
"""
from __future__ import annotations

import collections
import functools

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

from tests.support.rolling import blocks, check, data, loops

# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api("nl.affine_range", "nl.sequential_range", "nl.static_range", "nl.dynamic_range")


# --- break ---------------------------------------------------------------------------

@nkicc.jit
def k_break(a, limit):
    out = nl.ndarray((48, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        if i * 16 >= limit:
            break
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(nl.load(a[i * 16:(i + 1) * 16, :]), 3.0))
    return out


def test_break_inside_loop(rng):
    a = data(rng, 128, 8)
    c = check(k_break, (a,), a[:48] * 3, limit=48)
    assert loops(c)["concrete"] == 1 and loops(c)["rolled"] == 0


@nkicc.jit
def k_break_inner(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        for j in range(10):
            if j == 2:
                break
            t = nl.multiply(t, 2.0)
        nl.store(out[i * 16:(i + 1) * 16, :], value=t)
    return out


def test_break_in_inner_loop_keeps_outer_rolled(rng):
    a = data(rng, 64, 8)
    c = check(k_break_inner, (a,), a * 4)
    assert loops(c)["rolled"] == 1 and loops(c)["concrete"] >= 1


# --- helpers with side effects -------------------------------------------------------------

_SEEN: list = []


def _remember(t):
    _SEEN.append(t)
    return t


@nkicc.jit
def k_helper_global_list(a):
    _SEEN.clear()
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        _remember(nl.load(a[i * 16:(i + 1) * 16, :]))
    for j, t in enumerate(_SEEN):
        nl.store(out[j * 16:(j + 1) * 16, :], value=nl.multiply(t, 3.0))
    return out


def test_helper_mutating_a_global_list(rng):
    a = data(rng, 64, 8)
    c = check(k_helper_global_list, (a,), a * 3)
    assert loops(c)["concrete"] == 1
    assert "_remember" in " ".join(c.trace.decisions["concrete"].values())


def _push(tiles, t):
    tiles.append(t)


@nkicc.jit
def k_helper_param(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(4):
        _push(tiles, nl.load(a[i * 16:(i + 1) * 16, :]))
    for i in nl.affine_range(4):
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.add(tiles[3 - i], 0.5))
    return out


def test_helper_mutating_its_parameter(rng):
    a = data(rng, 64, 8)
    c = check(k_helper_param, (a,), np.concatenate(blocks(a, 16)[::-1]) + 0.5)
    assert loops(c)["concrete"] == 2


_NEXT = 0


def _reset_ids():
    global _NEXT
    _NEXT = 0


def _next_id():
    global _NEXT
    v = _NEXT
    _NEXT += 1
    return v


@nkicc.jit
def k_helper_global_stmt(a):
    _reset_ids()
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        k = _next_id()
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[(3 - k) * 16:(4 - k) * 16, :]))
    return out


def test_helper_with_global_statement(rng):
    a = data(rng, 64, 8)
    c = check(k_helper_global_stmt, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1
    assert "global" in " ".join(c.trace.decisions["concrete"].values())


def _block(x, i, rows=16):
    return x[i * rows:(i + 1) * rows, :]


def _scaled(t, s):
    return nl.multiply(t, s)


@nkicc.jit
def k_pure_helpers(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        nl.store(_block(out, i), value=_scaled(nl.load(_block(a, i)), -1.5))
    return out


def test_pure_helpers_keep_the_loop_rolled(rng):
    a = data(rng, 64, 8)
    c = check(k_pure_helpers, (a,), a * -1.5)
    assert loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0


class _Collector:
    def __init__(self):
        self.items = []

    def push(self, t):
        self.items.append(t)


@nkicc.jit
def k_method_mutates_self(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    col = _Collector()
    for i in nl.affine_range(4):
        col.push(nl.load(a[i * 16:(i + 1) * 16, :]))
    for j, t in enumerate(col.items):
        nl.store(out[j * 16:(j + 1) * 16, :], value=t)
    return out


def test_method_mutating_self(rng):
    a = data(rng, 64, 8)
    c = check(k_method_mutates_self, (a,), a)
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_closure_mutates(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = []

    def keep(t):
        tiles.append(t)

    for i in nl.affine_range(4):
        keep(nl.load(a[i * 16:(i + 1) * 16, :]))
    for j, t in enumerate(tiles):
        nl.store(out[j * 16:(j + 1) * 16, :], value=t)
    return out


def test_nested_closure_mutating_outer_list(rng):
    a = data(rng, 64, 8)
    c = check(k_closure_mutates, (a,), a)
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_lambda_mutates(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    seen = []
    bump = lambda: seen.append(0)  # noqa: E731
    for i in nl.affine_range(4):
        k = len(seen)
        bump()
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[(3 - k) * 16:(4 - k) * 16, :]))
    return out


def test_lambda_mutating_outer_list(rng):
    # no tile escapes here: only the effect checker can see the carried state
    a = data(rng, 64, 8)
    c = check(k_lambda_mutates, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_partial_mutates(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    seen = []
    bump = functools.partial(_push, seen)
    for i in nl.affine_range(4):
        k = len(seen)
        bump(0)
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[(3 - k) * 16:(4 - k) * 16, :]))
    return out


def test_functools_partial_of_mutating_helper(rng):
    a = data(rng, 64, 8)
    c = check(k_partial_mutates, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1


class _Counter:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n - 1


@nkicc.jit
def k_callable_object(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tick = _Counter()
    for i in nl.affine_range(4):
        k = tick()
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[(3 - k) * 16:(4 - k) * 16, :]))
    return out


def test_callable_object_with_state(rng):
    a = data(rng, 64, 8)
    c = check(k_callable_object, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_deque_method(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    order = collections.deque()
    for i in nl.affine_range(4):
        order.appendleft(0)  # a C method that mutates, not in the usual list
        k = len(order) - 1
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[(3 - k) * 16:(4 - k) * 16, :]))
    return out


def test_builtin_method_mutating_outer_object(rng):
    a = data(rng, 64, 8)
    c = check(k_deque_method, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_next_on_outer_iterator(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scales = iter([0.5, -1.0, 2.0, 3.5])
    for i in nl.affine_range(4):
        s = next(scales)  # advances an iterator that outlives the iteration
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(nl.load(a[i * 16:(i + 1) * 16, :]), s))
    return out


def test_builtin_next_on_outer_iterator(rng):
    a = data(rng, 64, 8)
    want = np.concatenate([b * s for b, s in zip(blocks(a, 16), [0.5, -1.0, 2.0, 3.5])])
    c = check(k_next_on_outer_iterator, (a,), want)
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_alias_of_outer(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    state = {"seen": []}
    for i in nl.affine_range(4):
        seen = state["seen"]  # a body name bound to an outer object
        k = len(seen)
        seen.append(0)
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[(3 - k) * 16:(4 - k) * 16, :]))
    return out


def test_mutation_through_an_alias_of_an_outer_object(rng):
    a = data(rng, 64, 8)
    c = check(k_alias_of_outer, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_inner_for_over_outer_iterator(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scales = iter([0.5, -1.0, 2.0, 3.5])
    for i in nl.affine_range(4):
        for s in scales:  # takes the next value and leaves the rest for later iterations
            break
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(nl.load(a[i * 16:(i + 1) * 16, :]), s))
    return out


def test_inner_for_over_outer_iterator(rng):
    a = data(rng, 64, 8)
    want = np.concatenate([b * s for b, s in zip(blocks(a, 16), [0.5, -1.0, 2.0, 3.5])])
    c = check(k_inner_for_over_outer_iterator, (a,), want)
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_zero_trip_inner(a, n):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.zeros((16, a.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(4):
        for j in range(n):
            x = nl.load(a[0:16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=x)  # with n == 0: last iteration's x
        x = nl.load(a[i * 16:(i + 1) * 16, :])
    return out


def test_name_bound_only_in_a_zero_trip_inner_loop(rng):
    a = data(rng, 64, 8)
    want = np.concatenate([np.zeros_like(a[:16])] + blocks(a, 16)[:3])
    c = check(k_zero_trip_inner, (a,), want, n=0)
    assert loops(c)["concrete"] >= 1
    check(k_zero_trip_inner, (a,), np.concatenate([a[:16]] * 4), n=2)


@nkicc.jit
def k_static_switch(a, carry, mode):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((16, a.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        if mode == "double" and not carry:
            t = nl.multiply(t, 2.0)
        if carry:
            acc = nl.add(acc, t)  # only traced when carry is set
        else:
            nisa.tensor_tensor(acc, acc, t, op=nl.add)
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    return out


@pytest.mark.parametrize("carry,mode", [(False, "plain"), (False, "double"), (True, "double")])
def test_compile_time_switch_in_body(rng, carry, mode):
    # a branch on compile-time constants is decided before tracing: the
    # untaken carried branch does not force the loop concrete
    a = data(rng, 80, 12)
    f = 2.0 if (mode == "double" and not carry) else 1.0
    pre = np.cumsum(np.stack(blocks(a, 16)) * f, axis=0)
    c = check(k_static_switch, (a,), np.concatenate(list(pre)), carry=carry, mode=mode)
    assert loops(c)["concrete"] == (1 if carry else 0)
    assert loops(c)["rolled"] == (0 if carry else 1)


@nkicc.jit
def k_switch_varies(a):
    out = nl.ndarray((3 * a.shape[0], a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        carry = i > 0  # one value per loop piece: a switch for the inner loop
        acc = nl.zeros((16, a.shape[1]), dtype=nl.float32)
        for j in nl.affine_range(4):
            t = nl.load(a[j * 16:(j + 1) * 16, :])
            if carry:
                acc = nl.add(acc, t)
            else:
                nisa.tensor_tensor(acc, acc, t, op=nl.add)
            nl.store(out[(i * 4 + j) * 16:(i * 4 + j + 1) * 16, :], value=acc)
    return out


def test_switch_value_differs_between_visits_of_a_loop(rng):
    # the inner loop is first seen with carry False (clean), then with carry True:
    # its effect check must not be reused across different switch values
    a = data(rng, 64, 8)
    pre = np.concatenate(list(np.cumsum(np.stack(blocks(a, 16)), axis=0)))
    check(k_switch_varies, (a,), np.concatenate([pre] * 3))


@nkicc.jit
def k_switch_rebound(a, flag):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((16, a.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        if flag:
            acc = nl.add(acc, t)
        else:
            acc = t
        flag = True  # the switch changes after the first iteration
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    return out


def test_switch_rebound_in_body_is_not_static(rng):
    a = data(rng, 64, 8)
    pre = np.cumsum(np.stack(blocks(a, 16)), axis=0)
    c = check(k_switch_rebound, (a,), np.concatenate(list(pre)), flag=False)
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_while_in_body(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        n = 0
        while n < 2:
            t = nl.add(t, 1.0)
            n += 1
        nl.store(out[i * 16:(i + 1) * 16, :], value=t)
    return out


def test_while_loop_on_body_locals_keeps_rolling(rng):
    a = data(rng, 64, 8)
    c = check(k_while_in_body, (a,), a + 2)
    assert loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0


class _State:
    pass


@nkicc.jit
def k_attribute_store(a):
    out = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    st = _State()
    for i in nl.affine_range(4):
        st.last = nl.load(a[i * 16:(i + 1) * 16, :])
    nl.store(out, value=st.last)
    return out


def test_store_into_outer_attribute(rng):
    a = data(rng, 64, 8)
    c = check(k_attribute_store, (a,), a[48:])
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_dict_store(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    d = {}
    for i in nl.affine_range(4):
        d[3 - i] = nl.load(a[i * 16:(i + 1) * 16, :])
    for k in range(4):
        nl.store(out[k * 16:(k + 1) * 16, :], value=d[k])
    return out


def test_store_into_outer_dict(rng):
    a = data(rng, 64, 8)
    check(k_dict_store, (a,), np.concatenate(blocks(a, 16)[::-1]))


def _rows_times(out, a, r0, s):
    for j in nl.affine_range(a.shape[1] // 8):
        nl.store(out[r0:r0 + 16, j * 8:(j + 1) * 8],
                 value=nl.multiply(nl.load(a[r0:r0 + 16, j * 8:(j + 1) * 8]), s))


@nkicc.jit
def k_helper_loop_twice(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        _rows_times(out, a, i * 16, 2.0)
        _rows_times(out2, b, i * 16, -3.0)
    return out, out2


def test_helper_with_its_own_loop_called_twice(rng):
    a, b = data(rng, 64, 24), data(rng, 64, 40)
    c = check(k_helper_loop_twice, (a, b), (a * 2, b * -3))
    assert loops(c)["rolled"] == 3 and loops(c)["concrete"] == 0
