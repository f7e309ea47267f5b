"""Conformance: nisa.iota, nl.tile_size, nl.where, nl.broadcast_to, nl.expand_dims, nl.softmax."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, rand, rounded


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nisa.iota", "nl.where", "nl.broadcast_to", "nl.expand_dims", "nl.softmax")


def iota_ref(P, pattern, offset, cm):
    free = np.zeros((), np.int64)
    for step, num in pattern:
        free = free[..., None] + np.arange(num) * step
    return offset + np.arange(P).reshape((P,) + (1,) * len(pattern)) * cm + free


@pytest.mark.parametrize("P,pattern,offset,cm", [
    (128, [[1, 37]], 0, 0), (128, [[1, 37]], 5, 37), (1, [[3, 10]], -7, 2), (64, [[6, 4], [1, 6]], 11, -1),
    (32, [[1, 4], [4, 6]], 0, 24), (16, [[-2, 5], [100, 3], [1, 2]], 1000, 7),
])
@pytest.mark.parametrize("dtype", [np.int32, np.float32, bf16])
def test_iota(rng, P, pattern, offset, cm, dtype):
    shape = (P,) + tuple(n for _, n in pattern)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=pattern, offset=offset, channel_multiplier=cm)
        nl.store(out, value=t)
        return out

    got = k(rand(rng, (1, 1)))
    want = iota_ref(P, pattern, offset, cm)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(f32(got), rounded(want, dtype))


def test_iota_as_flat_2d_pattern_and_index_arithmetic(rng):
    # a 2-pair pattern into a 2-d tile (free elements counted flat), then used as data
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        idx = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=idx, pattern=[[8, 4], [1, 8]], offset=0, channel_multiplier=32)
        nl.store(out, value=nl.add(nl.load(a), idx, dtype=nl.float32))
        return out

    a = rand(rng, (128, 32))
    want = a + (np.arange(128)[:, None] * 32 + np.arange(32)[None, :])
    close(k(a), want, np.float32)


def test_tile_size_constants(rng):
    ts = nl.tile_size
    assert (ts.pmax, ts.psum_fmax, ts.gemm_stationary_fmax, ts.gemm_moving_fmax, ts.psum_num_banks) == \
        (128, 512, 128, 512, 8)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // nl.tile_size.pmax):
            for j in nl.affine_range(a.shape[1] // nl.tile_size.psum_fmax):
                rows = nl.ds(i * nl.tile_size.pmax, nl.tile_size.pmax)
                cols = nl.ds(j * nl.tile_size.psum_fmax, nl.tile_size.psum_fmax)
                ps = nl.ndarray((nl.tile_size.pmax, nl.tile_size.psum_fmax), dtype=nl.float32, buffer=nl.psum)
                nisa.tensor_copy(dst=ps, src=nl.load(a[rows, cols]))
                nl.store(out[rows, cols], value=nl.negative(ps))
        return out

    a = rand(rng, (256, 1024))
    np.testing.assert_array_equal(k(a), -a)


@pytest.mark.parametrize("dtype", [np.float32, bf16, np.int32])
def test_where_tiles(rng, dtype):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        nl.store(out, value=nl.where(nl.greater(x, y), x, y))
        return out

    a = rand(rng, (128, 37), dtype, -100, 100) if dtype == np.int32 else rand(rng, (128, 37), dtype)
    b = rand(rng, (128, 37), dtype, -100, 100) if dtype == np.int32 else rand(rng, (128, 37), dtype)
    np.testing.assert_array_equal(f32(k(a, b)), np.where(f32(a) > f32(b), f32(a), f32(b)))


def test_where_scalars_and_broadcast_condition(rng):
    s = float(rng.uniform(-1, 1))

    @nkicc.jit
    def k(a, c):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        nl.store(o1, value=nl.where(nl.less(x, 0.0), s, x))               # scalar on_true
        nl.store(o2, value=nl.where(nl.load(c), x, 0.0))                   # (P, 1) condition, scalar on_false
        nl.store(o3, value=nl.where(nl.greater_equal(x, s), nl.exp(x), nl.square(x)))
        return o1, o2, o3

    a = rand(rng, (96, 37))
    c = (rng.random((96, 1)) < 0.5).astype(np.float32)
    o1, o2, o3 = k(a, c)
    np.testing.assert_array_equal(o1, np.where(a < 0, np.float32(s), a))
    np.testing.assert_array_equal(o2, np.where(c != 0, a, np.float32(0)))
    close(o3, np.where(a >= np.float32(s), np.exp(a.astype(np.float64)), np.square(a.astype(np.float64))))


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_broadcast_to(rng, dtype):
    @nkicc.jit
    def k(a, b, r):
        o1 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        o3 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        col = nl.load(a)                                   # (P, 1)
        wide = nl.broadcast_to(col, shape=b.shape)         # (P, F), zero-copy
        assert wide.shape == b.shape
        t = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=wide)
        nl.store(o1, value=t)
        nl.store(o2, value=nl.multiply(wide, nl.load(b)))
        nl.store(o3, value=nl.add(nl.broadcast_to(nl.load(r), shape=b.shape), nl.load(b)))  # (1, F) row
        return o1, o2, o3

    a, b, r = rand(rng, (128, 1), dtype), rand(rng, (128, 37), dtype), rand(rng, (1, 37), dtype)
    o1, o2, o3 = k(a, b, r)
    np.testing.assert_array_equal(f32(o1), np.broadcast_to(f32(a), b.shape))
    close(o2, rounded(f32(a) * f32(b), dtype), dtype)
    close(o3, rounded(f32(r) + f32(b), dtype), dtype)


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_expand_dims(rng, dtype):
    @nkicc.jit
    def k(a, b):
        o1 = nl.ndarray(b.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((a.shape[0], a.shape[1], 1), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)                                     # (P, F)
        e1 = nl.expand_dims(x, 1)                          # (P, 1, F)
        assert e1.shape == (a.shape[0], 1, a.shape[1])
        nl.store(o1, value=nl.subtract(nl.load(b), e1))    # broadcast against (P, 4, F)
        e2 = nl.expand_dims(x, -1)
        assert e2.shape == (a.shape[0], a.shape[1], 1)
        nl.store(o2, value=e2)
        return o1, o2

    a, b = rand(rng, (64, 9), dtype), rand(rng, (64, 4, 9), dtype)
    o1, o2 = k(a, b)
    close(o1, rounded(f32(b) - f32(a)[:, None, :], dtype), dtype)
    np.testing.assert_array_equal(f32(o2), f32(a)[:, :, None])


def softmax_ref(x, axis):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((128, 37), 1), ((128, 512), -1), ((1, 5), 1), ((7, 1), 1),
                                        ((16, 3, 10), 2)])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_softmax(rng, shape, axis, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        s = nl.softmax(nl.load(a), axis=axis)
        assert s.shape == a.shape and s.dtype == a.dtype
        nl.store(out, value=s)
        return out

    a = rand(rng, shape, dtype, -30, 30)           # wide range: needs the max subtraction
    want = softmax_ref(f32(a), axis)
    if dtype == np.float32:
        close(k(a), want, np.float32, rtol=1e-4, atol=1e-6)
    else:
        close(k(a), rounded(want, bf16), bf16, rtol=2e-2, atol=1e-3)


def test_err_iota_pattern_size(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((8, 8), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[1, 9]], offset=0)  # MARK:E140-iota
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (1, 1)))
    check_error(ei, "E140", "MARK:E140-iota", "test_ops_misc.py")


def test_err_broadcast_to_incompatible(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.broadcast_to(nl.load(a), shape=(128, 8)))  # MARK:E140-bc
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 3)))
    check_error(ei, "E140", "MARK:E140-bc", "test_ops_misc.py")
