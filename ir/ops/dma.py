"""DMA: copies between HBM and SBUF (or HBM to HBM) on the DMA queues."""
from __future__ import annotations

from .. import dtypes
from ..errors import NkiccError
from ..nodes import Access, Op
from .checks import tensor
from .core import CostContext, Emit, instruction, partitions


def _copy(op: Op, read):
    from .values import f32
    src = read(op.ins[0])
    if op.attr("cast") == "float32":  # a DMA between dtypes converts through fp32
        src = f32(src)
    return [(0, src)]


def _run_bytes(a: Access, item: int) -> int:
    """Bytes of the innermost contiguous run of an access."""
    run = 1
    for step, num in reversed(a.pattern):
        if num == 1:
            continue
        if step == run:
            run *= num
        else:
            break
    return run * item


def _minor_stride_bytes(a: Access, item: int) -> int:
    for step, num in reversed(a.pattern):
        if num > 1:
            return abs(step) * item
    return item


def _bytes(op: Op, decls) -> int:
    dst, src = op.outs[0], op.ins[0]
    return max(dst.count * dtypes.itemsize(decls[dst.tensor].dtype), src.count * dtypes.itemsize(decls[src.tensor].dtype))


def _transfer_ns(op: Op, ctx: CostContext) -> float:
    """Fixed latency, then bytes over one queue's bandwidth, which strided or
    short rows reduce (descriptor efficiency)."""
    t, decls = ctx.table, ctx.decls
    dst, src = op.outs[0], op.ins[0]
    ddecl, sdecl = decls[dst.tensor], decls[src.tensor]
    ditem, sitem = dtypes.itemsize(ddecl.dtype), dtypes.itemsize(sdecl.dtype)
    bw = t.dma_bytes_per_ns or ctx.target.dma_bytes_per_ns
    if max(_minor_stride_bytes(dst, ditem), _minor_stride_bytes(src, sitem)) > t.dma_strided_bytes:
        bw *= t.dma_strided_factor
    rows = []
    for a, decl, item in ((dst, ddecl, ditem), (src, sdecl, sitem)):
        if decl.on_chip:  # bytes per partition row
            rows.append(a.count // max(1, partitions(a)) * item)
        else:
            rows.append(_run_bytes(a, item))
    if min(rows) < t.dma_efficient_row_bytes:
        bw *= t.dma_small_row_factor
    return t.dma_fixed_ns + _bytes(op, decls) / bw


def _no_psum(op: Op, decls) -> None:
    if any(decls[a.tensor].buffer == "psum" for a in op.outs + op.ins if isinstance(a, Access)):
        raise NkiccError("E120", "DMA cannot access PSUM", op.loc, "copy through SBUF with tensor_copy")


@instruction(family="dma", compute=_copy, engine="dma", cost=_transfer_ns, traffic=_bytes, verify=_no_psum,
             free_limited=False)
def dma_copy(dst, src, dst_rmw_op=None, oob_mode=None, dge_mode=None, name=None, **_hw_hints):
    """Copy between HBM and SBUF (or HBM to HBM); casts when dtypes differ."""
    dst, src = tensor(dst, "dma_copy dst"), tensor(src, "dma_copy src")
    if "psum" in (dst.buffer, src.buffer):
        raise NkiccError("E120", "DMA cannot access PSUM", None, "copy PSUM to SBUF with nisa.tensor_copy first")
    if dst.access.count != src.access.count:
        raise NkiccError("E140", f"dma_copy moves {src.access.count} elements into {dst.access.count}", None,
                         f"make the shapes match: dst {list(dst.shape)}, src {list(src.shape)}")
    if dst_rmw_op is not None:
        raise NkiccError("E160", "dma_copy(dst_rmw_op=) is not supported yet")
    # a DMA between different dtypes converts through fp32 (NKI_SPEC 4)
    return Emit([dst], [src], {"cast": "float32"} if dst.decl.dtype != src.decl.dtype else {})
