"""Property: for generated loop nests, rolled == unrolled == numpy.

Kernels must live in a source file for rolling (it reads their AST), so the
"generated" kernels are templates whose structure is picked by compile-time
constants (non-array kernel arguments): trip counts, ragged tile sizes,
which condition on which indices, list indexing by an index, a loop-carried
tile, a tile escaping the nest. Hypothesis draws the constants.
"""
from __future__ import annotations

import inspect

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

from tests.support.compare import reordered, same_up_to_sums

# these tests are about tracing: keep the compile cache out of them (and their runtime)
NO_CACHE = {"cache": False} if "cache" in inspect.signature(nkicc.compile).parameters else {}

SCALE_LIST = [0.5, -1.0, 1.5, 2.0, -0.25, 3.0, 0.75, -2.0, 1.25]

SETTINGS = settings(max_examples=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _hit(cond, k, r, c, d):
    """The template's condition, in plain Python (also the numpy model's)."""
    if cond == 1:
        return r == k
    if cond == 2:
        return r + c < k
    if cond == 3:
        return c <= r
    if cond == 4:
        return d < k
    if cond == 5:
        return max(r, c) >= k
    return False


@nkicc.jit
def nest_kernel(a, n_r, rt, n_c, ct, cond, k, use_list, carry, escape, tri):
    D, R, C = a.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((R - (n_r - 1) * rt, C - (n_c - 1) * ct), dtype=nl.float32, buffer=nl.shared_hbm)
    for r in nl.affine_range(n_r):
        r0 = r * rt
        r1 = min(R, r0 + rt)
        for c in nl.affine_range(n_c):
            c0 = c * ct
            c1 = min(C, c0 + ct)
            acc = nl.zeros((r1 - r0, c1 - c0), dtype=nl.float32)
            n_d = min(D, r + 1) if tri else D
            for d in nl.affine_range(n_d):
                t = nl.load(a[d, r0:r1, c0:c1])
                if cond == 1:
                    hit = r == k
                elif cond == 2:
                    hit = r + c < k
                elif cond == 3:
                    hit = c <= r
                elif cond == 4:
                    hit = d < k
                elif cond == 5:
                    hit = max(r, c) >= k
                else:
                    hit = False
                if hit:
                    v = nl.multiply(t, 2.0)
                else:
                    v = nl.add(t, 1.0)
                if use_list:
                    v = nl.multiply(v, SCALE_LIST[c])
                if carry:
                    acc = nl.add(acc, v)  # rebinding: carried from one iteration to the next
                else:
                    nisa.tensor_tensor(acc, acc, v, op=nl.add)
            nl.store(out[r0:r1, c0:c1], value=acc)
    if escape:
        nl.store(last, value=t)  # the innermost tile of the last iteration
    else:
        nl.store(last, value=nl.load(a[D - 1, (n_r - 1) * rt:R, (n_c - 1) * ct:C]))
    return out, last


def nest_model(a, n_r, rt, n_c, ct, cond, k, use_list, carry, escape, tri):
    D, R, C = a.shape
    out = np.zeros((R, C), np.float32)
    for r in range(n_r):
        r0, r1 = r * rt, min(R, r * rt + rt)
        for c in range(n_c):
            c0, c1 = c * ct, min(C, c * ct + ct)
            acc = np.zeros((r1 - r0, c1 - c0), np.float32)
            for d in range(min(D, r + 1) if tri else D):
                t = a[d, r0:r1, c0:c1]
                v = t * 2 if _hit(cond, k, r, c, d) else t + 1
                if use_list:
                    v = v * SCALE_LIST[c]
                acc = acc + v
            out[r0:r1, c0:c1] = acc
    d_last = (min(D, n_r) - 1 if tri else D - 1) if escape else D - 1
    last = a[d_last, (n_r - 1) * rt:, (n_c - 1) * ct:]
    return out, last


@st.composite
def nests(draw):
    n_r = draw(st.integers(1, 9))
    rt = draw(st.sampled_from([8, 16, 32]))
    rr = draw(st.integers(1, rt))  # ragged last row tile
    n_c = draw(st.integers(1, 9))
    ct = draw(st.sampled_from([4, 8, 16]))
    cr = draw(st.integers(1, ct))
    depth = draw(st.integers(1, 3))  # 1..3 deep: a trip of 1 is no loop at all
    D = draw(st.integers(2, 4)) if depth == 3 else 1
    if depth == 1:
        n_c, cr = 1, ct
    shape = (D, (n_r - 1) * rt + rr, (n_c - 1) * ct + cr)
    consts = dict(
        n_r=n_r, rt=rt, n_c=n_c, ct=ct,
        cond=draw(st.integers(0, 5)), k=draw(st.integers(0, 9)),
        use_list=draw(st.booleans()), carry=draw(st.booleans()),
        escape=draw(st.integers(0, 3)) == 0,  # some of the time
        tri=draw(st.integers(0, 3)) == 0,
    )
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return shape, consts, seed


def _run_both(kernel, arrays, consts):
    rolled = nkicc.compile(kernel, *arrays, **NO_CACHE, **consts)
    unrolled = nkicc.compile(kernel, *arrays, unroll=True, **NO_CACHE, **consts)
    r, u = rolled.run(*arrays), unrolled.run(*arrays)
    r, u = (r if isinstance(r, tuple) else (r,)), (u if isinstance(u, tuple) else (u,))
    for x, y in zip(r, u):  # exact, up to the order of fp32 sums where rolled loops ran them batched
        same_up_to_sums(x, y, reordered(rolled), err_msg="rolled differs from unrolled")
    assert rolled.report["instructions_executed"] == unrolled.report["instructions_executed"]
    assert unrolled.report["loops"]["rolled"] == 0
    return rolled, r


@SETTINGS
@given(nests())
def test_loop_nests_rolled_equals_unrolled(case):
    shape, consts, seed = case
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    rolled, got = _run_both(nest_kernel, (a,), consts)
    for g, want in zip(got, nest_model(a, **consts)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
    # rolling must not cost more instructions than unrolling, and the clean
    # multi-iteration nests actually roll
    assert rolled.report["instructions_rolled"] <= rolled.report["instructions_unrolled"]
    clean = not (consts["use_list"] or consts["escape"] or consts["tri"] or consts["carry"] or consts["cond"])
    if clean:
        # a loop rolls where a piece of two or more iterations is left after
        # peeling the last iteration: `min(R, r0 + rt)` asks `r0 + rt < R`,
        # whose answer changes at the last iteration even when R % rt == 0
        multi = consts["n_r"] - 1 >= 2 or consts["n_c"] - 1 >= 2 or shape[0] >= 2
        assert rolled.report["loops"]["concrete"] == 0
        assert (rolled.report["loops"]["rolled"] >= 1) == multi
    if not (consts["carry"] or consts["escape"] or consts["tri"] or consts["cond"] == 4) and shape[0] >= 2:
        assert rolled.report["loops"]["rolled"] >= 1  # the innermost loop over d rolls


# --- lists of tiles, nl.ds, stepped and negative ranges ------------------------------------

@nkicc.jit
def chunks_kernel(a, n_k, kt, start, stop, step, pick, scale_by_index):
    P = a.shape[0]
    out = nl.ndarray((P, n_k * kt), dtype=nl.float32, buffer=nl.shared_hbm)
    chunks = []
    for k in nl.affine_range(n_k):
        chunks.append(nl.load(a[:, nl.ds(k * kt, kt)]))
    for j in nl.affine_range(n_k):
        src = chunks[(j * pick) % n_k]
        nl.store(out[:, nl.ds(j * kt, kt)], value=nl.multiply(src, 2.0))
    for j in range(start, stop, step):  # rolled unless the index is needed as an int
        t = nl.load(a[:, nl.ds(j * kt, kt)])
        if j > n_k // 2:
            t = nl.negative(t)
        if scale_by_index:
            t = nl.multiply(t, SCALE_LIST[j])
        nl.store(out[:, nl.ds(j * kt, kt)], value=t)
    return out


def chunks_model(a, n_k, kt, start, stop, step, pick, scale_by_index):
    bl = [a[:, k * kt:(k + 1) * kt] for k in range(n_k)]
    out = np.concatenate([bl[(j * pick) % n_k] * 2 for j in range(n_k)], axis=1)
    for j in range(start, stop, step):
        t = -bl[j] if j > n_k // 2 else bl[j]
        if scale_by_index:
            t = t * SCALE_LIST[j]
        out[:, j * kt:(j + 1) * kt] = t
    return out


@st.composite
def chunk_cases(draw):
    n_k = draw(st.integers(1, 9))
    kt = draw(st.sampled_from([4, 8]))
    step = draw(st.sampled_from([1, 2, 3, -1, -2]))
    a, b = draw(st.integers(0, n_k - 1)), draw(st.integers(0, n_k - 1))
    start, stop = (min(a, b), max(a, b) + 1) if step > 0 else (max(a, b), min(a, b) - 1)
    consts = dict(n_k=n_k, kt=kt, start=start, stop=stop, step=step,
                  pick=draw(st.integers(1, 4)), scale_by_index=draw(st.booleans()))
    rows = draw(st.sampled_from([16, 64, 128]))
    return (rows, n_k * kt), consts, draw(st.integers(0, 2 ** 32 - 1))


@settings(max_examples=20, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chunk_cases())
def test_tile_lists_and_stepped_ranges(case):
    shape, consts, seed = case
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    _, (got,) = _run_both(chunks_kernel, (a,), consts)
    np.testing.assert_allclose(got, chunks_model(a, **consts), rtol=1e-5, atol=1e-5)
