"""What each instruction computes, in numpy: its definition's `compute` rule
(nkicc.ir.ops), and how results are written. Shared by every simulator so that
the reference interpreter and the machine model cannot disagree on arithmetic.

Arithmetic is fp32 (NKI_SPEC 3): inputs are widened to float32 and results
cast to the destination dtype. Operands arrive as numpy views already cut out
of memory; writes go through `store`.
"""
from __future__ import annotations

import numpy as np

from ..ir import Op, ops
from ..ir.ops import values

_F32 = np.float32
f32 = values.f32


def store(dst: np.ndarray, values: np.ndarray) -> None:
    """Write values (any float/int array with dst's element count) into dst."""
    values = np.asarray(values).reshape(dst.shape)
    if values.dtype != dst.dtype:
        if np.issubdtype(dst.dtype, np.integer):
            with np.errstate(invalid="ignore", over="ignore"):
                values = np.nan_to_num(values.astype(np.float64), nan=0.0)
                info = np.iinfo(dst.dtype)
                values = np.clip(np.trunc(values), info.min, info.max).astype(dst.dtype)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                values = values.astype(dst.dtype)
    dst[...] = values


def compute(op: Op, read) -> list[tuple[int, np.ndarray]]:
    """Evaluate `op` by its definition; returns (output index, values) pairs.
    `read(access)` gives the numpy view of an input (PSUM accumulation is the
    caller's: it knows which elements were written before). Callers run
    it under np.errstate(all="ignore") (once per program, not per op: it
    costs a few microseconds to enter): NaN poison and overflow are values
    here, not errors."""
    return ops.of(op).compute(op, read)
