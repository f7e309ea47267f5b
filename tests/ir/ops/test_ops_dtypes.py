"""Conformance: every NKI dtype through memory and the engines, and the casting
rules: dma_copy between different dtypes converts through fp32; tensor_copy
casts straight to the destination dtype; engine arithmetic is fp32 with the
result cast to dst. Casts to integers saturate; fractions are not pinned here
(the data is integral where a float meets an int): tests/simulator/test_numerics.py pins
every conversion's rounding."""
import ml_dtypes
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error, f32


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nl.float32", "nl.bfloat16", "nl.float16", "nl.float8_e4m3", "nl.float8_e5m2", "nl.int8", "nl.int16",
    "nl.int32", "nl.uint8", "nl.uint16", "nl.uint32", "nl.tfloat32", "nl.bool_")

DTYPES = [np.dtype(d) for d in (np.float32, ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3,
                                ml_dtypes.float8_e5m2, np.int8, np.int16, np.int32, np.uint8, np.uint16,
                                np.uint32)]
IDS = [d.name for d in DTYPES]


def integral(rng, shape, dtype, lo=-100, hi=100):
    """Integral values that the dtype holds (fp8 rounds them to other integers)."""
    if dtype.kind == "u":
        lo = 0
    x = rng.integers(lo, hi + 1, size=shape).astype(np.float32)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = np.clip(x, info.min, info.max)
    return x.astype(dtype)


def cast(x, dtype):
    """The simulator's conversion rule: to ints saturating (integral data), to floats round-to-nearest."""
    x = np.asarray(x)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.trunc(x.astype(np.float64)), info.min, info.max).astype(dtype)
    return x.astype(dtype)


def convert_kernel(how):
    """One kernel: a src tile converted to every dtype (by dma_copy or tensor_copy), stored per dtype."""
    @nkicc.jit
    def k(a):
        outs = []
        t = nl.load(a)
        for dt in DTYPES:
            out = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
            c = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
            if how == "dma":
                nisa.dma_copy(dst=c, src=a)        # HBM -> SBUF, converting
            else:
                nisa.tensor_copy(dst=c, src=t)     # SBUF -> SBUF, converting
            nl.store(out, value=c)
            outs.append(out)
        return tuple(outs)
    return k


