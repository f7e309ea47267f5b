"""Conformance: the sort and search instructions. max8, nc_find_index8 and
nc_match_replace8 (Vector Engine, 8 values per partition), topk, nonzero_with_count
and sequence_bounds (GpSimd Engine), against numpy oracles written with plain
loops, on random data with ties and absent values."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.api import resolve_target
from nkicc.ir import ops
from nkicc.passes import registry
from tests.support.ops_helpers import bf16, check_error, f32, rand, rounded, run_rolled_and_unrolled
from tests.support.sim_helpers import run_both_simulators

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.max8",
    "nisa.sequence_bounds",
    "nisa.nc_find_index8",
    "nisa.nc_match_replace8",
    "nisa.nonzero_with_count",
    "nisa.topk")


def tied(rng, shape, dtype=np.float32, levels=12):
    """Random values from a few levels: ties are certain."""
    return (rng.integers(-levels // 2, levels // 2, size=shape) * 0.75).astype(dtype)


# --- max8 ----------------------------------------------------------------------------


def max8_kernel(out_dtype=None):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], 8), dtype=out_dtype or a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((a.shape[0], 8), dtype=out_dtype or a.dtype, buffer=nl.sbuf)
        nisa.max8(dst=t, src=nl.load(a))
        nl.store(out, value=t)
        return out
    return k


def max8_ref(a):
    return np.array([sorted(row, reverse=True)[:8] for row in f32(a).reshape(a.shape[0], -1)])


@pytest.mark.parametrize("shape", [(128, 64), (1, 8), (3, 16384), (128, 9), (16, 4, 5), (8, 6, 7)])
def test_max8_random_and_tied(rng, shape):
    for a in (rand(rng, shape, lo=-50, hi=50), tied(rng, shape)):
        got = run_both_simulators(max8_kernel(), a)
        np.testing.assert_array_equal(got, max8_ref(a))


@pytest.mark.parametrize("in_dt,out_dt", [(bf16, bf16), (bf16, np.float32), (np.float32, bf16), (np.int32, np.int32),
                                          (np.float16, np.float32)])
def test_max8_dtypes(rng, in_dt, out_dt):
    a = rand(rng, (64, 100), in_dt, -1000, 1000)
    got = run_both_simulators(max8_kernel(out_dt), a)
    assert got.dtype == np.dtype(out_dt)
    np.testing.assert_array_equal(f32(got), rounded(max8_ref(a), out_dt))


# --- nc_find_index8 ------------------------------------------------------------------


def find_index8_ref(data, vals, absent):
    data = f32(data).reshape(data.shape[0], -1)
    vals = f32(vals).reshape(vals.shape[0], -1)
    out = np.full(vals.shape, absent, dtype=np.int64)
    for p in range(data.shape[0]):
        used = set()
        for i in range(8):
            for j in range(data.shape[1]):
                if data[p, j] == vals[p, i] and j not in used:
                    out[p, i] = j
                    used.add(j)
                    break
    return out


def find_index8_kernel(idx_dtype):
    @nkicc.jit
    def k(data, vals):
        out = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=t, data=nl.load(data), vals=nl.load(vals))
        nl.store(out, value=t)
        return out
    return k


def vals_with_absent_and_repeats(rng, data):
    """Per partition: values present (some repeated, so a repeat may run out of
    occurrences) and values absent from the data."""
    flat = f32(data).reshape(data.shape[0], -1)
    vals = np.empty((data.shape[0], 8), np.float32)
    for p in range(data.shape[0]):
        present = rng.choice(flat[p], size=5)
        vals[p] = np.concatenate([present, [present[0], 1000.5 + p, -777.25]])
        rng.shuffle(vals[p])
    return vals.astype(data.dtype)


@pytest.mark.parametrize("shape", [(128, 40), (1, 8), (2, 16384), (32, 3, 7)])
@pytest.mark.parametrize("idx_dtype,absent", [(np.uint32, 0xFFFFFFFF), (np.uint16, 0xFFFF)])
def test_find_index8_ties_absent_and_repeats(rng, shape, idx_dtype, absent):
    data = tied(rng, shape, levels=10 if shape[-1] > 8 else 4)
    vals = vals_with_absent_and_repeats(rng, data)
    got = run_both_simulators(find_index8_kernel(idx_dtype), data, vals)
    assert got.dtype == np.dtype(idx_dtype)
    want = find_index8_ref(data, vals, absent)
    np.testing.assert_array_equal(got, want)
    assert (got == absent).any() and (got != absent).any()


def test_find_index8_bf16_data_compared_in_fp32(rng):
    data = rand(rng, (16, 64), bf16, -3, 3)
    vals = f32(data)[:, [5, 0, 63, 7, 7, 20, 33, 1]].astype(bf16)
    got = run_both_simulators(find_index8_kernel(np.uint32), data, vals)
    np.testing.assert_array_equal(got, find_index8_ref(data, vals, 0xFFFFFFFF))


def test_find_index8_of_max8_in_a_loop(rng):
    # max8 then find_index8 per row block: the argmax-8 pattern; rolled == unrolled == numpy
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 32):
            d = nl.load(a[nl.ds(32 * i, 32), :])
            m = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.max8(dst=m, src=d)
            idx = nl.ndarray((32, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.nc_find_index8(dst=idx, data=d, vals=m)
            nl.store(out[nl.ds(32 * i, 32), :], value=idx)
        return out

    a = tied(rng, (96, 50), levels=20)
    got = run_rolled_and_unrolled(k, a)
    np.testing.assert_array_equal(got, find_index8_ref(a, max8_ref(a), 0xFFFFFFFF))


# --- nc_match_replace8 ----------------------------------------------------------------


def match_replace8_ref(data, vals, imm, absent=0xFFFFFFFF):
    data = f32(data).reshape(data.shape[0], -1).copy()
    vals = f32(vals).reshape(vals.shape[0], -1)
    idx = np.full(vals.shape, absent, dtype=np.int64)
    out = data.copy()
    for p in range(data.shape[0]):
        used = set()
        for i in reversed(range(8)):
            for j in range(data.shape[1]):
                if data[p, j] == vals[p, i] and j not in used:
                    idx[p, i] = j
                    used.add(j)
                    out[p, j] = imm
                    break
    return out, idx


def match_replace8_kernel(with_idx=True, idx_dtype=nl.uint32):
    @nkicc.jit
    def k(data, vals):
        out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        oidx = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
        idx = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.sbuf)
        if with_idx:
            nisa.nc_match_replace8(dst=t, data=nl.load(data), vals=nl.load(vals), imm=-99.5, dst_idx=idx)
        else:
            nisa.memset(idx, 0)
            nisa.nc_match_replace8(t, nl.load(data), nl.load(vals), -99.5)
        nl.store(out, value=t)
        nl.store(oidx, value=idx)
        return out, oidx
    return k


def test_match_replace8_documented_tie_order():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    out, idx = run_both_simulators(match_replace8_kernel(), data, vals)
    np.testing.assert_array_equal(idx, [[2, 10, 9, 8, 7, 6, 5, 4]])
    np.testing.assert_array_equal(out, [[1, 2, -99.5, 4] + [-99.5] * 7])


@pytest.mark.parametrize("shape", [(128, 30), (1, 8), (2, 16384), (16, 3, 6)])
def test_match_replace8_ties_and_absent(rng, shape):
    data = tied(rng, shape, levels=6 if shape[-1] > 8 else 3)
    vals = vals_with_absent_and_repeats(rng, data)
    out, idx = run_both_simulators(match_replace8_kernel(), data, vals)
    want_out, want_idx = match_replace8_ref(data, vals, -99.5)
    np.testing.assert_array_equal(out.reshape(shape[0], -1), want_out)
    np.testing.assert_array_equal(idx, want_idx)


def test_match_replace8_without_dst_idx_and_uint16_sentinel(rng):
    data = tied(rng, (64, 33))
    vals = vals_with_absent_and_repeats(rng, data)
    out, idx = run_both_simulators(match_replace8_kernel(with_idx=False), data, vals)
    np.testing.assert_array_equal(out, match_replace8_ref(data, vals, -99.5)[0])
    assert not idx.any()
    _, idx16 = run_both_simulators(match_replace8_kernel(idx_dtype=nl.uint16), data, vals)
    np.testing.assert_array_equal(idx16, match_replace8_ref(data, vals, -99.5, 0xFFFF)[1])


def test_max8_match_replace8_sorts_descending(rng):
    # the library's sort pattern: repeated max8 + match_replace8(-inf) yields the row sorted
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        work = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=work, src=nl.load(a))
        res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        for r in nl.sequential_range(a.shape[1] // 8):
            m = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.sbuf)
            nisa.max8(dst=m, src=work)
            nisa.tensor_copy(dst=res[:, nl.ds(8 * r, 8)], src=m)
            nisa.nc_match_replace8(dst=work, data=work, vals=m, imm=float("-inf"))
        nl.store(out, value=res)
        return out

    a = tied(rng, (32, 48), levels=16)
    got = run_rolled_and_unrolled(k, a)
    np.testing.assert_array_equal(got, -np.sort(-a, axis=1))


# --- topk ----------------------------------------------------------------------------


def topk_ref(src, n, k):
    src = f32(src)
    vals = np.empty((src.shape[0], k), np.float32)
    idx = np.empty((src.shape[0], k), np.int64)
    for g in range(0, src.shape[0], 16):
        snake = [src[g + s % 16, s // 16] for s in range(n)]
        best = sorted(range(n), key=lambda s: (-snake[s], s))[:k][::-1]
        vals[g:g + 16] = [snake[s] for s in best]
        idx[g:g + 16] = best
    return vals, idx


def topk_kernel(n, k):
    @nkicc.jit
    def kern(a):
        ov = nl.ndarray((a.shape[0], k), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        oi = nl.ndarray((a.shape[0], k), dtype=nl.uint32, buffer=nl.shared_hbm)
        v = nl.ndarray((a.shape[0], k), dtype=nl.bfloat16, buffer=nl.sbuf)
        i = nl.ndarray((a.shape[0], k), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=v, idx_dst=i, src=nl.load(a), n=n)
        nl.store(ov, value=v)
        nl.store(oi, value=i)
        return ov, oi
    return kern


@pytest.mark.parametrize("P,cols,n,k", [(16, 3, 42, 8), (128, 4, 64, 5), (16, 1, 8, 1), (16, 1, 8, 8),
                                        (32, 40, 633, 17), (16, 4096, 65535, 3)])
def test_topk_snake_ties(rng, P, cols, n, k):
    a = tied(rng, (P, cols), bf16, levels=40) if cols < 4096 else rand(rng, (P, cols), bf16, -100, 100)
    v, i = run_both_simulators(topk_kernel(n, k), a)
    want_v, want_i = topk_ref(a, n, k)
    np.testing.assert_array_equal(f32(v), want_v)
    np.testing.assert_array_equal(i, want_i)
    assert (np.diff(f32(v), axis=1) >= 0).all()  # ascending


def test_topk_cost_is_the_documented_4n_plus_k(rng):
    ck = nkicc.compile(topk_kernel(633, 17), rand(rng, (32, 40), bf16))
    op = next(o for o in ck.ir.body.walk() if getattr(o, "opcode", None) == "topk")
    target = resolve_target(ck.target, registry())
    table = target.costs
    ctx = ops.CostContext(ck.ir.tensor_map(), target, table, "pool")
    want_cycles = table.fixed_cycles + table.onchip_access_cycles + 4 * 633 + 17
    assert ops.get("topk").cost(op, ctx) == pytest.approx(want_cycles / target.pool_ghz)


# --- nonzero_with_count --------------------------------------------------------------


def nonzero_kernel(offset, pad, fill=7):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], a.shape[1] + 1), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((a.shape[0], a.shape[1] + 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=fill)
        nisa.nonzero_with_count(dst=t, src=nl.load(a), index_offset=offset, padding_val=pad)
        nl.store(out, value=t)
        return out
    return k


def nonzero_ref(a, offset, pad, fill=7):
    out = np.full((a.shape[0], a.shape[1] + 1), fill, np.int64)
    for p in range(0, a.shape[0], 16):
        found = [j + offset for j in range(a.shape[1]) if a[p, j] != 0]
        out[p] = found + [pad] * (a.shape[1] - len(found)) + [len(found)]
    return out


@pytest.mark.parametrize("shape", [(128, 64), (1, 1), (1, 9), (17, 300), (16, 4096)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_nonzero_with_count(rng, shape, dtype):
    a = (rand(rng, shape, dtype, -5, 5) * (rng.random(shape) < 0.4)).astype(dtype)
    if shape[0] >= 17:
        a[16] = 0          # a partition with nothing
        a[0] = a[0] + 11   # and one that is all nonzero (ints in [-5, 5] + 11 > 0; floats almost surely)
    offset, pad = int(rng.integers(-1000, 1000)), int(rng.integers(-50, 0))
    got = run_both_simulators(nonzero_kernel(offset, pad), a)
    np.testing.assert_array_equal(got, nonzero_ref(a, offset, pad))


# --- sequence_bounds -----------------------------------------------------------------


def bounds_ref(ids):
    ids = list(f32(ids).reshape(-1))
    n = len(ids)
    start, end = [0] * n, [0] * n
    for i, s in enumerate(ids):
        if s == 0:
            start[i], end[i] = n, -1
            continue
        lo = i
        while lo > 0 and ids[lo - 1] == s:
            lo -= 1
        hi = i
        while hi < n - 1 and ids[hi + 1] == s:
            hi += 1
        start[i], end[i] = lo, hi + 1
    return np.array([[start, end]])


def bounds_kernel():
    @nkicc.jit
    def k(ids):
        out = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=t, segment_ids=nl.load(ids))
        nl.store(out, value=t)
        return out
    return k


@pytest.mark.parametrize("n", [1, 2, 9, 512, 4000])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sequence_bounds(rng, n, dtype):
    ids = np.sort(rng.integers(0, max(2, n // 4), size=n))
    ids[rng.random(n) < 0.15] = 0                   # padding anywhere, splitting runs
    ids = ids.reshape(1, n).astype(dtype)
    got = run_both_simulators(bounds_kernel(), ids)
    np.testing.assert_array_equal(got, bounds_ref(ids))


def test_sequence_bounds_documented_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)
    got = run_both_simulators(bounds_kernel(), ids)
    np.testing.assert_array_equal(got, [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]])


# --- documented constraints: one line at the kernel's call -----------------------------


def _sort_error_kernel(case):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.ndarray((16, 16400), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(d, 1.0)
        f8 = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        u8 = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
        b16 = nl.ndarray((16, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        vb = nl.ndarray((16, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        i32 = nl.ndarray((16, 65), dtype=nl.int32, buffer=nl.sbuf)
        if case == "max8_small":
            nisa.max8(dst=f8, src=d[:, 0:7])  # MARK max8_small
        elif case == "max8_large":
            nisa.max8(dst=f8, src=d[:, 0:16385])  # MARK max8_large
        elif case == "max8_dst":
            nisa.max8(dst=d[:, 0:9], src=d[:, 0:100])  # MARK max8_dst
        elif case == "max8_4d":
            nisa.max8(dst=f8, src=d.reshape((16, 2, 2, 4100)))  # MARK max8_4d
        elif case == "max8_parts":
            nisa.max8(dst=f8[0:8, :], src=d[:, 0:100])  # MARK max8_parts
        elif case == "find_dtype":
            nisa.nc_find_index8(dst=f8, data=d[:, 0:100], vals=f8)  # MARK find_dtype
        elif case == "find_vals":
            nisa.nc_find_index8(dst=u8, data=d[:, 0:100], vals=d[:, 0:9])  # MARK find_vals
        elif case == "find_small":
            nisa.nc_find_index8(dst=u8, data=d[:, 0:4], vals=f8)  # MARK find_small
        elif case == "replace_layout":
            nisa.nc_match_replace8(dst=d[:, 0:10], data=d[:, 0:11], vals=f8, imm=0.0)  # MARK replace_layout
        elif case == "replace_imm":
            nisa.nc_match_replace8(dst=d[:, 0:10], data=d[:, 10:20], vals=f8, imm="x")  # MARK replace_imm
        elif case == "replace_idx":
            nisa.nc_match_replace8(d[:, 0:10], d[:, 10:20], f8, 0.0, dst_idx=u8[:, 0:7])  # MARK replace_idx
        elif case == "topk_src_dtype":
            nisa.topk(val_dst=vb, idx_dst=u8, src=d[:, 0:4], n=64)  # MARK topk_src_dtype
        elif case == "topk_val_dtype":
            nisa.topk(val_dst=f8, idx_dst=u8, src=b16, n=64)  # MARK topk_val_dtype
        elif case == "topk_idx_dtype":
            nisa.topk(val_dst=vb, idx_dst=f8, src=b16, n=64)  # MARK topk_idx_dtype
        elif case == "topk_n_small":
            nisa.topk(val_dst=vb, idx_dst=u8, src=b16, n=7)  # MARK topk_n_small
        elif case == "topk_n_large":
            nisa.topk(val_dst=vb, idx_dst=u8, src=b16, n=65536)  # MARK topk_n_large
        elif case == "topk_k_gt_n":
            u9 = nl.ndarray((16, 9), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.topk(val_dst=b16[:, 0:9], idx_dst=u9, src=b16, n=8)  # MARK topk_k_gt_n
        elif case == "topk_cols":
            nisa.topk(val_dst=vb, idx_dst=u8, src=b16, n=64 * 16 + 1)  # MARK topk_cols
        elif case == "topk_parts":
            nisa.topk(val_dst=vb[0:8, :], idx_dst=u8[0:8, :], src=b16[0:8, :], n=64)  # MARK topk_parts
        elif case == "topk_psum":
            p = nl.ndarray((16, 64), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.topk(val_dst=vb, idx_dst=u8, src=p, n=64)  # MARK topk_psum
        elif case == "topk_shapes":
            nisa.topk(val_dst=vb, idx_dst=u8[:, 0:4], src=b16, n=64)  # MARK topk_shapes
        elif case == "nz_dst_dtype":
            nisa.nonzero_with_count(dst=d[:, 0:65], src=d[:, 100:164])  # MARK nz_dst_dtype
        elif case == "nz_src_dtype":
            nisa.nonzero_with_count(dst=i32, src=b16)  # MARK nz_src_dtype
        elif case == "nz_extra":
            nisa.nonzero_with_count(dst=i32[:, 0:64], src=d[:, 0:64])  # MARK nz_extra
        elif case == "nz_offset":
            nisa.nonzero_with_count(dst=i32, src=d[:, 0:64], index_offset=1 << 31)  # MARK nz_offset
        elif case == "nz_pad":
            nisa.nonzero_with_count(dst=i32, src=d[:, 0:64], padding_val=0.5)  # MARK nz_pad
        elif case == "bounds_parts":
            nisa.sequence_bounds(dst=d[0:2, 0:20], segment_ids=d[0:2, 100:110])  # MARK bounds_parts
        elif case == "bounds_shape":
            nisa.sequence_bounds(dst=d[0:1, 0:21], segment_ids=d[0:1, 100:110])  # MARK bounds_shape
        elif case == "bounds_dtype":
            nisa.sequence_bounds(dst=b16[0:1, 0:20], segment_ids=b16[0:1, 30:40])  # MARK bounds_dtype
        elif case == "arg_count":
            nisa.max8(f8, d[:, 0:100], "name", "extra")  # MARK arg_count
        nl.store(out, value=f8)
        return out
    return k


@pytest.mark.parametrize("case,code", [
    ("max8_small", "E130"), ("max8_large", "E130"), ("max8_dst", "E140"), ("max8_4d", "E130"),
    ("max8_parts", "E140"), ("find_dtype", "E132"), ("find_vals", "E140"), ("find_small", "E130"),
    ("replace_layout", "E140"), ("replace_imm", "E103"), ("replace_idx", "E140"), ("topk_src_dtype", "E132"),
    ("topk_val_dtype", "E132"), ("topk_idx_dtype", "E132"), ("topk_n_small", "E103"), ("topk_n_large", "E103"),
    ("topk_k_gt_n", "E130"), ("topk_cols", "E140"), ("topk_parts", "E110"), ("topk_psum", "E120"),
    ("topk_shapes", "E140"), ("nz_dst_dtype", "E132"), ("nz_src_dtype", "E132"), ("nz_extra", "E140"),
    ("nz_offset", "E103"), ("nz_pad", "E103"), ("bounds_parts", "E110"), ("bounds_shape", "E140"),
    ("bounds_dtype", "E132"), ("arg_count", "E103"),
])
def test_sort_errors_one_line_at_the_kernel(rng, case, code):
    with pytest.raises(nkicc.NkiccError) as ei:
        nkicc.compile(_sort_error_kernel(case), rand(rng, (16, 8)))
    check_error(ei, code, f"MARK {case}", "test_ops_sort.py")
