"""Comparing a kernel's results with an oracle where the machine simulator's
batched loops may have added fp32 sums in another order."""
import numpy as np


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
