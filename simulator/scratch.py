"""Scratch arrays the batched path reuses between loop nests and runs.

A fresh large array is fresh pages from the kernel: every page faults on its
first write, and in a VM each fault is slow and its cost varies (mm2 at
--scale 8: 3,200 faults a run before this pool, about 100 with it; the median
run 5-10% faster, docs/benchmarks.md). Arrays given back here are handed out
again for the same byte size, their pages already mapped. Callers give an array
back only once nothing reads it (the end of its nest).
"""
from __future__ import annotations

import math

import numpy as np


class Scratch:
    """Free buffers by byte size; at most `cap` bytes kept free (the rest goes
    back to the allocator), so a run's peak memory grows by `cap` at most."""

    def __init__(self, cap: int = 256 << 20):
        self.cap, self.kept = cap, 0
        self._free: dict[int, list[np.ndarray]] = {}
        self._held: set[int] = set()  # id() of the free buffers: one given back twice is kept once

    def take(self, shape: tuple, dtype, fill=None) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = math.prod(shape) * dtype.itemsize
        free = self._free.get(n)
        if free:
            buf = free.pop()
            self.kept -= n
            self._held.discard(id(buf.base))
            a = buf.view(dtype).reshape(shape)
        else:
            a = np.empty(shape, dtype)
        if fill is not None:
            a.fill(fill)
        return a

    def give(self, a: np.ndarray) -> None:
        base = a
        while base.base is not None:
            base = base.base
        if (not isinstance(base, np.ndarray) or not base.flags.c_contiguous or id(base) in self._held
                or self.kept + base.nbytes > self.cap):
            return
        self._free.setdefault(base.nbytes, []).append(base.reshape(-1).view(np.uint8))
        self._held.add(id(base))
        self.kept += base.nbytes
