"""DMA: copies between HBM and SBUF (or HBM to HBM) on the DMA queues."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import NkiccError
from ..nodes import Access, Op
from .checks import tensor
from . import alu, enums
from .core import Batched, CostContext, Emit, any_shape, instruction, partitions, require_generation
from .values import f32


def _copy(op: Op, read):
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
    return max(dst.count * dtypes.itemsize(dst.dtype or decls[dst.tensor].dtype),
               src.count * dtypes.itemsize(src.dtype or decls[src.tensor].dtype))


def _buffers(a: Access, decl, item: int) -> tuple[int, int]:
    """(DMA buffers, bytes of the shortest) one side of a transfer is cut into:
    an on-chip side is one buffer per partition row at least (rows of
    different partitions are not contiguous), an HBM side one per contiguous run."""
    run = _run_bytes(a, item)
    if decl.on_chip:
        parts = max(1, partitions(a))
        row = a.count // parts * item
        run = row if run >= row else run
        return max(parts, a.count * item // max(1, run)), run
    return max(1, a.count * item // max(1, run)), run


def _transfer_ns(op: Op, ctx: CostContext) -> float:
    """Fixed latency, then the bytes at the bandwidth of the DMA engines the
    transfer spreads over (one buffer per engine at a time, at most all of
    them, capped by the core's HBM share), scaled by the per-buffer
    efficiency (short rows amortize a buffer's overhead badly) and halved for
    a strided minor dimension. Overlapping transfers also share the HBM
    bandwidth (the machine simulator's DMA fabric)."""
    t, decls = ctx.table, ctx.decls
    dst, src = op.outs[0], op.ins[0]
    ddecl, sdecl = decls[dst.tensor], decls[src.tensor]
    ditem, sitem = dtypes.itemsize(dst.dtype or ddecl.dtype), dtypes.itemsize(src.dtype or sdecl.dtype)
    (nd, rd), (ns_, rs) = _buffers(dst, ddecl, ditem), _buffers(src, sdecl, sitem)
    chunk = min(rd, rs)
    bw = t.dma_peak_bytes_per_ns(max(nd, ns_)) * chunk / (chunk + t.dma_buffer_overhead_bytes)
    if max(_minor_stride_bytes(dst, ditem), _minor_stride_bytes(src, sitem)) > t.dma_strided_bytes:
        bw *= t.dma_strided_factor
    return t.dma_fixed_ns + _bytes(op, decls) / bw


def engine_share(op: Op, decls, table) -> float:
    """The share of the core's DMA engines a transfer keeps busy while it
    moves its bytes: a copy spreads over one engine per DMA buffer (at most
    all of them); a transpose or a DMA computation uses all of them. The
    machine simulator's DMA fabric (simulator/fabric.py) charges overlapping
    transfers for these engines, so a transfer of short rows, slow on its own
    queue because of the per-buffer overhead, is as slow for the others."""
    if op.opcode != "dma_copy":
        return 1.0
    dst, src = op.outs[0], op.ins[0]
    ddecl, sdecl = decls[dst.tensor], decls[src.tensor]
    nd, _ = _buffers(dst, ddecl, dtypes.itemsize(dst.dtype or ddecl.dtype))
    ns_, _ = _buffers(src, sdecl, dtypes.itemsize(src.dtype or sdecl.dtype))
    return table.dma_peak_bytes_per_ns(max(nd, ns_)) / table.dma_peak_bytes_per_ns()


def _no_psum(op: Op, decls) -> None:
    for a in op.outs + op.ins:
        if isinstance(a, Access) and decls[a.tensor].buffer == "psum":
            raise NkiccError("E120", f"DMA cannot access PSUM, where {decls[a.tensor].described()} is", op.loc,
                             "copy through SBUF with tensor_copy")


def _not_in_psum(*tensors) -> None:
    """DMA queues reach HBM and SBUF only; the message names the tensor as the kernel wrote it."""
    for t in tensors:
        if t.buffer == "psum":
            raise NkiccError("E120", f"DMA cannot access PSUM, where {t.shown} is", None,
                             "copy PSUM to SBUF with nisa.tensor_copy first")


def _unsupported_hints(opcode: str, hints: dict) -> None:
    if hints.get("dst_rmw_op") is not None:
        raise NkiccError("E160", f"{opcode}(dst_rmw_op=) is the pre-0.5 form; nkicc does not support it", None,
                         "use nisa.dma_compute(dst, [dst, src], nl.add) for a read-modify-write")


def _check_copy(opcode: str, dst, src) -> None:
    _not_in_psum(dst, src)
    if dst.access.count != src.access.count:
        raise NkiccError("E140", f"{opcode} moves {src.access.count} elements into {dst.access.count}", None,
                         f"make the shapes match: dst {list(dst.shape)}, src {list(src.shape)}")


def queue_options(generation: int, priority, dge_mode, what: str) -> str:
    """Check a DMA's quality-of-service priority (0-3, NeuronCore-v4 and newer)
    and descriptor mode (hardware DGE: v3 and newer); the mode's name."""
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 3:
            raise NkiccError("E103", f"{what} priority must be an int 0-3 (lower is served first), got {priority!r}")
        require_generation(generation, 4, f"{what} priority")
    mode = enums.member_name(dge_mode, enums.dge_mode, "dge_mode")
    if mode == "hwdge":
        require_generation(generation, 3, f"{what} with dge_mode=hwdge (hardware descriptor generation)")
    return mode


@instruction(family="dma", compute=_copy, engine="dma", cost=_transfer_ns, traffic=_bytes, verify=_no_psum,
             free_limited=False, batched=any_shape(_copy))
def dma_copy(dst, src, priority=None, oob_mode=enums.oob_mode.error, dge_mode=enums.dge_mode.unknown,
             engine=enums.engine.unknown, name=None, **_hw_hints):
    """dst = src through the DMA queues, between HBM and SBUF (or HBM to HBM);
    a DMA between dtypes converts through fp32. Element counts must match."""
    dst, src = tensor(dst, "dma_copy dst"), tensor(src, "dma_copy src")
    _unsupported_hints("dma_copy", _hw_hints)
    _check_copy("dma_copy", dst, src)
    oob = enums.member_name(oob_mode, enums.oob_mode, "oob_mode")
    queue_options(dst.generation, priority, dge_mode, "nisa.dma_copy")
    # a DMA between different dtypes converts through fp32
    attrs = {"cast": "float32"} if dst.decl.dtype != src.decl.dtype else {}
    if oob == "skip" and any(a.access.vector is not None or a.access.scalar is not None for a in (dst, src)):
        # gathered / scattered rows whose index is out of range are not moved; with a runtime scalar
        # offset (scalar indirection), the elements whose index is out of range
        attrs["oob"] = "skip"
    return Emit([dst], [src], attrs)


_TRANSPOSE_PERM = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _transpose(op: Op, read):
    x = read(op.ins[0])
    return [(0, np.transpose(np.asarray(x), op.attr("perm")))]


def _transpose_batched(op: Op, read, nlead: int, reduce: tuple) -> list:
    """Every iteration's transpose at once: the loop axes lead and stay where they are."""
    x = np.asarray(read(op.ins[0]))
    return [(0, np.transpose(x, tuple(range(nlead)) + tuple(nlead + p for p in op.attr("perm"))))]


def _transpose_ns(op: Op, ctx: CostContext) -> float:
    """A DMA at a fraction of a copy's peak: all engines cooperate on one
    transpose, at up to 90% of a copy from HBM and 50% from SBUF (ARCH2)."""
    t = ctx.table
    factor = t.dma_transpose_sbuf_factor if ctx.decls[op.ins[0].tensor].on_chip else t.dma_transpose_factor
    return t.dma_fixed_ns + _bytes(op, ctx.decls) / (t.dma_peak_bytes_per_ns() * factor)


@instruction(family="dma", compute=_transpose, engine="dma", cost=_transpose_ns, traffic=_bytes, verify=_no_psum,
             free_limited=False, since=3, batched=Batched(_transpose_batched))
def dma_transpose(dst, src, axes=None, priority=None, dge_mode=enums.dge_mode.unknown,
                  oob_mode=enums.oob_mode.error, name=None, **_hw_hints):
    """dst = src transposed by the DMA engine: 2-d [1, 0], 3-d [2, 1, 0], 4-d
    [3, 1, 2, 0] (or the permutation `axes`). 2-byte dtypes; src.shape[-1]
    <= 128; with dge_mode=hwdge, src.shape[0] is 16 (2-d) or in {1, 2, 4, 8,
    16} with src.shape[0] * src.shape[-2] a multiple of 16."""
    dst, src = tensor(dst, "dma_transpose dst"), tensor(src, "dma_transpose src")
    nd = len(src.shape)
    if axes is None:
        if nd not in _TRANSPOSE_PERM:
            raise NkiccError("E140", f"dma_transpose takes a 2-d to 4-d source, got {list(src.shape)}")
        perm = _TRANSPOSE_PERM[nd]
    else:
        perm = tuple(int(a) for a in axes)
        if sorted(perm) != list(range(nd)):
            raise NkiccError("E103", f"dma_transpose axes {list(perm)} is not a permutation of {nd} axes")
    _not_in_psum(dst, src)
    want = tuple(src.shape[a] for a in perm)
    if dst.access.count != src.access.count:
        raise NkiccError("E140", f"dma_transpose of {list(src.shape)} gives {list(want)}, dst is {list(dst.shape)}")
    if dtypes.itemsize(src.decl.dtype) != 2 and src.decl.dtype not in ("int32", "uint32", "float32"):
        raise NkiccError("E132", f"dma_transpose moves 2-byte elements, src is {src.decl.dtype}", None,
                         "transpose bfloat16/float16 data (or view 4-byte data as pairs)")
    if src.shape[-1] > 128:
        raise NkiccError("E130", f"dma_transpose src.shape[-1] is {src.shape[-1]}; at most 128")
    if queue_options(dst.generation, priority, dge_mode, "nisa.dma_transpose") == "hwdge":
        ok = src.shape[0] == 16 if nd == 2 else (src.shape[0] in (1, 2, 4, 8, 16)
                                                  and src.shape[0] * src.shape[-2] % 16 == 0)
        if not ok:
            raise NkiccError("E130", f"a hardware-DGE dma_transpose needs src.shape[0] 16 (2-d) or in {{1, 2, 4, 8, "
                                     f"16}} with src.shape[0] * src.shape[-2] a multiple of 16; got {list(src.shape)}",
                             None, "use dge_mode=nisa.dge_mode.unknown")
    return Emit([dst], [src], {"perm": perm})


def _dma_compute(op: Op, read):
    total = None
    for x in op.ins:
        v = f32(read(x)).reshape(op.outs[0].shape)
        total = v if total is None else total + v
    return [(0, total)]


def _compute_bytes(op: Op, decls) -> int:
    return sum(a.count * dtypes.itemsize(a.dtype or decls[a.tensor].dtype) for a in op.outs + op.ins if isinstance(a, Access))


def _compute_ns(op: Op, ctx: CostContext) -> float:
    t = ctx.table
    return t.dma_fixed_ns + _compute_bytes(op, ctx.decls) / t.dma_peak_bytes_per_ns()


@instruction(family="dma", compute=_dma_compute, engine="dma", cost=_compute_ns, traffic=_compute_bytes,
             verify=_no_psum, free_limited=False)
def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=enums.oob_mode.error, name=None,
                **_hw_hints):
    """dst = srcs[0] + srcs[1] + ... computed in fp32 inside the DMA engines
    (reduce_op nl.add; scales, if given, all 1.0); up to 16 sources, each with
    dst's element count."""
    dst = tensor(dst, "dma_compute dst")
    try:
        srcs = [tensor(s, "dma_compute srcs[i]") for s in srcs]
    except TypeError:
        raise NkiccError("E103", "dma_compute srcs must be a list of tensors") from None
    if not 1 <= len(srcs) <= 16:
        raise NkiccError("E103", f"dma_compute takes 1 to 16 sources, got {len(srcs)}")
    if alu.op_name(reduce_op, ("add",), "dma_compute reduce_op") != "add":
        raise NkiccError("E160", "dma_compute supports only nl.add")
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise NkiccError("E160", "dma_compute scales must all be 1.0", None, "scale the inputs before the DMA")
    for s in srcs:
        _check_copy("dma_compute", dst, s)
    return Emit([dst], srcs)
