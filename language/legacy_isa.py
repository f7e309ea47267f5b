"""`nisa` of NKI 0.1 (`import neuronxcc.nki.isa as nisa`): instructions that
return their result tile.

Each function allocates the tile the instruction would have returned (its
shape, dtype and buffer as NKI 0.1 documents them) and emits nkicc's own
destination-first instruction into it, so the IR is the one a 0.6 kernel
writing `dst` makes. `nc_matmul` returns a pending result (legacy.py): the
statement that takes it decides whether it is written, accumulated
(`psum[...] += nisa.nc_matmul(...)`) or read. `mask=` cuts every operand to
the mask's window. Instructions that took a `dst` already in 0.1 keep it.
"""
from __future__ import annotations

import math

from .. import isa
from .. import language as nl
from ..ir import NkiccError
from ..ir.ops.enums import engine, reduce_cmd  # noqa: F401 - nisa.engine / nisa.reduce_cmd of 0.1
from .creation import new_tensor
from .grid import GridIndex, GridMask, unsupported
from .legacy import PendingMatmul, masked_call, partition_first
from .tensor import Tensor
from .tracing import user_loc

__nki_dialect__ = "0.1"

_CMP = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}


def _out(shape, dtype, buffer="sbuf") -> Tensor:
    return new_tensor(tuple(shape), dtype, buffer, "", user_loc(3))


def _run(mask, fn, **operands):
    """`fn(**operands)` with the operands as views, cut to `mask`'s window, and
    lined up by their partition dimension (a (P,) tile meets (P, F) as (P, 1))."""
    def call(**ops):
        tiles = [t for t in ops.values() if isinstance(t, Tensor) and t.buffer in ("sbuf", "psum")]
        ndim = max((t.ndim for t in tiles), default=0)
        return fn(**{k: partition_first(v, ndim) if isinstance(v, Tensor) else v for k, v in ops.items()})
    return masked_call(call, [], operands, mask, user_loc(3))


# --- element-wise and activation -----------------------------------------------------------

def activation(op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **hints):
    """op(data * scale + bias) into a new SBUF tile (Scalar Engine)."""
    def run(data, bias, scale, reduce_res):
        dst = _out(data.shape, dtype or data.dtype)
        isa.activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                       reduce_cmd=reduce_cmd, **hints)
        return dst
    return _run(mask, run, data=data, bias=bias, scale=scale, reduce_res=reduce_res)


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **hints):
    """activation, and its result reduced along the free dimension into reduce_res."""
    def run(data, bias, scale, reduce_res):
        dst = _out(data.shape, dtype or data.dtype)
        isa.activation_reduce(dst, op, data, reduce_op, reduce_res, bias=bias, scale=scale, **hints)
        return dst
    return _run(mask, run, data=data, bias=bias, scale=scale, reduce_res=reduce_res)


def reciprocal(data, dtype=None, mask=None, **hints):
    """1 / data into a new SBUF tile."""
    def run(data):
        dst = _out(data.shape, dtype or data.dtype)
        isa.reciprocal(dst, data, **hints)
        return dst
    return _run(mask, run, data=data)


def tensor_copy(src, mask=None, dtype=None, engine=engine.unknown, **hints):
    """A copy of src in a new SBUF tile."""
    def run(src):
        dst = _out(src.shape, dtype or src.dtype)
        isa.tensor_copy(dst, src, engine=engine, **hints)
        return dst
    return _run(mask, run, src=src)


def tensor_tensor(data1, data2, op, dtype=None, mask=None, engine=engine.unknown, **hints):
    """op(data1, data2) element-wise into a new SBUF tile."""
    def run(data1, data2):
        dst = _out(data1.shape, dtype or _wider(data1, data2))
        isa.tensor_tensor(dst, data1, data2, op, engine=engine, **hints)
        return dst
    return _run(mask, run, data1=data1, data2=data2)


def _wider(a: Tensor, b: Tensor):
    return a.dtype if a.dtype == b.dtype else nl.float32


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, dtype=None,
                  mask=None, engine=engine.unknown, **hints):
    """op1(op0(data, operand0), operand1) into a new SBUF tile."""
    def run(data, operand0, operand1):
        dst = _out(data.shape, dtype or data.dtype)
        isa.tensor_scalar(dst, data, op0, operand0, reverse0=reverse0, op1=op1, operand1=operand1,
                          reverse1=reverse1, engine=engine, **hints)
        return dst
    return _run(mask, run, data=data, operand0=operand0, operand1=operand1)


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, **hints):
    """op1(op0(data, operand0), operand1) with operand1 a tile, into a new SBUF tile."""
    def run(data, operand0, operand1):
        dst = _out(data.shape, dtype or data.dtype)
        isa.scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=reverse0, reverse1=reverse1,
                                 **hints)
        return dst
    return _run(mask, run, data=data, operand0=operand0, operand1=operand1)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, dtype=None, mask=None,
                       **hints):
    """The running op1(op0(previous, data0), data1) along the free dimension, into a new SBUF tile."""
    def run(data0, data1, initial):
        dst = _out(data0.shape, dtype or data0.dtype)
        isa.tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=reverse0, reverse1=reverse1,
                               **hints)
        return dst
    return _run(mask, run, data0=data0, data1=data1, initial=initial)


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None,
                         **hints):
    """tensor_scalar, and its result reduced along the free dimension into reduce_res."""
    def run(data, operand0, reduce_res):
        dst = _out(data.shape, dtype or data.dtype)
        isa.tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=reverse0, **hints)
        return dst
    return _run(mask, run, data=data, operand0=operand0, reduce_res=reduce_res)


