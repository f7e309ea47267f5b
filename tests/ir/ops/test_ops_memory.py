"""Conformance: data movement, tensor creation and views (docs/api.md)."""
import ml_dtypes
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, fp8, rand, rounded, run_rolled_and_unrolled


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nl.load", "nl.store", "nl.load_transpose2d", "nl.copy", "nisa.dma_copy", "nisa.tensor_copy", "nisa.memset",
    "nl.zeros", "nl.ones", "nl.full", "nl.ndarray", "nl.zeros_like", "nl.ds", "nl.NkiTensor.ap", "nl.sbuf",
    "nl.psum", "nl.hbm", "nl.shared_hbm")

DTYPES = [np.float32, bf16, np.float16, np.int32]
fp8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)


def ap_ref(base, pattern, offset=0):
    """numpy oracle of .ap: view[i...] = flat(base)[offset + sum(i_k * step_k)]."""
    idx = np.asarray(offset)
    for step, num in pattern:
        idx = idx[..., None] + np.arange(num) * step
    return base.reshape(-1)[idx]


# --- nl.load / nl.store -------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES + [fp8, fp8_e5m2, np.int8, np.uint16, np.bool_])
@pytest.mark.parametrize("shape", [(1, 37), (128, 37), (128, 1), (64, 4, 8), (5,)])
def test_load_store_roundtrip(rng, shape, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    kind = np.dtype(dtype).kind
    if kind == "b":
        a = rng.random(shape) < 0.5
    elif kind == "u":
        a = rand(rng, shape, dtype, lo=0, hi=60000)
    else:
        a = rand(rng, shape, dtype, lo=-100 if kind == "i" else -2, hi=100 if kind == "i" else 2)
    got = k(a)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))


@pytest.mark.parametrize("src_dt,tile_dt", [(np.float32, bf16), (np.float32, np.float16), (bf16, np.float32),
                                            (np.int32, np.float32), (np.float32, fp8)])
def test_load_with_dtype_casts(rng, src_dt, tile_dt):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a, dtype=tile_dt)
        assert t.dtype == tile_dt
        nl.store(out, value=t)
        return out

    a = rand(rng, (96, 37), src_dt, lo=-50 if np.dtype(src_dt).kind == "i" else -2, hi=50)
    close(k(a), rounded(a.astype(np.float32), tile_dt), np.float32, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, bf16])
