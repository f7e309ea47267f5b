"""`nl` of NKI 0.1 (`import neuronxcc.nki.language as nl`).

nkicc's own nl operations with NKI 0.1's calling conventions on top: index
grids (`nl.arange`, `nl.mgrid`) and `mask=` (grid.py, legacy.py), shapes
with `nl.par_dim` anywhere (block dimensions), reductions that keep the
partition dimension in front when they broadcast, `nl.loop_reduce`, and the
SPMD grid helpers `nl.spmd_dim` / `nl.nc`. Every name 0.6 also has and 0.1
spelled the same way is 0.6's, wrapped so that it takes 0.1 operands.
"""
from __future__ import annotations

import builtins
import functools
import types

import numpy as np

from .. import isa
from .. import language as _nl
from ..ir import NkiccError
from . import legacy
from .grid import arange, mgrid  # noqa: F401 - nl.arange, nl.mgrid
from .legacy import BlockTensor, Masked, ParDim, PendingMatmul, masked_call, partition_first
from .tensor import Tensor
from .tracing import user_loc

__nki_dialect__ = "0.1"

# names of nkicc.language that are not operations on tiles: served as they are
_PLAIN = (types.ModuleType, type)
_NOT_OPS = {"affine_range", "sequential_range", "static_range", "dynamic_range", "no_reorder", "program_id",
            "num_programs", "program_ndim", "ds", "fori_loop", "while_loop", "random_seed", "device_print",
            "is_hbm", "is_on_chip", "is_psum", "is_sbuf"}


def _expand_partition(args: list) -> list:
    """0.1 broadcasts a tile against another by its partition dimension first: a
    (P,) reduction result meets a (P, F) tile as (P, 1)."""
    tiles = [a for a in args if isinstance(a, Tensor) and a.buffer in ("sbuf", "psum")]
    if len(tiles) < 2:
        return args
    ndim = builtins.max(t.ndim for t in tiles)  # (this module's max is nl.max)
    return [partition_first(a, ndim) if any(a is t for t in tiles) else a for a in args]


def _keep_partition(out, args):
    """A reduction of a (P, F) tile over F is (P, 1) here, so that it broadcasts
    against (P, F) by its partition dimension, as in 0.1 (also `.broadcast_to`)."""
    if isinstance(out, Tensor) and out.ndim == 1 and out.buffer in ("sbuf", "psum") and any(
            isinstance(a, Tensor) and a.ndim > 1 and a.buffer in ("sbuf", "psum") for a in args):
        return out.expand_dim(1)
    return out


def _wrap(fn):
    @functools.wraps(fn)
    def call(*args, mask=None, **kwargs):
        out = masked_call(fn, args, kwargs, mask, user_loc(2), _expand_partition)
        return out if isinstance(out, Masked) else _keep_partition(out, [getattr(a, "tile", a) for a in args])
    call.__module__ = __name__
    return call


for _name, _value in list(vars(_nl).items()):  # (not dir(): that would make the lazy dtypes, and import ml_dtypes)
    if _name.startswith("_") or _name in _NOT_OPS or isinstance(_value, _PLAIN) or not callable(_value) \
            or not getattr(_value, "__module__", "").startswith("nkicc.language"):
        if not _name.startswith("_"):
            globals()[_name] = _value
        continue
    globals()[_name] = _wrap(_value)


class fp32:
    """`nl.fp32.min` of 0.1: the most negative finite fp32 (bit pattern 0xff7fffff), the fill a
    causal mask uses for "minus infinity"."""
    min = float(np.finfo(np.float32).min)


# --- tensors with block dimensions ----------------------------------------------------------

def par_dim(size) -> ParDim:
    """Marks the partition dimension of a shape; dimensions before it are blocks."""
    return ParDim(size)


def _shape(shape) -> tuple:
    return tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)


def ndarray(shape, dtype, buffer=None, name="", **_hints):
    """A new tensor (SBUF unless `buffer` says otherwise); `nl.par_dim` may stand after block dimensions."""
    return legacy.allocate(_shape(shape), dtype, buffer or _nl.sbuf, name, user_loc(2))


