"""How semantics see operands: fp32 numpy arrays in (partition, free) form."""
from __future__ import annotations

import numpy as np

from ..nodes import Const
from ..numerics import as_f32

F32 = np.float32


def f32(view: np.ndarray) -> np.ndarray:
    return as_f32(np.asarray(view))


def address(x: np.ndarray) -> int:
    """Where an array's first element lies in memory (views of one buffer compare by it)."""
    return x.__array_interface__["data"][0]


def same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are the same elements of memory in the same order: one shape, one first
    address, and one stride along every axis that has more than one element."""
    return a.shape == b.shape and address(a) == address(b) and all(
        p == q for n, p, q in zip(a.shape, a.strides, b.strides) if n > 1)


def view_at(x: np.ndarray, start: int, shape: tuple, strides: tuple, dtype=None) -> np.ndarray:
    """A view of the buffer x is a view of (its base's base ...), from address `start`, in the
    given shape and byte strides (numpy refuses, ValueError, one that leaves the buffer)."""
    owner = x
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    return np.ndarray(shape, dtype or x.dtype, owner, start - address(owner), strides)


def as_tiles(a: np.ndarray) -> np.ndarray:
    """(partition, free) 2-d form of a tile view."""
    if a.ndim == 0:
        return a.reshape(1, 1)
    return a.reshape(a.shape[0], -1)


def tile(x, read) -> np.ndarray:
    return as_tiles(f32(read(x)))


def affine_values(op, partitions: int) -> np.ndarray:
    """offset + p * channel_multiplier + sum(i_k * step_k) per element (int64), from
    the attributes checks.affine_pattern made."""
    free_idx = np.zeros((1,), dtype=np.int64)
    for step, num in op.attr("pattern"):
        free_idx = (free_idx[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    p = np.arange(partitions, dtype=np.int64)[:, None] * op.attr("channel_multiplier")
    return op.attr("offset") + p + free_idx[None, :]


def operand(x, read) -> np.ndarray | float:
    """A Const as a float, a [P, 1] tile as a (P, 1) fp32 array."""
    if isinstance(x, Const):
        return F32(x.value)
    return tile(x, read)
