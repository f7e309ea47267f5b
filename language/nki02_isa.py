"""`nisa` of NKI 0.2 (SDK 2.27 and 2.28, `import nki.isa as nisa`): nkicc's own
instructions, with what the migration guide's 0.2 -> 0.3 section says 0.3 changed,
as 0.2 had it:
- signatures: `affine_select` and `dma_compute` took their parameters in another
  order, `register_move` named its source `imm`;
- `dma_copy` read PSUM directly (here through an SBUF tile: the same values), and
  its `dst_rmw_op` updated the destination (0.3's `dma_compute(dst, [src, dst], op)`);
- `tensor_reduce(axis=1)` of a 3-D or 4-D tile reduced its last free axis;
- `range_select` ignored `on_false_value` (FP32_MIN) and `reduce_cmd` (reset_reduce).
What 0.3 removed and nkicc has no counterpart for (`tensor_copy_dynamic_src/dst`)
is E161 naming that section. Traced when the dialect is 0.2 (`nkicc run --dialect
0.2`, `dialect="0.2"`: dialect.py)."""
from __future__ import annotations

from .. import isa
from .. import language as nl
from .grid import unsupported

__nki_dialect__ = "0.2"


def affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, name=None,
                  **hints):
    """0.2's order: the offset after the pattern (0.3 moved it last)."""
    extra = {} if cmp_op is None else {"cmp_op": cmp_op}
    return isa.affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, offset=offset,
                             name=name, **extra, **hints)


def dma_compute(dst, srcs, scales, reduce_op, name=None, **hints):
    """0.2's order: scales before reduce_op."""
    return isa.dma_compute(dst, srcs, reduce_op, scales=scales, name=name, **hints)


def register_move(dst, imm):
    """0.2's name for the source: imm."""
    return isa.register_move(dst, imm)


def dma_copy(dst, src, dst_rmw_op=None, oob_mode=isa.oob_mode.error, dge_mode=isa.dge_mode.unknown,
             unique_indices=True, name=None, **hints):
    """A DMA. From PSUM, which 0.2's DMA read, through an SBUF tile; with dst_rmw_op, an
    update of dst with src (0.3's `dma_compute(dst, [src, dst], op)`, the guide's rewrite)."""
    if getattr(src, "buffer", None) == "psum":
        staged = nl.ndarray(tuple(src.shape), dtype=src.dtype, buffer=nl.sbuf)
        isa.tensor_copy(staged, src)
        src = staged
    if dst_rmw_op is not None:
        return isa.dma_compute(dst, [src, dst], dst_rmw_op, unique_indices=unique_indices, oob_mode=oob_mode,
                               name=name, **hints)
    return isa.dma_copy(dst, src, oob_mode=oob_mode, dge_mode=dge_mode, name=name, **hints)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None, **hints):
    """0.2 took axis=1 of a 3-D or 4-D tile for its last free axis (0.3 fixed it)."""
    if len(data.shape) > 2 and tuple(axis if isinstance(axis, (tuple, list)) else (axis,)) == (1,):
        axis = len(data.shape) - 1
    return isa.tensor_reduce(dst, op, data, axis, negate=negate, keepdims=keepdims, name=name, **hints)


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                 reduce_op=None, range_start=0.0, on_false_value=None, name=None, **hints):
    """0.2 filled with FP32_MIN and reset the accumulator whatever on_false_value and
    reduce_cmd said (0.3 honours reduce_cmd)."""
    extra = {} if reduce_op is None else {"reduce_op": reduce_op}
    return isa.range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                            reduce_cmd=isa.reduce_cmd.reset_reduce, reduce_res=reduce_res, range_start=range_start,
                            name=name, **extra, **hints)


def tensor_copy_dynamic_src(*_args, **_kwargs):
    raise unsupported("nisa.tensor_copy_dynamic_src", "copy-dynamic", version="0.2")


def tensor_copy_dynamic_dst(*_args, **_kwargs):
    raise unsupported("nisa.tensor_copy_dynamic_dst", "copy-dynamic", version="0.2")


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(isa, name)
