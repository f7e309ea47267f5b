"""NKI 0.2 kernels (`import nki` of SDK 2.27/2.28) traced with dialect="0.2":
the nisa signatures 0.3 changed, as 0.2 wrote them (language/nki02_isa.py)."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError
from tests.support.rolling import NO_CACHE, data


def causal_02(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    # 0.2's order: dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value
    nisa.affine_select(o, [[-1, a.shape[1]]], 3, 1, t, -50.0, cmp_op=nl.greater_equal)
    nisa.dma_copy(out, o)
    return out


def dynamic_copy_02(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy_dynamic_src(t, a)
    nisa.dma_copy(out, t)
    return out


def rmw_02(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.dma_copy(out, b)
    nisa.dma_copy(out, t, dst_rmw_op=np.add)  # out = t + out, as 0.3's dma_compute(out, [t, out])
    return out


def psum_dma_02(a):
    out = nl.ndarray((a.shape[1], a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    p = nl.ndarray((a.shape[1], a.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(p, t, t)
    nisa.dma_copy(out, p)   # 0.2's DMA read PSUM
    return out


def reduce_3d_02(a):
    out = nl.ndarray(a.shape[:2], dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    r = nl.ndarray(a.shape[:2], dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(r, nl.maximum, t, axis=1)   # 0.2: the last free axis of a 3-D tile
    nisa.dma_copy(out, r)
    return out


def range_select_02(a, lo, hi):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t, b0, b1 = (nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for x in (a, lo, hi))
    for dst, src in ((t, a), (b0, lo), (b1, hi)):
        nisa.dma_copy(dst, src)
    o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    m = nl.ndarray(lo.shape, dtype=nl.float32, buffer=nl.sbuf)
    # 0.2 filled with FP32_MIN and reset the accumulator, whatever these two said
    nisa.range_select(o, t, nl.greater_equal, nl.less, b0, b1, reduce_cmd=nisa.reduce_cmd.idle, reduce_res=m,
                      on_false_value=0.0)
    nisa.dma_copy(out, o)
    return out


def test_affine_select_in_02_order(rng):
    a = data(rng, 64, 48)
    got = nkicc.compile(causal_02, a, dialect="0.2", **NO_CACHE).run(a)
    keep = 3 + np.arange(64)[:, None] - np.arange(48)[None, :] >= 0
    np.testing.assert_array_equal(got, np.where(keep, a, -50.0))
    with pytest.raises(NkiccError):  # the same call is not 0.6's (offset where channel_multiplier goes)
        nkicc.compile(causal_02, a, **NO_CACHE).run(a)


def test_what_03_removed_is_a_coded_error_naming_the_section(rng):
    with pytest.raises(NkiccError) as e:
        nkicc.compile(dynamic_copy_02, data(rng, 8, 8), dialect="0.2", **NO_CACHE)
    assert e.value.code == "E161" and "(NKI 0.2)" in e.value.message
    assert "0.3 -> 0.4" in e.value.hint and e.value.loc.line == dynamic_copy_02.__code__.co_firstlineno + 3


def _in_02_not_06(kernel, arrays, want, code):
    """The kernel runs as 0.2 wrote it and matches numpy; 0.6 (nkicc's own) refuses it with `code`."""
    got = nkicc.compile(kernel, *arrays, dialect="0.2", **NO_CACHE).run(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(NkiccError) as e:
        nkicc.compile(kernel, *arrays, **NO_CACHE).run(*arrays)
    assert e.value.code == code, e.value


def test_dma_copy_read_modify_write(rng):
    a, b = data(rng, 64, 48), data(rng, 64, 48)
    _in_02_not_06(rmw_02, (a, b), a + b, "E160")


def test_dma_copy_from_psum(rng):
    a = data(rng, 64, 48)
    _in_02_not_06(psum_dma_02, (a,), a.T.astype(np.float64) @ a, "E120")


def test_tensor_reduce_axis_1_of_a_3d_tile_is_its_last(rng):
    a = data(rng, 32, 4, 8)
    _in_02_not_06(reduce_3d_02, (a,), a.max(axis=2), "E140")


def test_range_select_fills_with_fp32_min(rng):
    a = data(rng, 32, 40)
    lo = rng.integers(0, 10, (32, 1)).astype(np.float32)
    hi = lo + rng.integers(5, 30, (32, 1)).astype(np.float32)
    j = np.arange(40)[None, :]
    want = np.where((j >= lo) & (j < hi), a, np.finfo(np.float32).min)
    got = nkicc.compile(range_select_02, a, lo, hi, dialect="0.2", **NO_CACHE).run(a, lo, hi)
    np.testing.assert_array_equal(got, want)
    as_06 = nkicc.compile(range_select_02, a, lo, hi, **NO_CACHE).run(a, lo, hi)
    np.testing.assert_array_equal(as_06, np.where(want == np.finfo(np.float32).min, 0.0, a))
