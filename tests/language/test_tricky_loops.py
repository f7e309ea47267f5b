"""Tricky loops: rolling must give exactly what full unrolling gives.
(What the proof that a body carries no Python state decides, language/loop_effects.py,
has its own file: tests/language/test_loop_effects.py.)

Every test compiles a kernel twice, rolled (`nkicc.compile(k, *arrays)`) and
fully unrolled (`unroll=True`, NKI's own trace semantics), checks that both
produce bit-identical outputs, that they agree with numpy, and that the same
number of instructions execute; then it checks the rolling decision where the
case is about one (rolled / split / concrete).

Kernels live in this file on purpose: rolling reads the kernel's source (AST).
"""
from __future__ import annotations

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError

from tests.support.rolling import NO_CACHE, blocks, check, data, loops

# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api("nl.affine_range", "nl.sequential_range", "nl.static_range", "nl.dynamic_range")


# --- list accumulation across iterations (seed_einsum_affine shape) -------------------

@nkicc.jit
def k_list_accum(A, B):
    M, K = A.shape
    N = B.shape[1]
    E = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m0 in nl.affine_range(M // 32):
        A_chunks = []
        for k0 in range(K // 32):
            A_chunks.append(nl.load_transpose2d(A[m0 * 32:(m0 + 1) * 32, k0 * 32:(k0 + 1) * 32]))
        acc = nl.zeros((32, N), dtype=nl.float32, buffer=nl.psum)
        for k0 in nl.affine_range(K // 32):
            b = nl.load(B[k0 * 32:(k0 + 1) * 32, :])
            nisa.nc_matmul(acc, A_chunks[k0], b)
        res = nl.ndarray((32, N), dtype=nl.float32)
        nisa.tensor_copy(res, acc)
        nl.store(E[m0 * 32:(m0 + 1) * 32, :], value=res)
    return E


def test_list_accumulation_across_iterations(rng):
    A, B = data(rng, 96, 128), data(rng, 128, 48)
    c = check(k_list_accum, (A, B), A @ B)
    # the m0 loop owns its list and rolls; the append loop and the chunks[k0] loop are concrete
    assert loops(c)["rolled"] >= 1
    assert loops(c)["concrete"] >= 2
    reasons = " ".join(c.trace.decisions["concrete"].values())
    assert "append" in reasons


@nkicc.jit
def k_list_outer(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(4):
        tiles.append(nl.load(a[i * 16:(i + 1) * 16, :]))
    for j in nl.affine_range(4):
        nl.store(out[j * 16:(j + 1) * 16, :], value=nl.subtract(tiles[j], tiles[3 - j]))
    return out


def test_list_built_in_one_loop_used_in_next(rng):
    a = data(rng, 64, 24)
    bl = blocks(a, 16)
    want = np.concatenate([bl[j] - bl[3 - j] for j in range(4)])
    c = check(k_list_outer, (a,), want)
    assert loops(c)["rolled"] == 0 and loops(c)["concrete"] == 2


# --- counters on outer names -----------------------------------------------------------

@nkicc.jit
def k_counter(a):
    out = nl.ndarray((48, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    tail = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    c = 0
    for i in nl.affine_range(3):
        t = nl.load(a[c * 16:(c + 1) * 16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.add(t, 1.0))
        c += 2
    nl.store(tail, value=nl.load(a[c * 16:(c + 1) * 16, :]))  # c == 6 after the loop
    return out, tail


def test_counter_on_outer_int(rng):
    a = data(rng, 7 * 16, 8)
    bl = blocks(a, 16)
    c = check(k_counter, (a,), (np.concatenate([bl[0], bl[2], bl[4]]) + 1, bl[6]))
    assert loops(c)["concrete"] == 1 and loops(c)["rolled"] == 0


@nkicc.jit
def k_counter_down(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    c = 3
    for i in range(4):
        t = nl.load(a[c * 16:(c + 1) * 16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=t)
        c -= 1
    return out


def test_counter_counting_down(rng):
    a = data(rng, 64, 8)
    c = check(k_counter_down, (a,), np.concatenate(blocks(a, 16)[::-1]))
    assert loops(c)["concrete"] == 1


# --- tiles carried from one iteration to the next ---------------------------------------

@nkicc.jit
def k_carried_tile(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    total = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((16, a.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        acc = nl.add(acc, t)
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    nl.store(total, value=acc)
    return out, total


def test_tile_reassigned_each_iteration(rng):
    a = data(rng, 80, 12)
    pre = np.cumsum(np.stack(blocks(a, 16)), axis=0)
    c = check(k_carried_tile, (a,), (np.concatenate(list(pre)), pre[-1]))
    assert loops(c)["concrete"] == 1 and loops(c)["rolled"] == 0


@nkicc.jit
def k_inplace_accum(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((16, a.shape[1]), dtype=nl.float32)
    for i in nl.sequential_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        nisa.tensor_tensor(acc, acc, t, op=nl.add)  # the name is not rebound: rolls
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    return out


def test_inplace_accumulation_rolls(rng):
    a = data(rng, 80, 12)
    pre = np.cumsum(np.stack(blocks(a, 16)), axis=0)
    c = check(k_inplace_accum, (a,), np.concatenate(list(pre)))
    assert loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0
    assert c.report["instructions_rolled"] < c.report["instructions_unrolled"]


@nkicc.jit
def k_cond_init_accum(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        if i == 0:
            acc = t
        else:
            acc = nl.add(acc, t)  # reads the previous iteration's acc
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    return out


def test_tile_carried_through_conditional_init(rng):
    # `acc` is bound on the if-branch only; the else-branch reads last iteration's value
    a = data(rng, 80, 12)
    pre = np.cumsum(np.stack(blocks(a, 16)), axis=0)
    c = check(k_cond_init_accum, (a,), np.concatenate(list(pre)))
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_ping_pong(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    cur = nl.zeros((16, a.shape[1]), dtype=nl.float32)
    nxt = nl.ones((16, a.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        nisa.tensor_tensor(cur, cur, t, op=nl.add)
        nl.store(out[i * 16:(i + 1) * 16, :], value=cur)
        cur, nxt = nxt, cur
    return out


def test_ping_pong_buffers(rng):
    a = data(rng, 80, 12)
    bl = blocks(a, 16)
    bufs = [np.zeros_like(bl[0]), np.ones_like(bl[0])]
    want = []
    for i, b in enumerate(bl):
        bufs[i % 2] = bufs[i % 2] + b
        want.append(bufs[i % 2])
    c = check(k_ping_pong, (a,), np.concatenate(want))
    assert loops(c)["concrete"] == 1


# --- tiles and indices escaping the loop ------------------------------------------------

@nkicc.jit
def k_tile_escapes(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    last = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(t, 2.0))
    nl.store(last, value=nl.negative(t))  # the last iteration's tile
    return out, last


def test_tile_escaping_the_loop(rng):
    a = data(rng, 64, 8)
    c = check(k_tile_escapes, (a,), (a * 2, -a[48:]))
    assert loops(c)["concrete"] == 1 and loops(c)["rolled"] == 0
    assert any("used after its loop" in r for r in c.trace.decisions["concrete"].values())


@nkicc.jit
def k_tile_escapes_inner(a):
    out = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        for j in nl.affine_range(a.shape[1] // 8):
            t = nl.load(a[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8])
        nl.store(out[i * 16:(i + 1) * 16, :], value=t)  # the inner loop's last tile
    return out


def test_tile_escaping_an_inner_loop(rng):
    a = data(rng, 64, 32)
    c = check(k_tile_escapes_inner, (a,), a[:, 24:32])
    assert loops(c)["concrete"] >= 1


@nkicc.jit
def k_index_escapes(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tail = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.load(a[i * 16:(i + 1) * 16, :]))
        last = i
    nl.store(tail, value=nl.exp(nl.load(a[last * 16:(last + 1) * 16, :])))
    return out, tail


def test_index_escaping_the_loop(rng):
    a = data(rng, 64, 8)
    c = check(k_index_escapes, (a,), (a, np.exp(a[48:])))
    assert loops(c)["concrete"] == 1


@nkicc.jit
def k_loop_var_after(a, n):
    out = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        pass
    if i > 1:  # a Python decision on the index after the loop
        nl.store(out, value=nl.load(a[i * 16:(i + 1) * 16, :]))
    else:
        nl.store(out, value=nl.load(a[0:16, :]))
    return out


def test_loop_variable_read_after_empty_body(rng):
    a = data(rng, 64, 8)
    check(k_loop_var_after, (a,), a[48:], n=4)


# --- splits: min()/max() ragged tiles and conditionals on indices ----------------------------

@nkicc.jit
def k_ragged_rows(a):
    n = a.shape[0]
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((n + 127) // 128):
        lo = i * 128
        hi = min(n, lo + 128)
        nl.store(out[lo:hi, :], value=nl.multiply(nl.load(a[lo:hi, :]), 2.0))
    return out


def test_min_gives_ragged_last_tile(rng):
    a = data(rng, 300 + 128 * 3, 16)
    c = check(k_ragged_rows, (a,), a * 2)
    assert loops(c)["split"] == 1 and loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0
    assert c.report["instructions_rolled"] < c.report["instructions_unrolled"]


@nkicc.jit
def k_window(a):
    W = a.shape[1]
    out = nl.ndarray((a.shape[0], W // 40), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(W // 40):
        lo = max(0, i * 40 - 12)
        hi = min(W, i * 40 + 52)
        s = nl.sum(nl.load(a[:, lo:hi]), axis=1, keepdims=True)
        nl.store(out[:, i:i + 1], value=s)
    return out


def test_min_and_max_window_split_both_ends(rng):
    a = data(rng, 32, 280)
    want = np.stack([a[:, max(0, i * 40 - 12):min(280, i * 40 + 52)].sum(1) for i in range(7)], axis=1)
    c = check(k_window, (a,), want)
    assert loops(c)["split"] == 1 and loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0
    (splits,) = c.trace.decisions["splits"].values()
    assert splits == [1, 6]


@nkicc.jit
def k_if_first(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        if i == 0:
            r = nl.multiply(t, 2.0)
        else:
            r = nl.add(t, 1.0)
        nl.store(out[i * 16:(i + 1) * 16, :], value=r)
    return out


def test_if_i_equals_zero_peels_first_iteration(rng):
    a = data(rng, 96, 8)
    want = a + 1
    want[:16] = a[:16] * 2
    c = check(k_if_first, (a,), want)
    assert loops(c)["split"] == 1 and loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0


@nkicc.jit
def k_if_less(a, n_fast):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        if i < n_fast:
            r = nl.multiply(t, 2.0)
        elif 3 < i <= 5:
            r = nl.negative(t)
        else:
            r = nl.exp(t)
        nl.store(out[i * 16:(i + 1) * 16, :], value=r)
    return out


@pytest.mark.parametrize("n_fast", [0, 2, 5, 8])
def test_if_i_less_than_n_splits(rng, n_fast):
    a = data(rng, 128, 8)
    want = []
    for i, b in enumerate(blocks(a, 16)):
        want.append(b * 2 if i < n_fast else (-b if 3 < i <= 5 else np.exp(b)))
    c = check(k_if_less, (a,), np.concatenate(want), n_fast=n_fast)
    assert loops(c)["concrete"] == 0 and loops(c)["rolled"] >= 1


@nkicc.jit
def k_two_index(a, mode):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        for j in nl.affine_range(a.shape[1] // 8):
            t = nl.load(a[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8])
            if mode == "sum":
                hit = i + j < 4
            elif mode == "tri":
                hit = j <= i
            else:
                hit = i == j
            if hit:
                r = nl.multiply(t, 2.0)
            else:
                r = nl.negative(t)
            nl.store(out[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8], value=r)
    return out


@pytest.mark.parametrize("mode", ["sum", "tri", "diag"])
def test_condition_on_two_indices(rng, mode):
    a = data(rng, 64, 40)
    want = np.empty_like(a)
    for i in range(4):
        for j in range(5):
            hit = {"sum": i + j < 4, "tri": j <= i, "diag": i == j}[mode]
            b = a[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8]
            want[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8] = b * 2 if hit else -b
    c = check(k_two_index, (a,), want, mode=mode)
    assert loops(c)["split"] + loops(c)["concrete"] >= 1


@nkicc.jit
def k_index_arith(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        if abs(i - 2) <= 1:
            r = nl.multiply(t, 2.0)
        elif i in (0, 5):
            r = nl.negative(t)
        elif i % 2 == 0:
            r = nl.add(t, 1.0)
        else:
            r = t
        nl.store(out[i * 16:(i + 1) * 16, :], value=r)
    return out


def test_abs_membership_and_parity_of_index(rng):
    a = data(rng, 128, 8)
    want = []
    for i, b in enumerate(blocks(a, 16)):
        want.append(b * 2 if abs(i - 2) <= 1 else (-b if i in (0, 5) else (b + 1 if i % 2 == 0 else b)))
    check(k_index_arith, (a,), np.concatenate(want))


@nkicc.jit
def k_index_ops(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        q, r = divmod(i, 2)
        s = i / 2 + 2 ** i + (1 << i) + round(i)
        t = nl.load(a[(q * 2 + r) * 16:(q * 2 + r + 1) * 16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(t, s))
    return out


def test_python_int_operators_on_index(rng):
    # operators without an affine meaning must trace the loop concretely, never fail
    a = data(rng, 64, 8)
    want = np.concatenate([b * (i / 2 + 2 ** i + (1 << i) + i) for i, b in enumerate(blocks(a, 16))])
    c = check(k_index_ops, (a,), want)
    assert loops(c)["concrete"] == 1


# --- Python ints needed: list indexing, range(i) ------------------------------------------

@nkicc.jit
def k_index_as_scalar_operand(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.add(nl.multiply(t, i), i + 1))
    return out


def test_loop_index_as_scalar_operand(rng):
    a = data(rng, 64, 8)
    want = np.concatenate([b * i + (i + 1) for i, b in enumerate(blocks(a, 16))])
    check(k_index_as_scalar_operand, (a,), want)



SCALES = [0.5, 1.5, -2.0, 3.0]


@nkicc.jit
def k_list_index(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(nl.load(a[i * 16:(i + 1) * 16, :]), SCALES[i]))
    return out


def test_list_indexing_by_loop_index(rng):
    a = data(rng, 64, 8)
    c = check(k_list_index, (a,), np.concatenate([b * s for b, s in zip(blocks(a, 16), SCALES)]))
    assert loops(c)["concrete"] == 1 and loops(c)["rolled"] == 0
    assert "Python int" in " ".join(c.trace.decisions["concrete"].values())


@nkicc.jit
def k_triangular(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        acc = nl.load(a[i * 16:(i + 1) * 16, :])
        for j in range(i):
            nisa.tensor_tensor(acc, acc, nl.load(a[j * 16:(j + 1) * 16, :]), op=nl.add)
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    return out


def test_inner_range_of_outer_index(rng):
    a = data(rng, 80, 8)
    pre = np.cumsum(np.stack(blocks(a, 16)), axis=0)
    c = check(k_triangular, (a,), np.concatenate(list(pre)))
    assert loops(c)["concrete"] == 1 and loops(c)["rolled"] >= 1


@nkicc.jit
def k_enumerate_zip(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for k, i in enumerate(nl.affine_range(4)):
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(nl.load(a[k * 16:(k + 1) * 16, :]), SCALES[k]))
    return out


def test_enumerate_over_loop_iterator(rng):
    a = data(rng, 64, 8)
    check(k_enumerate_zip, (a,), np.concatenate([b * s for b, s in zip(blocks(a, 16), SCALES)]))


# --- nests, labels, nl.ds, steps -----------------------------------------------------------

@nkicc.jit
def k_nest3(a, b):
    D, R, C = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for d in nl.affine_range(D):
        for i in nl.affine_range((R + 63) // 64):
            r0 = i * 64
            r1 = min(R, r0 + 64)
            for j in nl.affine_range((C + 31) // 32):
                c0 = j * 32
                c1 = min(C, c0 + 32)
                x = nl.load(a[d, r0:r1, c0:c1])
                y = nl.load(b[d, r0:r1, c0:c1])
                nl.store(out[d, r0:r1, c0:c1], value=nl.add(nl.multiply(x, 2.0), y))
    return out


def test_three_deep_nest_with_ragged_tiles(rng):
    a, b = data(rng, 3, 150, 70), data(rng, 3, 150, 70)
    c = check(k_nest3, (a, b), 2 * a + b)
    assert loops(c)["split"] >= 2 and loops(c)["rolled"] >= 3 and loops(c)["concrete"] == 0
    assert c.report["instructions_rolled"] * 4 < c.report["instructions_unrolled"]


@nkicc.jit
def k_fstring_labels(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 16):
        for j in nl.affine_range(a.shape[1] // 8):
            t = nl.load(a[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8], name=f"in_{i}_{j}")
            buf = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf, name=f"buf_{i}_{j}")
            nisa.tensor_scalar(buf, t, nl.multiply, 3.0)
            nl.store(out[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8], value=buf)
    return out


def test_fstring_labels_keep_loops_rolled(rng):
    a = data(rng, 64, 24)
    c = check(k_fstring_labels, (a,), a * 3)
    assert loops(c)["rolled"] == 2 and loops(c)["concrete"] == 0


@nkicc.jit
def k_ds(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 32):
        t = nl.load(a[nl.ds(i * 32, 32), :])
        nl.store(out[nl.ds(i * 32, 32), :], value=nl.sqrt(nl.abs(t)))
    return out


def test_nl_ds_with_index(rng):
    a = data(rng, 128, 16)
    c = check(k_ds, (a,), np.sqrt(np.abs(a)))
    assert loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0


@nkicc.jit
def k_steps(a):
    out_a = nl.ndarray((5 * 8, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    out_b = nl.ndarray((4 * 8, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(10, 0, -2):
        t = nl.load(a[i * 8:(i + 1) * 8, :])
        if i > 5:
            r = nl.multiply(t, 2.0)
        else:
            r = nl.negative(t)
        k = (10 - i) // 2
        nl.store(out_a[k * 8:(k + 1) * 8, :], value=r)
    for i in nl.static_range(3, 17, 4):
        k = (i - 3) // 4
        nl.store(out_b[k * 8:(k + 1) * 8, :], value=nl.add(nl.load(a[i * 8:(i + 1) * 8, :]), 1.0))
    return out_a, out_b


def test_negative_and_stepped_ranges(rng):
    a = data(rng, 16 * 8, 8)
    bl = blocks(a, 8)
    want_a = np.concatenate([bl[i] * 2 if i > 5 else -bl[i] for i in range(10, 0, -2)])
    want_b = np.concatenate([bl[i] + 1 for i in range(3, 17, 4)])
    c = check(k_steps, (a,), (want_a, want_b))
    assert loops(c)["concrete"] == 0 and loops(c)["rolled"] == 3 and loops(c)["split"] == 1


@nkicc.jit
def k_comprehension(a):
    out = nl.ndarray(a.shape[1:], dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1] // 16):
        ts = [nl.load(a[j, i * 16:(i + 1) * 16, :]) for j in range(3)]
        acc = nl.add(nl.add(ts[0], ts[1]), ts[2])
        nl.store(out[i * 16:(i + 1) * 16, :], value=acc)
    return out


def test_comprehension_inside_rolled_loop(rng):
    a = data(rng, 3, 64, 12)
    c = check(k_comprehension, (a,), a[0] + a[1] + a[2])
    assert loops(c)["rolled"] == 1 and loops(c)["concrete"] == 0


# --- except Exception must not swallow the retry signal ------------------------------------

@nkicc.jit
def k_except_min(a):
    n = a.shape[0]
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((n + 127) // 128):
        try:
            hi = min(n, i * 128 + 128)
        except Exception:
            hi = i * 128 + 128
        nl.store(out[i * 128:hi, :], value=nl.negative(nl.load(a[i * 128:hi, :])))
    return out


@nkicc.jit
def k_except_index(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        try:
            s = SCALES[i]
        except Exception:
            s = 1.0
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(nl.load(a[i * 16:(i + 1) * 16, :]), s))
    return out


def test_except_exception_does_not_swallow_retry(rng):
    a = data(rng, 300, 8)
    c = check(k_except_min, (a,), -a)
    assert loops(c)["split"] == 1
    b = data(rng, 64, 8)
    c = check(k_except_index, (b,), np.concatenate([x * s for x, s in zip(blocks(b, 16), SCALES)]))
    assert loops(c)["concrete"] == 1


# --- trip counts 0 and 1 ------------------------------------------------------------------

@nkicc.jit
def k_trips(a, n0, n1):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n1):
        t = nl.load(a[i * 16:(i + 1) * 16, :])
        nl.store(out[i * 16:(i + 1) * 16, :], value=nl.multiply(t, 2.0))
    for i in range(n0):
        nl.store(out[999:1000, :], value=t)  # never traced: would be out of bounds
    for i in nl.affine_range(5, 5 + n0):
        raise RuntimeError("a zero-trip body must not run")
    for j in nl.affine_range(n1):
        last = j
    nl.store(out[16:32, :], value=nl.add(nl.load(a[(last + 1) * 16:(last + 2) * 16, :]), 1.0))
    return out


def test_trip_counts_zero_and_one(rng):
    a = data(rng, 32, 8)
    want = np.concatenate([a[:16] * 2, a[16:] + 1])
    c = check(k_trips, (a,), want, n0=0, n1=1)
    assert loops(c)["rolled"] == 0 and loops(c)["concrete"] == 0
    assert c.report["instructions_rolled"] == c.report["instructions_unrolled"]


# --- dynamic_range: the index is a register ------------------------------------------------

@nkicc.jit
def k_dynamic(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.dynamic_range(a.shape[0] // 32):
        t = nl.load(a[nl.ds(i * 32, 32), :])
        nl.store(out[nl.ds(i * 32, 32), :], value=nl.multiply(t, 2.0))
    return out


def test_dynamic_range_runs_as_runtime_loop(rng):
    a = data(rng, 128, 16)
    c = check(k_dynamic, (a,), a * 2)
    assert loops(c)["dynamic"] == 1 and loops(c)["rolled"] == 0 and loops(c)["concrete"] == 0


@nkicc.jit
def k_dynamic_if(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.dynamic_range(a.shape[0] // 32):
        t = nl.load(a[nl.ds(i * 32, 32), :])
        if i == 0:
            t = nl.multiply(t, 2.0)
        nl.store(out[nl.ds(i * 32, 32), :], value=t)
    return out


@nkicc.jit
def k_dynamic_list(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.dynamic_range(4):
        nl.store(out[nl.ds(i * 16, 16), :], value=nl.multiply(nl.load(a[nl.ds(i * 16, 16), :]), SCALES[i]))
    return out


@nkicc.jit
def k_dynamic_escapes(a):
    out = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.dynamic_range(4):
        pass
    nl.store(out, value=nl.load(a[nl.ds(i * 16, 16), :]))
    return out


@pytest.mark.parametrize("unroll", [False, True])
@pytest.mark.parametrize("kernel,code", [(k_dynamic_if, "E150"), (k_dynamic_list, "E150"),
                                         (k_dynamic_escapes, "E151")])
def test_dynamic_index_in_python_is_an_error(rng, kernel, code, unroll):
    a = data(rng, 128, 16)[:64] if kernel is not k_dynamic_if else data(rng, 128, 16)
    with pytest.raises(NkiccError) as info:
        nkicc.compile(kernel, a, unroll=unroll, **NO_CACHE)
    assert info.value.code == code
