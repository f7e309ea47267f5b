"""Conformance: nl reductions and nisa.tensor_reduce."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, rand, rounded


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nl.sum", "nl.max", "nl.min", "nl.mean", "nl.prod", "nl.var", "nisa.tensor_reduce")

REF = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod, "var": np.var}


def data_for(rng, name, shape, dtype):
    if name == "prod":   # keep products near 1
        return rand(rng, shape, dtype, 0.8, 1.25)
    if np.dtype(dtype).kind == "i":
        return rand(rng, shape, dtype, -1000, 1000)
    return rand(rng, shape, dtype)


def reduce_kernel(name, axis, keepdims, out_shape):
    fn = getattr(nl, name)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(out_shape, dtype=a.dtype, buffer=nl.shared_hbm)
        r = fn(nl.load(a), axis=axis, keepdims=keepdims)
        assert r.shape == out_shape and r.dtype == a.dtype
        nl.store(out, value=r)
        return out
    return k


CASES = [  # shape, axis
    ((128, 37), 1), ((128, 37), -1), ((1, 37), 1), ((128, 1), 1), ((64, 5, 9), 2), ((64, 5, 9), 1),
    ((64, 5, 9), [1, 2]), ((32, 3, 4, 5), (1, 3)), ((32, 3, 4, 5), [1, 2, 3]),
]


@pytest.mark.parametrize("name", list(REF))
@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_nl_reduce_fp32(rng, name, shape, axis, keepdims):
    a = data_for(rng, name, shape, np.float32)
    ax = tuple(x % len(shape) for x in ((axis,) if isinstance(axis, int) else axis))
    want = REF[name](a.astype(np.float64), axis=ax, keepdims=keepdims)
    got = reduce_kernel(name, axis, keepdims, want.shape)(a)
    close(got, want, np.float32, rtol=1e-4 if name == "var" else 2e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(REF))
@pytest.mark.parametrize("dtype", [bf16, np.float16])
def test_nl_reduce_low_precision(rng, name, dtype):
    shape = (128, 6, 7)
    a = data_for(rng, name, shape, dtype)
    want = REF[name](f32(a).astype(np.float64), axis=(1, 2), keepdims=True)
    got = reduce_kernel(name, [1, 2], True, want.shape)(a)
    assert got.dtype == np.dtype(dtype)
    close(got, rounded(want, dtype), dtype, rtol=3e-2 if dtype == bf16 else 3e-3, atol=3e-2)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_nl_reduce_int32(rng, name):
    a = rand(rng, (128, 9), np.int32, -7, 7) if name == "prod" else data_for(rng, name, (128, 37), np.int32)
    want = REF[name](a.astype(np.int64), axis=1)
    np.testing.assert_array_equal(reduce_kernel(name, 1, False, want.shape)(a), want)


def test_nl_reduce_dtype_argument(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0],), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.sum(nl.load(a), axis=1, dtype=nl.float32)
        assert r.dtype == np.float32
        nl.store(out, value=r)
        return out

    a = rand(rng, (128, 300), bf16)
    close(k(a), f32(a).astype(np.float64).sum(axis=1), np.float32, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op,ref", [(nl.add, np.sum), (np.max, np.max), (nl.minimum, np.min),
                                    (nl.multiply, np.prod), ("maximum", np.max)])
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize("shape,axis,keepdims", [((128, 37), 1, False), ((128, 37), (1,), True),
                                                 ((16, 4, 9), [1, 2], False), ((16, 4, 9), 2, True),
                                                 ((1, 37), -1, False)])
def test_tensor_reduce(rng, op, ref, negate, shape, axis, keepdims):
    ax = tuple(x % len(shape) for x in ((axis,) if isinstance(axis, int) else axis))
    a = rand(rng, shape, np.float32, 0.8, 1.25) if ref is np.prod else rand(rng, shape)
    want = ref(a.astype(np.float64), axis=ax, keepdims=keepdims)
    want = -want if negate else want

    @nkicc.jit
    def k(x):
        out = nl.ndarray(want.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        d = nl.ndarray(want.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=d, op=op, data=nl.load(x), axis=axis, negate=negate, keepdims=keepdims)
        nl.store(out, value=d)
        return out

    close(k(a), want, np.float32)


@pytest.mark.parametrize("dtype", [bf16, np.int32])
def test_tensor_reduce_dtypes(rng, dtype):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=d, op=nl.add, data=nl.load(x), axis=1, negate=True, keepdims=True)
        nl.store(out, value=d)
        return out

    a = rand(rng, (128, 37), dtype, -100, 100) if np.dtype(dtype).kind == "i" else rand(rng, (128, 37), dtype)
    close(k(a), -f32(a).astype(np.float64).sum(axis=1, keepdims=True), np.float32, rtol=1e-5, atol=1e-4)


def test_tensor_reduce_from_psum_into_strided_view(rng):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 4), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=nl.load(x))
        d = nl.zeros((x.shape[0], 4), dtype=nl.float32)
        nisa.tensor_reduce(dst=d[:, 1:4:2], op=nl.maximum, data=p[:, :, 0:6], axis=2)
        nl.store(out, value=d)
        return out

    a = rand(rng, (128, 2, 9))
    want = np.zeros((128, 4), np.float32)
    want[:, 1:4:2] = a[:, :, :6].max(axis=2)
    np.testing.assert_array_equal(k(a), want)


def test_err_reduce_partition_axis(rng):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((1, 37), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.sum(nl.load(x), axis=0))  # MARK:E103-axis
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 37)))
    check_error(ei, "E103", "MARK:E103-axis", "test_ops_reduce.py")


def test_err_tensor_reduce_dst_shape(rng):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.shared_hbm)
        d = nl.ndarray((128, 2), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=d, op=nl.add, data=nl.load(x), axis=1)  # MARK:E140-red
        nl.store(out, value=d)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 37)))
    check_error(ei, "E140", "MARK:E140-red", "test_ops_reduce.py")