@pytest.mark.parametrize("src", DTYPES, ids=IDS)
@pytest.mark.parametrize("how", ["dma", "tensor_copy"])
def test_convert_every_pair(rng, src, how):
    a = integral(rng, (128, 19), src)
    outs = convert_kernel(how)(a)
    assert len(outs) == len(DTYPES)
    for dst, got in zip(DTYPES, outs):
        assert got.dtype == dst
        want = cast(a.astype(np.float32), dst) if how == "dma" and dst != src else cast(a, dst)
        np.testing.assert_array_equal(f32(got), f32(want), err_msg=f"{src.name} -> {dst.name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_roundtrip_bit_exact_and_load_dtype(rng, dtype):
    # same-dtype DMA moves bits (incl. NaN payloads and the full int range); nl.load(dtype=) converts
    @nkicc.jit
    def k(a):
        same = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        wide = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(same, value=nl.load(a))
        nl.store(wide, value=nl.load(a, dtype=nl.float32))
        return same, wide

    raw = rng.integers(0, 256, size=(7, 33 * dtype.itemsize), dtype=np.uint8)
    a = raw.view(dtype)
    same, wide = k(a)
    np.testing.assert_array_equal(same.view(np.uint8), raw)
    np.testing.assert_array_equal(wide, a.astype(np.float32))


def test_dma_converts_through_fp32_tensor_copy_does_not(rng):
    big = np.array([[2 ** 24 + 1, -(2 ** 24) - 3, 2 ** 31 - 1, 7]], dtype=np.int32)

    @nkicc.jit
    def k(a):
        via_dma = nl.ndarray(a.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        via_copy = nl.ndarray(a.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        same = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=via_dma, src=a)                     # HBM -> HBM, int32 -> fp32 -> uint32
        c = nl.ndarray(a.shape, dtype=nl.uint32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=nl.load(a))
        nl.store(via_copy, value=c)
        nisa.dma_copy(dst=same, src=a)                        # same dtype: exact
        return via_dma, via_copy, same

    via_dma, via_copy, same = k(big)
    np.testing.assert_array_equal(via_dma, [[2 ** 24, 0, 2 ** 31, 7]])
    np.testing.assert_array_equal(via_copy, [[2 ** 24 + 1, 0, 2 ** 31 - 1, 7]])
    np.testing.assert_array_equal(same, big)


@pytest.mark.parametrize("dtype", [np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16)],
                         ids=["int8", "uint8", "int16", "uint16"])
def test_tensor_copy_saturates(rng, dtype):
    info = np.iinfo(dtype)
    a = np.array([[info.max + 5, info.min - 5, 3, -3, 100000, -100000]], np.int32)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=dtype, buffer=nl.shared_hbm)
        c = nl.ndarray(a.shape, dtype=dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=nl.load(a))
        nl.store(out, value=c)
        return out

    np.testing.assert_array_equal(k(a), np.clip(a, info.min, info.max).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_engine_arithmetic_per_dtype(rng, dtype):
    # tensor_tensor / tensor_scalar / activation / reduce / memset / iota on tiles of each dtype:
    # fp32 arithmetic, the result cast to the tile's dtype
    @nkicc.jit
    def k(a, b):
        o_tt = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_ts = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_act = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_red = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
        o_fill = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o_iota = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=ta, data2=tb, op=nl.add)
        nl.store(o_tt, value=t)
        nisa.tensor_scalar(dst=t, data=ta, op0=nl.multiply, operand0=2.0, op1=nl.subtract, operand1=1.0)
        nl.store(o_ts, value=t)
        nisa.activation(dst=t, op=nl.abs, data=ta)
        nl.store(o_act, value=t)
        r = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.maximum, data=ta, axis=1)
        nl.store(o_red, value=r)
        f = nl.full(a.shape, 3, dtype=a.dtype)
        nl.store(o_fill, value=f)
        nisa.iota(dst=t, pattern=[[1, a.shape[1]]], offset=1, channel_multiplier=2)
        nl.store(o_iota, value=t)
        return o_tt, o_ts, o_act, o_red, o_fill, o_iota

    shape = (16, 9)
    a, b = integral(rng, shape, dtype, -20, 20), integral(rng, shape, dtype, -20, 20)
    tt, ts, act, red, fill, io = k(a, b)
    fa, fb = f32(a), f32(b)
    for got, want in ((tt, fa + fb), (ts, fa * 2 - 1), (act, np.abs(fa)), (red, fa.max(axis=1, keepdims=True)),
                      (fill, np.full(shape, 3.0)),
                      (io, 1 + 2 * np.arange(16)[:, None] + np.arange(9)[None, :])):
        assert got.dtype == dtype
        np.testing.assert_array_equal(f32(got), f32(cast(np.asarray(want, np.float32), dtype)))


def test_nl_dtypes_are_public_names():
    # numpy dtype objects (str() is the plain name kernels compare), equal to ml_dtypes' scalar types
    assert nl.bfloat16 is np.dtype(ml_dtypes.bfloat16) and nl.bfloat16 == ml_dtypes.bfloat16
    assert str(nl.bfloat16) == "bfloat16"
    assert np.dtype(nl.float8_e5m2) == np.dtype(ml_dtypes.float8_e5m2)
    assert np.dtype(nl.float8_e4m3).itemsize == 1
    for name in ("int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bool_"):
        assert np.dtype(getattr(nl, name)) == np.dtype(getattr(np, name))
    assert repr(nl.tfloat32) == "nl.tfloat32"
    with pytest.raises(AttributeError):
        nl.float128  # noqa: B018


def test_tfloat32_and_bool_tiles(rng):
    @nkicc.jit
    def k(a):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        mask = nl.ndarray(a.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
        t = nl.load(a, dtype=nl.tfloat32)
        assert t.dtype is nl.tfloat32 and t.itemsize == 4
        nl.store(o, value=t)
        nl.store(mask, value=nl.greater(nl.load(a), 0.0, dtype=nl.bool_))
        return o, mask

    a = rng.standard_normal((8, 8)).astype(np.float32)
    o, mask = k(a)
    np.testing.assert_array_equal(o, a)
    np.testing.assert_array_equal(mask, a > 0)


def test_err_matmul_integer_operands(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, nl.load(a), nl.load(b))  # INT
        nl.store(out, value=nl.copy(p))
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        k(np.ones((8, 4), np.int8), np.ones((8, 4), np.int8))
    check_error(e, "E132", "# INT", "test_ops_dtypes.py")


def test_err_unknown_dtype():
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype="float7", buffer=nl.shared_hbm)  # DT
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        k(np.ones((2, 2), np.float32))
    check_error(e, "E160", "# DT", "test_ops_dtypes.py")
    with pytest.raises(nkicc.NkiccError):
        k(np.ones((2, 2), np.complex64))
