"""Conformance: nisa.nc_matmul (incl. the PSUM accumulate rules), nl.matmul, transposes."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, fp8, rand, rounded, run_rolled_and_unrolled


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nisa.nc_matmul", "nl.matmul", "nisa.nc_transpose", "nl.transpose")


def mm(st, mv):
    return f32(st).astype(np.float64).T @ f32(mv).astype(np.float64)


MM_TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("K,M,N", [(128, 128, 512), (37, 1, 37), (1, 5, 7), (128, 64, 300), (64, 128, 1)])
@pytest.mark.parametrize("dt_st,dt_mv", [(np.float32, np.float32), (bf16, bf16), (np.float16, np.float16),
                                         (bf16, fp8)])
def test_nc_matmul_shapes_dtypes(rng, K, M, N, dt_st, dt_mv):
    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))
        nl.store(out, value=nl.copy(ps))
        return out

    s, m = rand(rng, (K, M), dt_st), rand(rng, (K, N), dt_mv)
    close(k(s, m), mm(s, m), np.float32, **MM_TOL)


def test_nc_matmul_tfloat32_and_3d_moving(rng):
    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((s.shape[1], m.shape[1], m.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray(s.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        y = nl.ndarray(m.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=s)
        nisa.dma_copy(dst=y, src=m)
        ps = nl.ndarray((s.shape[1], m.shape[1], m.shape[2]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=x, moving=y)       # moving [K, 4, 128]: N = 512
        nl.store(out, value=nl.copy(ps))
        return out

    s, m = rand(rng, (64, 32)), rand(rng, (64, 4, 128))
    close(k(s, m), mm(s, m.reshape(64, -1)).reshape(32, 4, 128), np.float32, **MM_TOL)


def test_nc_matmul_bf16_output_tile(rng):
    # the PSUM result cast to bf16 on the way out
    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((s.shape[1], m.shape[1]), dtype=s.dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))
        o = nl.ndarray(ps.shape, dtype=s.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(out, value=o)
        return out

    s, m = rand(rng, (128, 96), bf16), rand(rng, (128, 200), bf16)
    got = k(s, m)
    assert got.dtype == bf16
    close(got, rounded(mm(s, m), bf16), bf16, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("mode", ["none_twice", "false_after_write", "true_after_write", "true_after_memset",
                                  "none_after_memset", "false_then_none", "none_partial_region"])
def test_nc_matmul_accumulate_rules(rng, mode):
    v = float(rng.uniform(-2, 2))

    @nkicc.jit
    def k(s1, m1, s2, m2):
        out = nl.ndarray((s1.shape[1], m1.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((s1.shape[1], m1.shape[1]), dtype=nl.float32, buffer=nl.psum)
        a1, b1, a2, b2 = nl.load(s1), nl.load(m1), nl.load(s2), nl.load(m2)
        if mode == "none_twice":
            nisa.nc_matmul(dst=ps, stationary=a1, moving=b1)
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2)
        elif mode == "false_after_write":
            nisa.nc_matmul(dst=ps, stationary=a1, moving=b1)
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2, accumulate=False)
        elif mode == "true_after_write":
            nisa.nc_matmul(dst=ps, stationary=a1, moving=b1, accumulate=False)
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2, accumulate=True)
        elif mode == "true_after_memset":
            nisa.memset(dst=ps, value=v)
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2, accumulate=True)
        elif mode == "none_after_memset":
            nisa.memset(dst=ps, value=v)
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2)
        elif mode == "false_then_none":
            nisa.nc_matmul(dst=ps, stationary=a1, moving=b1, accumulate=False)
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2)
            nisa.nc_matmul(dst=ps, stationary=a1, moving=b2, accumulate=None)
        else:  # the first matmul writes only the left half: per location, left accumulates, right overwrites
            half = m1.shape[1] // 2
            nisa.nc_matmul(dst=ps[:, 0:half], stationary=a1, moving=b1[:, 0:half])
            nisa.nc_matmul(dst=ps, stationary=a2, moving=b2)
        nl.store(out, value=nl.copy(ps))
        return out

    K, M, N = 96, 64, 128
    s1, m1, s2, m2 = rand(rng, (K, M)), rand(rng, (K, N)), rand(rng, (K, M)), rand(rng, (K, N))
    A1, A2 = mm(s1, m1), mm(s2, m2)
    want = {
        "none_twice": A1 + A2, "false_after_write": A2, "true_after_write": A1 + A2,
        "true_after_memset": v + A2, "none_after_memset": v + A2, "false_then_none": A1 + A2 + mm(s1, m2),
        "none_partial_region": A2 + np.concatenate([A1[:, :N // 2], np.zeros((M, N // 2))], axis=1),
    }[mode]
    close(k(s1, m1, s2, m2), want, np.float32, **MM_TOL)


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_nc_matmul_k_tiling_in_loops(rng, dtype):
    # out[i] = A[:, i].T @ B, K = 384 in 3 tiles accumulated with accumulate=None; a fresh PSUM tile per i
    @nkicc.jit
    def k(a, b):
        KT = a.shape[0] // 128
        out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[1] // 128):
            ps = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(KT):
                st = nl.load(a[nl.ds(kk * 128, 128), nl.ds(i * 128, 128)])
                mv = nl.load(b[nl.ds(kk * 128, 128), :])
                nisa.nc_matmul(dst=ps, stationary=st, moving=mv)
            nl.store(out[nl.ds(i * 128, 128), :], value=nl.copy(ps))
        return out

    a, b = rand(rng, (384, 256), dtype), rand(rng, (384, 160), dtype)
    close(run_rolled_and_unrolled(k, a, b), mm(a, b), np.float32, rtol=2e-4, atol=2e-4)


def test_nc_matmul_psum_reused_across_loop_iterations_accumulates(rng):
    # one PSUM tile allocated outside the loop: every iteration after the first accumulates
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.psum)
        for t in nl.sequential_range(a.shape[0]):
            nisa.nc_matmul(dst=ps, stationary=nl.load(a[t]), moving=nl.load(b[t]))
        nl.store(out, value=nl.copy(ps))
        return out

    a, b = rand(rng, (3, 32, 16)), rand(rng, (3, 32, 24))
    close(run_rolled_and_unrolled(k, a, b), sum(mm(a[t], b[t]) for t in range(3)), np.float32, **MM_TOL)


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_psum_copy_in_matmul_copy_out(rng, dtype):
    # initialise PSUM with a bias by tensor_copy, matmul onto it (functionally: the sum), copy out
    @nkicc.jit
    def k(s, m, bias):
        out = nl.ndarray((s.shape[1], m.shape[1]), dtype=s.dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=ps, src=nl.load(bias))          # copy in
        nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))
        o = nl.ndarray(ps.shape, dtype=s.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)                        # copy out
        nl.store(out, value=o)
        return out

    s, m, bias = rand(rng, (128, 128), dtype), rand(rng, (128, 512), dtype), rand(rng, (128, 512))
    want = bias.astype(np.float64) + mm(s, m)
    got = k(s, m, bias)
    if dtype == np.float32:
        close(got, want, np.float32, **MM_TOL)
    else:
        close(got, rounded(want, bf16), bf16, rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("transpose_x", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
@pytest.mark.parametrize("M,K,N", [(128, 128, 512), (37, 64, 5), (1, 1, 1)])
def test_nl_matmul(rng, transpose_x, dtype, M, K, N):
    @nkicc.jit
    def k(x, y):
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.matmul(nl.load(x), nl.load(y), transpose_x=transpose_x)
        assert r.shape == (M, N) and r.buffer == "psum"
        nl.store(out, value=nl.copy(r))
        return out

    x = rand(rng, (K, M) if transpose_x else (M, K), dtype)
    y = rand(rng, (K, N), dtype)
    want = mm(x, y) if transpose_x else mm(f32(x).T, y)
    close(k(x, y), want, np.float32, **MM_TOL)


@pytest.mark.parametrize("P,F", [(128, 128), (37, 5), (1, 128), (128, 1), (64, 96)])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_nc_transpose_tensor_engine(rng, P, F, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=nl.load(a))
        o = nl.ndarray(ps.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nl.store(out, value=o)
        return out

    a = rand(rng, (P, F), dtype)
    np.testing.assert_array_equal(f32(k(a)), f32(a).T)


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_nc_transpose_sbuf_32x32(rng, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        o = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_transpose(dst=o, data=nl.load(a))
        nl.store(out, value=o)
        return out

    a = rand(rng, (32, 20), dtype)
    np.testing.assert_array_equal(f32(k(a)), f32(a).T)


@pytest.mark.parametrize("P,F", [(128, 128), (37, 5), (1, 37), (128, 1)])
@pytest.mark.parametrize("dtype", [np.float32, bf16, np.float16])
def test_nl_transpose(rng, P, F, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.transpose(nl.load(a))
        assert t.shape == (a.shape[1], a.shape[0]) and t.dtype == a.dtype and t.buffer == "sbuf"
        nl.store(out, value=t)
        return out

    a = rand(rng, (P, F), dtype)
    np.testing.assert_array_equal(f32(k(a)), f32(a).T)


# --- negative -----------------------------------------------------------------------

def test_err_nl_matmul_k_over_128(rng):
    @nkicc.jit
    def k(x, y):
        out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.matmul(nl.load(x), nl.load(y))  # MARK:E130-K
        nl.store(out, value=nl.copy(r))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (64, 256)), rand(rng, (128, 64)))
    check_error(ei, "E130", "MARK:E130-K", "test_ops_matmul.py")


@pytest.mark.parametrize("which", ["M", "N", "Kmismatch", "dst"])
def test_err_nc_matmul_shapes(rng, which):
    st_shape, mv_shape, dst_shape = {"M": ((64, 200), (64, 8), (128, 8)), "N": ((64, 8), (64, 600), (8, 512)),
                                     "Kmismatch": ((64, 8), (32, 8), (8, 8)),
                                     "dst": ((64, 8), (64, 16), (8, 8))}[which]

    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray(dst_shape, dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # MARK:E130-shape
        nl.store(out, value=nl.copy(ps[0:8, 0:8]))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, st_shape), rand(rng, mv_shape))
    check_error(ei, "E130", "MARK:E130-shape", "test_ops_matmul.py")


def test_err_nc_matmul_dst_not_psum(rng):
    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(dst=d, stationary=nl.load(s), moving=nl.load(m))  # MARK:E131-dst
        nl.store(out, value=d)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (64, 8)), rand(rng, (64, 16)))
    check_error(ei, "E131", "MARK:E131-dst", "test_ops_matmul.py")


def test_err_nc_matmul_operand_in_psum(rng):
    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=nl.load(s))
        ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=p, moving=nl.load(m))  # MARK:E131-op
        nl.store(out, value=nl.copy(ps))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (64, 8)), rand(rng, (64, 16)))
    check_error(ei, "E131", "MARK:E131-op", "test_ops_matmul.py")


@pytest.mark.parametrize("dt_st,dt_mv", [(np.float32, bf16), (bf16, np.float32), (np.float16, np.float32)])
def test_err_nc_matmul_fp32_with_bf16(rng, dt_st, dt_mv):
    @nkicc.jit
    def k(s, m):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # MARK:E132
        nl.store(out, value=nl.copy(ps))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (64, 8), dt_st), rand(rng, (64, 16), dt_mv))
    check_error(ei, "E132", "MARK:E132", "test_ops_matmul.py")


@pytest.mark.parametrize("shape,dtype", [((128, 513), nl.float32), ((128, 1025), nl.float16),
                                         ((16, 4, 129), nl.float32)])
def test_err_psum_tile_wider_than_bank(rng, shape, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray(shape, dtype=dtype, buffer=nl.psum)  # MARK:E133
        nl.store(out, value=nl.copy(ps))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (8, 8)))
    check_error(ei, "E133", "MARK:E133", "test_ops_matmul.py")


def test_err_nc_transpose_sbuf_dst_over_32(rng):
    # a transpose into SBUF runs on the Vector Engine: 32 x 32 at most
    @nkicc.jit
    def k(a):
        out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        o = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_transpose(dst=o, data=nl.load(a))  # MARK:E130-vt
        nl.store(out, value=o)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (64, 64)))
    check_error(ei, "E130", "MARK:E130-vt", "test_ops_matmul.py")


def test_err_nc_transpose_dst_shape(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((64, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        ps = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=nl.load(a))  # MARK:E140-tr
        nl.store(out, value=nl.copy(ps))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (64, 32)))
    check_error(ei, "E140", "MARK:E140-tr", "test_ops_matmul.py")
