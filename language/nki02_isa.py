"""`nisa` of NKI 0.2 (SDK 2.27 and 2.28, `import nki.isa as nisa`): nkicc's own
instructions, with the four signatures 0.3 changed as 0.2 wrote them (the
migration guide's 0.2 -> 0.3 section): `affine_select` and `dma_compute` took
their parameters in another order, `register_move` named its source `imm`.
What 0.3 removed and nkicc has no counterpart for (`dma_copy(dst_rmw_op=)`,
`tensor_copy_dynamic_src/dst`) is E161 naming that section. Traced when the
dialect is 0.2 (`nkicc run --dialect 0.2`, `dialect="0.2"`: dialect.py)."""
from __future__ import annotations

from .. import isa
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


def dma_copy(dst, src, dst_rmw_op=None, oob_mode=isa.oob_mode.error, dge_mode=isa.dge_mode.unknown, name=None,
             **hints):
    """A DMA; 0.2's read-modify-write of the destination (dst_rmw_op) is E161."""
    if dst_rmw_op is not None:
        raise unsupported("nisa.dma_copy(dst_rmw_op=...)", "dma-rmw", version="0.2")
    return isa.dma_copy(dst, src, oob_mode=oob_mode, dge_mode=dge_mode, name=name, **hints)


def tensor_copy_dynamic_src(*_args, **_kwargs):
    raise unsupported("nisa.tensor_copy_dynamic_src", "copy-dynamic", version="0.2")


def tensor_copy_dynamic_dst(*_args, **_kwargs):
    raise unsupported("nisa.tensor_copy_dynamic_dst", "copy-dynamic", version="0.2")


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(isa, name)