@pytest.mark.parametrize("shape", [(37, 128), (128, 64), (1, 5), (128, 1)])
def test_load_transpose2d(rng, shape, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load_transpose2d(a)
        assert t.shape == (a.shape[1], a.shape[0])
        nl.store(out, value=t)
        return out

    a = rand(rng, shape, dtype)
    np.testing.assert_array_equal(f32(k(a)), f32(a).T)


def test_load_transpose2d_of_strided_view(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((37, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load_transpose2d(a[10:74:2, 3:40]))
        return out

    a = rand(rng, (80, 45), bf16)
    np.testing.assert_array_equal(f32(k(a)), f32(a[10:74:2, 3:40]).T)


@pytest.mark.parametrize("dtype", [np.float32, bf16, np.float16, np.int32])
def test_nl_copy(rng, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        out2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(out, value=nl.copy(t))
        c = nl.copy(t, dtype=nl.float32)
        assert c.dtype == np.float32
        nl.store(out2, value=c)
        return out, out2

    a = rand(rng, (128, 37), dtype, lo=-1000, hi=1000)
    got, got32 = k(a)
    np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(got32, f32(a))


# --- nisa.dma_copy ----------------------------------------------------------------

@pytest.mark.parametrize("src_dt,dst_dt", [(np.float32, np.float32), (np.float32, bf16), (bf16, np.float32),
                                           (np.float32, np.float16), (np.int32, np.float32),
                                           (np.float16, bf16), (np.int32, np.int32)])
def test_dma_copy_hbm_sbuf_hbm_with_cast(rng, src_dt, dst_dt):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=dst_dt, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=dst_dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)            # HBM -> SBUF, casting
        nisa.dma_copy(dst=out, src=t)          # SBUF -> HBM
        return out

    a = rand(rng, (128, 37), src_dt, lo=-500 if np.dtype(src_dt).kind == "i" else -2, hi=500)
    got = k(a)
    assert got.dtype == np.dtype(dst_dt)
    np.testing.assert_array_equal(f32(got), rounded(f32(a), dst_dt))


def test_dma_copy_hbm_to_hbm_and_cast_on_store(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        low = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        scratch = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nisa.dma_copy(dst=scratch, src=a)       # HBM -> private HBM
        nisa.dma_copy(dst=out, src=scratch)     # private HBM -> shared HBM
        nisa.dma_copy(dst=low, src=nl.load(a))  # SBUF fp32 -> HBM bf16
        return out, low

    a = rand(rng, (3, 130, 37))
    out, low = k(a)
    np.testing.assert_array_equal(out, a)
    assert low.dtype == bf16
    np.testing.assert_array_equal(f32(low), rounded(a, bf16))


def test_dma_copy_reshapes_by_element_count(rng):
    # element counts must match; shapes need not: (128, 6, 7) SBUF <- (128, 42) HBM
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 42), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 6, 7), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = rand(rng, (128, 42))
    np.testing.assert_array_equal(k(a), a)


# --- nisa.tensor_copy / memset ------------------------------------------------------

@pytest.mark.parametrize("src_dt,dst_dt", [(np.float32, bf16), (np.float32, np.float16), (bf16, np.float32),
                                           (np.int32, np.float32), (np.float32, np.float32), (np.float32, fp8),
                                           (bf16, fp8_e5m2), (fp8_e5m2, np.float16)])
def test_tensor_copy_cast(rng, src_dt, dst_dt):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=dst_dt, buffer=nl.shared_hbm)
        t = nl.load(a)
        c = nl.ndarray(a.shape, dtype=dst_dt, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t)
        nl.store(out, value=c)
        return out

    a = rand(rng, (128, 37), src_dt, lo=-300 if np.dtype(src_dt).kind == "i" else -2, hi=300)
    np.testing.assert_array_equal(f32(k(a)), rounded(f32(a), dst_dt))


def test_tensor_copy_float_to_int_integral_values(rng):
    # integral float values convert exactly (the rounding of fractions: tests/simulator/test_numerics.py)
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        c = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=nl.load(a))
        nl.store(out, value=c)
        return out

    a = rng.integers(-10000, 10000, size=(64, 37)).astype(np.float32)
    np.testing.assert_array_equal(k(a), a.astype(np.int32))


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_tensor_copy_through_psum(rng, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=nl.load(a))     # SBUF -> PSUM
        s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=p)              # PSUM -> SBUF
        nl.store(out, value=s)
        return out

    a = rand(rng, (128, 512), dtype)
    np.testing.assert_array_equal(f32(k(a)), f32(a))


@pytest.mark.parametrize("dtype", [np.float32, bf16, np.float16, np.int32])
def test_memset_full_and_partial(rng, dtype):
    value = float(rng.integers(-50, 50)) if np.dtype(dtype).kind == "i" else float(rng.uniform(-3, 3))
    lo, hi = 3, 3 + int(rng.integers(5, 20))

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.memset(dst=t[:, lo:hi], value=value)
        nl.store(out, value=t)
        whole = nl.ndarray((32, 5), dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=whole, value=value)
        nl.store(out[96:128, 0:5], value=whole)
        return out

    a = rand(rng, (128, 37), dtype, lo=-1000, hi=1000)
    want = a.copy()
    want[:, lo:hi] = np.asarray(value).astype(dtype)
    want[96:128, 0:5] = np.asarray(value).astype(dtype)
    np.testing.assert_array_equal(k(a), want)


def test_memset_psum(rng):
    value = float(rng.uniform(-3, 3))

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=value)
        s = nl.add(nl.load(a), nl.copy(p))
        nl.store(out, value=s)
        return out

    a = rand(rng, (128, 37))
    close(k(a), a + np.float32(value))


