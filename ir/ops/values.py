"""How semantics see operands: fp32 numpy arrays in (partition, free) form."""
from __future__ import annotations

import numpy as np

from ..nodes import Const

F32 = np.float32


def f32(view: np.ndarray) -> np.ndarray:
    return np.asarray(view, dtype=F32)


def as_tiles(a: np.ndarray) -> np.ndarray:
    """(partition, free) 2-d form of a tile view."""
    if a.ndim == 0:
        return a.reshape(1, 1)
    return a.reshape(a.shape[0], -1)


def tile(x, read) -> np.ndarray:
    return as_tiles(f32(read(x)))


def operand(x, read) -> np.ndarray | float:
    """A Const as a float, a [P, 1] tile as a (P, 1) fp32 array."""
    if isinstance(x, Const):
        return F32(x.value)
    return tile(x, read)
