"""Scratch arrays the batched path reuses between loop nests and runs.

A fresh large array is fresh pages from the kernel: every page faults on its
first write, and in a VM each fault is slow and its cost varies (mm2 at
--scale 8: 3,200 faults a run before this pool, about 100 with it; the median
run 5-10% faster, docs/benchmarks.md). Arrays given back here are handed out
again for the same byte size, their pages already mapped. Callers give an array
back only once nothing reads it (the end of its nest).
"""
from __future__ import annotations

import contextlib
import math
import threading

import numpy as np

# numpy asks the kernel for transparent huge pages on large arrays (madvise); where
# defrag is "madvise" (this machine, many distributions) the kernel then compacts memory
# synchronously on the first write to each 2 MB page. In a long-lived process whose heap
# is fragmented (a test suite's: torch and goldens of several GB) that stall dominates a
# fresh array: a 268 MB KV-cache copy took 0.76 s, 0.12 s on small pages (library
# attention block, docs/conformance.md).
_set_huge_pages = getattr(getattr(getattr(np, "_core", None) or getattr(np, "core", None), "multiarray", None),
                          "_set_madvise_hugepage", None)


class _PageSetting:
    """numpy's huge-page switch, off while any simulation runs: it is one setting for the
    process, so simulations in several threads count themselves in and the last one out
    restores what was set outside."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._outside = True

    @contextlib.contextmanager
    def small(self):
        if _set_huge_pages is None:
            yield
            return
        with self._lock:
            if not self._inside:
                self._outside = _set_huge_pages(False)
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if not self._inside:
                    _set_huge_pages(self._outside)


small_pages = _PageSetting().small


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