# --- creation ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, bf16, np.float16, np.int32])
def test_zeros_ones_full_ndarray_zeros_like(rng, dtype):
    fill = float(rng.integers(2, 9)) + (0.0 if np.dtype(dtype).kind == "i" else 0.5)

    @nkicc.jit
    def k(a):
        shape = a.shape
        o_z = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_o = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_f = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_zl = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_sum = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        z = nl.zeros(shape, dtype=a.dtype)
        o = nl.ones(shape, dtype=a.dtype, buffer=nl.sbuf)
        f = nl.full(shape, fill, dtype=a.dtype)
        zl = nl.zeros_like(t)
        assert z.shape == o.shape == f.shape == zl.shape == shape and zl.dtype == t.dtype
        assert z.buffer == "sbuf" and zl.buffer == "sbuf"
        nl.store(o_z, value=z)
        nl.store(o_o, value=o)
        nl.store(o_f, value=f)
        nl.store(o_zl, value=zl)
        acc = nl.ndarray(shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=acc, data1=t, data2=f, op=nl.add)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=o, op=nl.subtract)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=z, op=nl.add)
        nl.store(o_sum, value=acc)
        return o_z, o_o, o_f, o_zl, o_sum

    a = rand(rng, (128, 37), dtype, lo=-20, hi=20)
    z, o, f, zl, s = k(a)
    for got in (z, o, f, zl, s):
        assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(f32(z), 0)
    np.testing.assert_array_equal(f32(o), 1)
    np.testing.assert_array_equal(f32(f), np.float32(fill))
    np.testing.assert_array_equal(f32(zl), 0)
    close(s, f32(a) + np.float32(fill) - 1, dtype)


def test_zeros_in_psum_and_ndarray_shape_dtype():
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
        t = nl.ndarray((128, 4, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        assert t.shape == (128, 4, 8) and t.dtype == nl.bfloat16 and t.buffer == "sbuf" and t.ndim == 3
        assert p.buffer == "psum"
        nl.store(out, value=nl.copy(p))
        return out

    np.testing.assert_array_equal(k(np.zeros((1, 1), np.float32)), 0)


# --- views --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_integer_index_hbm_drops_dim_sbuf_keeps_partition(rng, dtype):
    @nkicc.jit
    def k(a):
        o1 = nl.ndarray((128, 37), dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128,), dtype=a.dtype, buffer=nl.shared_hbm)
        o3 = nl.ndarray((1, 37), dtype=a.dtype, buffer=nl.shared_hbm)
        o4 = nl.ndarray((4,), dtype=a.dtype, buffer=nl.shared_hbm)
        v = a[2]
        assert v.shape == (128, 37)
        t = nl.load(v)
        nl.store(o1, value=t)
        col = a[1, :, 5]
        assert col.shape == (128,)
        nl.store(o2, value=nl.load(col))
        row = t[96]                       # on chip: the partition dimension stays, size 1
        assert row.shape == (1, 37)
        nl.store(o3, value=row)
        elem = t[32, 7]                   # on chip: at least 2-D (the NKI language guide's t[0, 0, 10])
        assert elem.shape == (1, 1)
        nl.store(o4[3], value=t[-32, -1])
        nl.store(o4[0:3], value=a[0, 1, -3:])
        return o1, o2, o3, o4

    a = rand(rng, (3, 128, 37), dtype)
    o1, o2, o3, o4 = k(a)
    np.testing.assert_array_equal(o1, a[2])
    np.testing.assert_array_equal(o2, a[1, :, 5])
    np.testing.assert_array_equal(o3, a[2, 96:97])
    np.testing.assert_array_equal(o4, np.concatenate([a[0, 1, -3:], [a[2, -32, -1]]]))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_slices_with_steps_and_ellipsis(rng, dtype):
    @nkicc.jit
    def k(a):
        o1 = nl.ndarray((64, 10), dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128, 9), dtype=a.dtype, buffer=nl.shared_hbm)
        o3 = nl.ndarray((128, 3), dtype=a.dtype, buffer=nl.shared_hbm)
        o4 = nl.ndarray((64, 37), dtype=a.dtype, buffer=nl.shared_hbm)
        h = a[1:128:2, 1:30:3]              # HBM: steps on both dimensions
        assert h.shape == (64, 10)
        nl.store(o1, value=nl.load(h))
        t = nl.load(a[0:128, ...])
        s = t[..., ::4]                      # SBUF: step on the free dimension
        assert s.shape == (128, 10)
        nl.store(o2, value=s[:, 1:])
        nl.store(o3, value=t[:, 30:37:3])
        nl.store(o4[..., 0:37], value=nl.load(a[..., ::2, :]))
        return o1, o2, o3, o4

    a = rand(rng, (128, 37), dtype, -1000, 1000)
    o1, o2, o3, o4 = k(a)
    np.testing.assert_array_equal(o1, a[1:128:2, 1:30:3])
    np.testing.assert_array_equal(o2, a[:, ::4][:, 1:])
    np.testing.assert_array_equal(o3, a[:, 30:37:3])
    np.testing.assert_array_equal(o4, a[::2])