def _filled(shape, dtype, buffer, name, value, loc):
    t = legacy.allocate(_shape(shape), dtype, buffer or _nl.sbuf, name, loc)
    for tile in t.tiles() if isinstance(t, BlockTensor) else [t]:
        if tile.buffer not in ("sbuf", "psum"):
            raise NkiccError("E120", f"nl.zeros/ones/full on {tile.buffer} is not supported", loc,
                             "fill an SBUF tile and store it")
        isa.memset(tile, value)
    return t


def zeros(shape, dtype, buffer=None, name="", **_hints):
    """ndarray filled with 0."""
    return _filled(shape, dtype, buffer, name, 0.0, user_loc(2))


def ones(shape, dtype, buffer=None, name="", **_hints):
    """ndarray filled with 1."""
    return _filled(shape, dtype, buffer, name, 1.0, user_loc(2))


def full(shape, fill_value, dtype, buffer=None, name="", **_hints):
    """ndarray filled with `fill_value`."""
    return _filled(shape, dtype, buffer, name, fill_value, user_loc(2))


def store(dst, value, mask=None, **hints):
    """Write the tile `value` into `dst` (HBM); a PSUM tile goes through SBUF, as 0.1's
    compiler took it there (a DMA cannot read PSUM)."""
    def run(dst, value):
        if isinstance(value, Tensor) and value.buffer == "psum":
            value = _nl.copy(value)
        return _nl.store(dst, value, **hints)
    return masked_call(run, [dst, value], {}, mask, user_loc(2))


def _without_directives(loop):
    def make(*args, directives=None, **kwargs):
        return loop(*args, **kwargs)
    make.__name__, make.__doc__ = loop.__name__, f"{loop.__doc__}\n(0.1's `directives=` are scheduling hints: ignored.)"
    return make


affine_range = _without_directives(_nl.affine_range)
sequential_range = _without_directives(_nl.sequential_range)
static_range = _without_directives(_nl.static_range)


# --- matmul ---------------------------------------------------------------------------------

def matmul(x, y, transpose_x=False, mask=None, **_hints):
    """x @ y (x given as [K, M] with transpose_x): an fp32 PSUM result, which `psum[...] +=
    nl.matmul(...)` accumulates in place (legacy.PendingMatmul)."""
    def run(x, y):
        return PendingMatmul(x if transpose_x else _nl.transpose(x), y, {})
    return masked_call(run, [x, y], {}, mask, user_loc(2))


# --- reductions over a loop, SPMD grids ------------------------------------------------------

def loop_reduce(x, op, loop_indices, dtype=None, mask=None, **_hints):
    """`acc[...] = nl.loop_reduce(x, op, loop_indices=[i])`: acc = op(acc, x) each iteration."""
    return LoopReduce(x, op, mask)


class LoopReduce:
    """A loop_reduce result: only an assignment into the accumulator gives it its meaning
    (the accumulator is the destination of that assignment)."""

    def __init__(self, x, op, mask) -> None:
        self.x, self.op, self.mask = x, op, mask

    def store_into(self, acc: Tensor) -> None:
        name = getattr(self.op, "_nki_op", None) or getattr(self.op, "__name__", str(self.op))
        name = {"amax": "maximum", "amin": "minimum", "max": "maximum", "min": "minimum"}.get(name, name)
        masked_call(lambda a, x: isa.tensor_tensor(a, a, x, name), [acc, self.x], {}, self.mask, user_loc(3))


def nc(n: int) -> int:
    """`nl.nc(2)`: NeuronCores along a launch-grid dimension (nkicc runs the programs in turn)."""
    return n


def spmd_dim(*sizes) -> int:
    """`nl.spmd_dim(grid_x, nl.nc(2))`: one launch-grid dimension of the product's size."""
    out = 1
    for s in sizes:
        out *= s
    return out


def static_cast(input_data, dtype):
    """A Python scalar or array cast to `dtype`."""
    return np.asarray(input_data).astype(dtype)[()]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_nl, name)  # dtypes made on first use; nkicc's E160 for names it lacks


__all__ = [n for n in globals() if not n.startswith("_") and n not in ("annotations", "functools", "types", "np", "isa",
                                                                       "legacy", "NkiccError", "Tensor",
                                                                       "BlockTensor", "Masked", "PendingMatmul", "ParDim",
                                                                       "masked_call", "partition_first",
                                                                       "user_loc", "LoopReduce", "builtins")]
