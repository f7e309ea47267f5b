"""Comparing results with an oracle, one function per kind of comparison; each
keeps the tolerance its tests were written with (none is shared loosely):

- close: a kernel's output against numpy, within the result dtype's TOL;
- close_to_scale: within `tol` of the larger of 1 and the largest |want|;
- close_rel: two scalars (times) within `rel` of the larger of them and 1;
- same_up_to_sums: bit for bit unless the batched simulator reordered fp32 sums;
- sum_bound: what fp32 sums of K terms may be off by in any order (a matmul against numpy)."""
import ml_dtypes
import numpy as np

bf16 = np.dtype(ml_dtypes.bfloat16)
fp8 = np.dtype(ml_dtypes.float8_e4m3)

# (rtol, atol) per result dtype; numpy in float64/float32 is the oracle
TOL = {
    np.dtype(np.float32): (2e-5, 1e-5),
    np.dtype(np.float16): (2e-3, 2e-3),
    bf16: (2e-2, 2e-2),
    fp8: (1.3e-1, 1e-1),
}


def f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def close(got, want, dtype=None, rtol=None, atol=None) -> None:
    """Assert `got` (kernel output) matches the numpy oracle `want`."""
    got = np.asarray(got)
    dtype = np.dtype(dtype) if dtype is not None else got.dtype
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))
        return
    r, a = TOL[dtype]
    np.testing.assert_allclose(f32(got).astype(np.float64), np.asarray(want, dtype=np.float64),
                               rtol=rtol if rtol is not None else r, atol=atol if atol is not None else a)


def close_to_scale(got, want, tol=2e-5) -> None:
    """The largest error, relative to the larger of 1 and the largest |want|, below `tol`."""
    want = np.asarray(want, np.float64)
    err = np.abs(np.asarray(got, np.float64) - want).max() / max(1.0, np.abs(want).max())
    assert err < tol, err


def close_rel(a: float, b: float, rel: float, what: str) -> None:
    """Two scalars within `rel` of the larger of |a|, |b| and 1."""
    assert abs(a - b) <= rel * max(abs(a), abs(b), 1.0), (what, a, b)


def reordered(compiled) -> bool:
    """Whether the last run of a CompiledKernel added some fp32 sums in another order than one
    instruction at a time would (the machine simulator's batched loops: SimReport.reordered_sums)."""
    return bool(compiled.sim is not None and compiled.sim.reordered_sums)


def same_up_to_sums(got, want, sums_reordered: bool, tol: float = 1e-6, err_msg: str = "") -> None:
    """Bit for bit, unless the run reordered fp32 sums: then within `tol` of the largest |want|
    (issue 14 allows 1e-6 relative for reordered sums, and nothing else)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not sums_reordered:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
        return
    scale = float(np.nanmax(np.abs(want), initial=0.0))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale, equal_nan=True, err_msg=err_msg)


def sum_bound(terms: int, magnitude) -> np.ndarray:
    """The error fp32 can make summing `terms` products, in any order, whose absolute values sum
    to `magnitude` (|A|.T @ |B| for a matmul): gamma_K = K u / (1 - K u), u = 2**-24 (Higham,
    "Accuracy and Stability of Numerical Algorithms", 3.1), plus one rounding of the result. A
    wrong index is off by a whole term, far above it."""
    u = 2.0 ** -24
    gamma = terms * u / (1 - terms * u)
    return (gamma + u) * np.asarray(magnitude, np.float64)