def test_store_into_strided_hbm_view(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray((128, 74), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out[:, 0::2], value=nl.load(a))
        nl.store(out[:, 1::2], value=nl.load(b))
        return out

    a, b = rand(rng, (128, 37)), rand(rng, (128, 37))
    want = np.empty((128, 74), np.float32)
    want[:, 0::2], want[:, 1::2] = a, b
    np.testing.assert_array_equal(k(a, b), want)


@pytest.mark.parametrize("rows,cols", [(128, 256), (384, 768)])
def test_ds_tiling_in_loops(rng, rows, cols):
    ft = 256

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            for j in nl.affine_range(a.shape[1] // ft):
                t = nl.load(a[nl.ds(i * 128, 128), nl.ds(j * ft, ft)])
                nl.store(out[nl.ds(i * 128, 128), nl.ds(j * ft, ft)], value=nl.multiply(t, 2.0))
        return out

    a = rand(rng, (rows, cols))
    np.testing.assert_array_equal(run_rolled_and_unrolled(k, a), 2 * a)


def test_ds_ragged_tail(rng):
    ft = 128

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        full = a.shape[1] // ft
        for i in nl.affine_range(a.shape[0] // 128):
            for j in nl.affine_range(full):
                t = nl.load(a[nl.ds(i * 128, 128), nl.ds(j * ft, ft)])
                nl.store(out[nl.ds(i * 128, 128), nl.ds(j * ft, ft)], value=nl.add(t, 1.0))
            tail = a.shape[1] - full * ft
            t = nl.load(a[nl.ds(i * 128, 128), nl.ds(full * ft, tail)])
            nl.store(out[nl.ds(i * 128, 128), nl.ds(full * ft, tail)], value=nl.add(t, 1.0))
        return out

    a = rand(rng, (256, 3 * 128 + 37))
    np.testing.assert_array_equal(run_rolled_and_unrolled(k, a), a + np.float32(1))


def test_sbuf_ds_and_loop_index_views(rng):
    # slicing an SBUF tile with loop-dependent nl.ds on the free and on the partition dimension
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        out2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        for j in nl.affine_range(a.shape[1] // 16):
            nisa.tensor_scalar(dst=r[:, nl.ds(j * 16, 16)], data=t[:, nl.ds(j * 16, 16)], op0=nl.multiply,
                               operand0=3.0)
        nl.store(out, value=r)
        for p in nl.affine_range(4):
            q = nl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=q, data=t[nl.ds(p * 32, 32), :], op0=nl.add, operand0=p * 1.0)
            nl.store(out2[nl.ds(p * 32, 32), :], value=q)
        return out, out2

    a = rand(rng, (128, 96))
    o1, o2 = run_rolled_and_unrolled(k, a)
    close(o1, 3 * a)
    close(o2, a + np.repeat(np.arange(4, dtype=np.float32), 32)[:, None])


@pytest.mark.parametrize("pattern,offset", [
    ([[37, 16], [1, 37]], 37 * 4),                          # rows 4..19
    ([[2 * 37, 8], [3, 12]], 5),                            # strided rows and columns
    ([[37 * 4, 3], [37, 4], [2, 18]], 1),                   # 3 pairs
    ([[37 * 8, 2], [37 * 2, 3], [37, 2], [4, 9]], 0),       # 4 pairs
    ([[37 * 16, 2], [37 * 4, 2], [37, 3], [6, 2], [1, 5]], 7),  # 5 pairs
    ([[1, 37], [37, 6]], 0),                                 # transposing pattern
])
def test_ap_on_hbm(rng, pattern, offset):
    shape = [n for _, n in pattern]

    @nkicc.jit
    def k(a):
        out = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        v = a.ap(pattern, offset=offset)
        assert list(v.shape) == shape
        nl.store(out, value=nl.load(v))
        return out

    a = rand(rng, (32, 37), bf16)
    np.testing.assert_array_equal(f32(k(a)), f32(ap_ref(a, pattern, offset)))


@pytest.mark.parametrize("pattern,offset", [
    ([[64, 128], [1, 64]], 0),
    ([[64, 32], [2, 16], [1, 2]], 64 * 32 + 3),              # partitions 32..63
    ([[64, 64], [16, 4], [1, 8]], 64 * 64 + 5),              # partitions 64..127, 3 pairs
    ([[64, 96], [32, 2], [8, 2], [1, 4]], 2),                # 4 pairs
    ([[64, 16], [32, 2], [16, 2], [4, 2], [1, 3]], 64 * 96 + 1),  # 5 pairs, partitions 96..111
])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_ap_on_sbuf_read_and_write(rng, pattern, offset, dtype):
    shape = [n for _, n in pattern]

    @nkicc.jit
    def k(a):
        o_read = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_write = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        v = t.ap(pattern, offset=offset)
        assert list(v.shape) == shape
        c = nl.ndarray(shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=v)
        nl.store(o_read, value=c)
        w = nl.zeros(a.shape, dtype=a.dtype)
        nisa.tensor_scalar(dst=w.ap(pattern, offset=offset), data=c, op0=nl.add, operand0=1.0)
        nl.store(o_write, value=w)
        return o_read, o_write

    a = rand(rng, (128, 64), dtype)
    got_read, got_write = k(a)
    want = ap_ref(a, pattern, offset)
    np.testing.assert_array_equal(f32(got_read), f32(want))
    w = np.zeros(128 * 64, np.float32)
    idx = ap_ref(np.arange(128 * 64), pattern, offset)
    w[idx] = rounded(f32(want) + 1, dtype)
    np.testing.assert_array_equal(f32(got_write), w.reshape(128, 64))


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_ap_scalar_offset_hbm(rng, dtype):
    # start = offset + value * prod(shape[indirect_dim + 1:])
    row = int(rng.integers(0, 12))

    @nkicc.jit
    def k(a, idx):
        o0 = nl.ndarray((4, 6, 5), dtype=a.dtype, buffer=nl.shared_hbm)
        o1 = nl.ndarray((3, 2, 5), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.load(idx)                                  # (1, 1) int32 SBUF tile
        v0 = a.ap([[30, 4], [5, 6], [1, 5]], offset=0, scalar_offset=i, indirect_dim=0)
        nl.store(o0, value=nl.load(v0))
        i2 = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=i2, data=i, op0=nl.subtract, operand0=row - 2)   # -> 2
        v1 = a.ap([[30, 3], [5, 2], [1, 5]], offset=30, scalar_offset=i2, indirect_dim=1)
        nl.store(o1, value=nl.load(v1))
        return o0, o1

    a = rand(rng, (16, 6, 5), dtype)
    idx = np.array([[row]], np.int32)
    o0, o1 = k(a, idx)
    np.testing.assert_array_equal(f32(o0), f32(a[row:row + 4]))
    np.testing.assert_array_equal(f32(o1), f32(a[1:4, 2:4]))


def test_ap_scalar_offset_sbuf_and_runtime_update(rng):
    # the NKI idiom: tensor_scalar(idx, idx, nl.add, step) moves a window at run time
    @nkicc.jit
    def k(a, idx):
        out = nl.ndarray((4, 128, 3, 7), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)                                     # (128, 10, 7)
        i = nl.load(idx)
        for s in nl.sequential_range(4):
            w = t.ap([[70, 128], [7, 3], [1, 7]], offset=0, scalar_offset=i, indirect_dim=1)
            c = nl.ndarray((128, 3, 7), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=c, src=w)
            nl.store(out[s], value=c)
            nisa.tensor_scalar(dst=i, data=i, op0=nl.add, operand0=2)
        return out

    a = rand(rng, (128, 10, 7))
    start = int(rng.integers(0, 2))
    got = run_rolled_and_unrolled(k, a, np.array([[start]], np.int32))
    for s in range(4):
        r = start + 2 * s
        np.testing.assert_array_equal(got[s], a[:, r:r + 3])


def test_ap_scalar_offset_from_dynamic_range_register(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.dynamic_range(a.shape[0]):
            t = nl.load(a.ap([[37, 1], [1, 37]], offset=0, scalar_offset=i, indirect_dim=0))
            nl.store(out.ap([[37, 1], [1, 37]], offset=0, scalar_offset=i, indirect_dim=0),
                     value=nl.multiply(t, t))
        return out

    a = rand(rng, (6, 37))
    close(k(a), a * a)


# --- negative -----------------------------------------------------------------------

def test_err_more_than_128_partitions():
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((129, 4), dtype=nl.float32, buffer=nl.sbuf)  # MARK:E110-alloc
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(np.zeros((129, 4), np.float32))
    check_error(ei, "E110", "MARK:E110-alloc", "test_ops_memory.py")


def test_err_load_more_than_128_partitions(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)  # MARK:E110-load
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (200, 4)))
    check_error(ei, "E110", "MARK:E110-load", "test_ops_memory.py")


def test_err_dma_from_psum(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=nl.load(a))
        nisa.dma_copy(dst=out, src=p)  # MARK:E120-dma
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E120", "MARK:E120-dma", "test_ops_memory.py")


def test_err_store_from_psum(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.psum)
        nl.store(out, value=p)  # MARK:E120-store
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E120", "MARK:E120-store", "test_ops_memory.py")


@pytest.mark.parametrize("which", ["slice", "int", "ds"])
def test_err_static_oob_on_hbm(rng, which):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        if which == "slice":
            v = a[0:200, :]  # MARK:E101-slice
        elif which == "int":
            v = a[0:128, 8]  # MARK:E101-int
        else:
            v = a[nl.ds(64, 128), :]  # MARK:E101-ds
        nl.store(out, value=nl.load(v))
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E101", f"MARK:E101-{which}", "test_ops_memory.py")


def test_err_ap_out_of_bounds(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((8, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a.ap([[8, 8], [1, 8]], offset=80)))  # MARK:E101-ap
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (16, 8)))
    check_error(ei, "E101", "MARK:E101-ap", "test_ops_memory.py")


def test_err_dma_count_mismatch(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 7), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)  # MARK:E140-dma
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E140", "MARK:E140-dma", "test_ops_memory.py")


def test_err_write_past_end_of_tile(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.memset(dst=t[:, 30:40], value=0.0)  # MARK:E101-write
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 37)))
    check_error(ei, "E101", "MARK:E101-write", "test_ops_memory.py")


def test_read_past_end_of_tile_warns(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 10), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        c = nl.ndarray((128, 10), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t[:, 30:40])
        nl.store(out, value=c)
        return out

    a = rand(rng, (128, 37))
    c = nkicc.compile(k, a)
    assert any("W101" in w for w in c.report["warnings"]), c.report["warnings"]
    got = c.run(a)
    np.testing.assert_array_equal(got[:, :7], a[:, 30:37])   # in-tile part is exact


def test_err_loop_oob_on_hbm(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(3):
            t = nl.load(a[nl.ds(i * 128, 128), :])  # MARK:E101-loop
            nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (256, 8)))
    check_error(ei, "E101", "MARK:E101-loop", "test_ops_memory.py")


def test_err_tensor_copy_shape_mismatch(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        c = nl.ndarray((64, 8), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=nl.load(a))  # MARK:E140-tc
        nl.store(out, value=c)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E140", "MARK:E140-tc", "test_ops_memory.py")