def dropout(data, prob, mask=None, dtype=None, **hints):
    """data with each element zeroed at probability prob, into a new SBUF tile."""
    def run(data, prob):
        dst = _out(data.shape, dtype or data.dtype)
        isa.dropout(dst, data, prob)
        return dst
    return _run(mask, run, data=data, prob=prob)


# --- reductions ------------------------------------------------------------------------

def _axes(axis, ndim: int) -> tuple[int, ...]:
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(a % ndim for a in axes)


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate=False, keepdims=False, **hints):
    """op reduced along the free axes `axis`, into a new SBUF tile."""
    def run(data):
        axes = _axes(axis, data.ndim)
        keep = keepdims or len(axes) == data.ndim - 1  # a (P,) result is (P, 1) here: it broadcasts by P
        shape = [1 if i in axes else s for i, s in enumerate(data.shape) if keep or i not in axes]
        dst = _out(shape, dtype or data.dtype)
        isa.tensor_reduce(dst, op, data, axis, negate=negate, keepdims=keep, **hints)
        return dst
    return _run(mask, run, data=data)


def tensor_partition_reduce(op, data, mask=None, dtype=None, **hints):
    """op reduced across partitions, into a new one-partition SBUF tile."""
    def run(data):
        dst = _out((1,) + tuple(data.shape[1:]), dtype or data.dtype)
        isa.tensor_partition_reduce(dst, op, data, **hints)
        return dst
    return _run(mask, run, data=data)


def bn_stats(data, mask=None, dtype=None, **hints):
    """Per-partition batch-norm statistics (6 per 512 elements) into a new SBUF tile."""
    def run(data):
        free = math.prod(data.shape[1:])
        dst = _out((data.shape[0], 6 * max(1, math.ceil(free / 512))), dtype or nl.float32)
        isa.bn_stats(dst, data)
        return dst
    return _run(mask, run, data=data)


def bn_aggr(data, mask=None, dtype=None, **hints):
    """Mean and variance per partition from bn_stats results, into a new (P, 2) SBUF tile."""
    def run(data):
        dst = _out((data.shape[0], 2), dtype or nl.float32)
        isa.bn_aggr(dst, data)
        return dst
    return _run(mask, run, data=data)


def max8(src, mask=None, dtype=None, **hints):
    """The 8 largest values per partition, into a new (P, 8) SBUF tile."""
    def run(src):
        dst = _out((src.shape[0], 8), dtype or src.dtype)
        isa.max8(dst, src)
        return dst
    return _run(mask, run, src=src)


def nc_find_index8(data, vals, mask=None, dtype=None, **hints):
    """Where the 8 values of vals first occur in data, per partition, into a new (P, 8) uint32 tile."""
    def run(data, vals):
        dst = _out((data.shape[0], 8), dtype or nl.uint32)
        isa.nc_find_index8(dst, data, vals)
        return dst
    return _run(mask, run, data=data, vals=vals)


def nc_match_replace8(data, vals, imm, dst_idx=None, mask=None, dtype=None, **hints):
    """data with the 8 values of vals replaced by imm, into a new SBUF tile."""
    def run(data, vals, dst_idx):
        dst = _out(data.shape, dtype or data.dtype)
        isa.nc_match_replace8(dst, data, vals, imm, dst_idx=dst_idx)
        return dst
    return _run(mask, run, data=data, vals=vals, dst_idx=dst_idx)


# --- matmul and transposes --------------------------------------------------------------------

def nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, **hints):
    """stationary.T @ moving on the Tensor Engine: an fp32 PSUM result, written or accumulated
    by the statement that takes it."""
    options = dict(is_stationary_onezero=is_stationary_onezero, is_moving_onezero=is_moving_onezero,
                   is_transpose=is_transpose, tile_position=tile_position, tile_size=tile_size, **hints)
    return _run(mask, lambda stationary, moving: PendingMatmul(stationary, moving, options),
                stationary=stationary, moving=moving)


def nc_transpose(data, mask=None, dtype=None, engine=engine.unknown, **hints):
    """data transposed (partition and free dimension swapped): in PSUM from the Tensor
    Engine, in SBUF from the Vector Engine (engine=nisa.vector_engine)."""
    def run(data):
        on_vector = engine == isa.engine.vector
        dst = _out((data.shape[1], data.shape[0]), dtype or data.dtype, "sbuf" if on_vector else "psum")
        isa.nc_transpose(dst, data, engine=engine, **hints)
        return dst
    return _run(mask, run, data=data)


