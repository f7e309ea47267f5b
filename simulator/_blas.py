"""Tile-sized matmuls (<= 128 x 128 x 512) are fastest on one BLAS thread:
a multi-threaded OpenBLAS spends more time waking its threads than computing,
and on a small or busy machine 100x more (measured: 128^3 fp32, 0.15 ms on one
thread, 11-30 ms on two vCPUs). The simulators run under this limit."""
from __future__ import annotations

import contextlib

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # optional: without it BLAS keeps its own thread count
    threadpool_limits = None


def single_threaded_blas():
    if threadpool_limits is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
