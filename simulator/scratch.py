"""Scratch arrays the batched path reuses between loop nests and runs.

A fresh large array is fresh pages from the kernel: every page faults on its
first write, and in a VM each fault is slow and its cost varies (mm2 at
--scale 8: 3,200 faults a run before this pool, about 100 with it; the median
run 5-10% faster, docs/benchmarks.md). Arrays given back here are handed out
again for the same byte size, their pages already mapped. Callers give an array
back only once nothing reads it (the end of its nest).

The same cost outside the batched path is the C allocator's to avoid: a simulation
sets glibc to keep freed memory for reuse (keep_freed_memory) and numpy to small
pages while it runs (small_pages); `simulating()` does both.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import platform
import sys
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


# glibc gives a freed block back to the kernel when it was mmap'd (above the mmap threshold) or
# when the free memory at the top of the heap passes the trim threshold. Its own rule raises both
# as large blocks are freed, to 32 MiB and 64 MiB at most, but only after a block that size was
# mmap'd and freed; until then a simulation's temporaries (a [64, 32128] bf16 tile widened to fp32
# is 8 MiB, and each instruction makes a few) were handed back and faulted in again, page by page.
# The library's cross-entropy forward (21,504 instructions) took 2.6 M page faults and 3.9 s of
# system time in a 6 s simulation; at glibc's ceiling from the start, 11 k faults and 2.1 s
# (docs/conformance.md). A Dask worker's processes start with MALLOC_TRIM_THRESHOLD_=65536 (the
# nanny's environment), which hands back every large block for good: the suite's items simulated
# up to 5x slower there than alone.
_MMAP_THRESHOLD, _TRIM_THRESHOLD = -3, -1  # mallopt's parameter numbers (malloc.h)
KEPT_FREED_ENV = "NKICC_KEEP_FREED_MEMORY"  # 0: leave the C allocator's settings as they are


@functools.cache  # once per process: glibc has no call that reads the thresholds back
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds to the ceiling its own rule reaches (32 and 64 MiB),
    once per process, so that freed temporaries are reused rather than faulted in again. At most
    64 MiB of free memory stays with each allocator arena (one per thread that allocates, up to
    glibc's limit). Whether it is set (False: not glibc, a 32-bit build, or
    NKICC_KEEP_FREED_MEMORY=0)."""
    if os.environ.get(KEPT_FREED_ENV, "1") == "0" or sys.maxsize <= 2 ** 32 or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_TRIM_THRESHOLD, 64 << 20))


@contextlib.contextmanager
def simulating():
    """What a simulation sets in the process: freed memory kept (from the first one on) and small
    pages (while it runs)."""
    keep_freed_memory()
    with small_pages():
        yield


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