def dma_transpose(src, axes=None, mask=None, dtype=None, **hints):
    """src with its dimensions permuted by a DMA, into a new SBUF tile."""
    def run(src):
        order = tuple(axes) if axes is not None else tuple(reversed(range(src.ndim)))
        dst = _out(tuple(src.shape[a] for a in order), dtype or src.dtype)
        isa.dma_transpose(dst, src, axes=axes, **hints)
        return dst
    return _run(mask, run, src=src)


# --- values from index grids ------------------------------------------------------------------

def _affine(expr: GridIndex, ndim: int, what: str):
    """An index grid as the (pattern, offset, channel_multiplier) of iota / affine_select."""
    if not isinstance(expr, GridIndex):
        raise NkiccError("E103", f"{what} takes an index grid expression (nl.arange / nl.mgrid), "
                                 f"got {type(expr).__name__}", user_loc(3))
    e = expr._aligned(max(ndim, expr.ndim))
    coefs, ext = dict(e.coefs), dict(e.extents)
    pattern = [[coefs.get(a, 0), ext.get(a, 1)] for a in range(1, e.ndim)]
    return pattern, e.const, coefs.get(0, 0), e.shape


def iota(expr, dtype, mask=None, **hints):
    """The values of an index grid expression, into a new SBUF tile of its shape."""
    pattern, offset, cm, shape = _affine(expr, 2, "nisa.iota")
    dst = _out(shape, dtype)
    isa.iota(dst, pattern, offset=offset, channel_multiplier=cm)
    return dst


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **hints):
    """on_true_tile where the affine predicate holds, on_false_value elsewhere (a causal mask)."""
    if not isinstance(pred, GridMask) or len(pred.terms) != 1:
        raise unsupported("nisa.affine_select with a predicate other than one comparison", "affine-select")
    expr, rel = pred.terms[0]

    def run(on_true_tile):
        pattern, offset, cm, _ = _affine(expr, on_true_tile.ndim, "nisa.affine_select")
        dst = _out(on_true_tile.shape, dtype or on_true_tile.dtype)
        isa.affine_select(dst, pattern, cm, on_true_tile, on_false_value, cmp_op=getattr(nl, _CMP[rel]),
                          offset=offset)
        return dst
    return _run(mask, run, on_true_tile=on_true_tile)


def memset(shape, value, dtype, mask=None, engine=engine.unknown, **hints):
    """A new SBUF tile of `shape` filled with value."""
    dst = _out(shape, dtype)
    isa.memset(dst, value, engine=engine)
    return dst


def range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=nl.maximum, range_start=0, on_false_value=-3.4028234663852886e38, mask=None,
                 dtype=None, **hints):
    """on_true_tile where the free index lies between the bounds, on_false_value elsewhere."""
    def run(on_true_tile, bound0, bound1, reduce_res):
        dst = _out(on_true_tile.shape, dtype or on_true_tile.dtype)
        isa.range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd,
                         reduce_res=reduce_res, reduce_op=reduce_op, range_start=range_start,
                         on_false_value=on_false_value, **hints)
        return dst
    return _run(mask, run, on_true_tile=on_true_tile, bound0=bound0, bound1=bound1, reduce_res=reduce_res)


# --- instructions that took dst in 0.1 too --------------------------------------------------------

def dma_copy(dst, src, mask=None, dst_rmw_op=None, oob_mode=isa.oob_mode.error, dge_mode=isa.dge_mode.unknown):
    """A DMA from src to dst (keywords, as 0.1 wrote them); with dst_rmw_op it updates dst
    with src, as 0.3's `dma_compute(dst, [src, dst], op)` does (the guide's rewrite)."""
    if dst_rmw_op is not None:
        return _run(mask, lambda dst, src: isa.dma_compute(dst, [src, dst], dst_rmw_op, oob_mode=oob_mode), dst=dst,
                    src=src)
    return _run(mask, lambda dst, src: isa.dma_copy(dst, src, oob_mode=oob_mode, dge_mode=dge_mode), dst=dst,
                src=src)


def tensor_copy_predicated(src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **hints):
    """dst = src where predicate holds."""
    return _run(mask, lambda src, dst, predicate: isa.tensor_copy_predicated(dst, src, predicate,
                                                                             reverse_pred=reverse_pred),
                src=src, dst=dst, predicate=predicate)


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=nl.maximum, reverse_pred=False, mask=None, dtype=None, **hints):
    """dst = on_true where predicate holds, else on_false; optionally reduced into reduce_res."""
    return _run(mask, lambda dst, predicate, on_true, on_false, reduce_res: isa.select_reduce(
        dst, predicate, on_true, on_false, reduce_res=reduce_res, reduce_cmd=reduce_cmd, reduce_op=reduce_op,
        reverse_pred=reverse_pred), dst=dst, predicate=predicate, on_true=on_true, on_false=on_false,
        reduce_res=reduce_res)


# the rest of nisa (enums, get_nc_version, ...) is 0.6's
def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(isa, name)


tensor_engine, vector_engine, scalar_engine, gpsimd_engine = isa.tensor_engine, isa.vector_engine, \
    isa.scalar_engine, isa.gpsimd_engine
