"""What each instruction computes, in numpy: its definition's `compute` rule
(nkicc.ir.ops), and how results are written. Shared by every simulator so that
the reference interpreter and the machine model cannot disagree on arithmetic.

Arithmetic is fp32 (as on the engines): inputs are widened to float32 and results
cast to the destination dtype. Operands arrive as numpy views already cut out
of memory; writes go through `store`.
"""
from __future__ import annotations

import numpy as np

from ..ir import Op, ops
from ..ir.ops import values
from ..ir import numerics

_F32 = np.float32
f32 = values.f32


def poison_value(dt: np.dtype):
    """What never-written memory holds, as in the vendor's simulator: NaN for
    floats, 4 for integers (nki_simulator.rst, "Uninitialized Memory
    Detection"), True for bool."""
    if dt == np.bool_:
        return True
    if np.issubdtype(dt, np.integer):
        return 4
    return np.nan


def store(dst: np.ndarray, values: np.ndarray) -> None:
    """Write values (any float/int array with dst's element count) into dst,
    converted as the hardware converts (numerics.py: one rule per dtype pair)."""
    values = np.asarray(values).reshape(dst.shape)
    if values.dtype != dst.dtype:
        values = numerics.converter(dst.dtype)(values)
    dst[...] = values


def fill(dst: np.ndarray, value) -> None:
    """Write one number into every element of dst, converted as `store` converts it (once, not
    per element: no array of copies of it)."""
    one = np.asarray(value).reshape(1)
    if one.dtype != dst.dtype:
        one = numerics.converter(dst.dtype)(one)
    dst[...] = one[0]


def compute(op: Op, read) -> list[tuple[int, np.ndarray]]:
    """Evaluate `op` by its definition; returns (output index, values) pairs.
    `read(access)` gives the numpy view of an input (PSUM accumulation is the
    caller's: it knows which elements were written before). Callers run
    it under np.errstate(all="ignore") (once per program, not per op: it
    costs a few microseconds to enter): NaN poison and overflow are values
    here, not errors."""
    return ops.of(op).compute(op, read)
