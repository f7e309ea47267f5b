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
_default = None  # BLAS threads before any limit (numpy's count)


def single_threaded_blas():
    """A context manager limiting BLAS to one thread (a no-op without threadpoolctl)."""
    if ThreadpoolController is None:
        return contextlib.nullcontext()
    return _get().limit(limits=1, user_api="blas")


def _get():
    global _controller, _default
    if _controller is None:  # finding the loaded BLAS libraries costs ~1 ms: once per process
        _controller = ThreadpoolController()
        _default = max([lib.num_threads for lib in _controller.select(user_api="blas").lib_controllers] + [1])
    return _controller


def default_blas():
    """BLAS's own thread count back, inside single_threaded_blas: for a matmul of
    whole loops (the batched path), large enough that the threads pay off."""
    if ThreadpoolController is None:
        return contextlib.nullcontext()
    return _get().limit(limits=_default, user_api="blas")
