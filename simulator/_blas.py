"""Tile-sized matmuls (<= 128 x 128 x 512) are fastest on one BLAS thread:
a multi-threaded OpenBLAS spends more time waking its threads than computing,
and on a small or busy machine 100x more (measured: 128^3 fp32, 0.15 ms on one
thread, 11-30 ms on two vCPUs). The simulators run under this limit."""
from __future__ import annotations

import contextlib

try:
    from threadpoolctl import ThreadpoolController
except ImportError:  # optional: without it BLAS keeps its own thread count
    ThreadpoolController = None

_controller = None


def single_threaded_blas():
    """A context manager limiting BLAS to one thread (a no-op without threadpoolctl)."""
    global _controller
    if ThreadpoolController is None:
        return contextlib.nullcontext()
    if _controller is None:  # finding the loaded BLAS libraries costs ~1 ms: once per process
        _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")
