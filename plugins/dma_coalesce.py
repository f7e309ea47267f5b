"""dma-coalesce: fewer, larger DMA transfers.

A static loop whose body is a single dma_copy becomes one dma_copy with the
loop as an extra [step, count] pair, and a run of adjacent dma_copy ops that
differ only by constant offsets becomes one. A DMA copies in flattened order,
so the new pair goes at the same position on both sides: first, or right
after the partition pair when one side is on chip (and both sides share that
first count). Only transfers whose merged destination addresses every element
once are merged, so no write order is lost.

Merging pays for the fixed latency of a transfer (about 1.3 us), not for
bandwidth: separate transfers run on separate DMA queues at once, a merged one
on one queue. So a merge that would move more than MAX_MERGED_BYTES is left
as it is.
"""
import dataclasses

from nkicc.ir import Access, Affine, Block, Loop, Op
from nkicc.ir.analysis import injective
from nkicc.ir.dtypes import itemsize
from nkicc.pass_api import Pass, hookimpl

MAX_PAIRS = 5
MAX_MERGED_BYTES = 64 * 1024


def _small(a: Access, decls) -> bool:
    return a.count * itemsize(a.dtype or decls[a.tensor].dtype) <= MAX_MERGED_BYTES


def _insert_at(src: Access, dst: Access, decls) -> int | None:
    if decls[src.tensor].on_chip or decls[dst.tensor].on_chip:
        return 1 if src.pattern[0][1] == dst.pattern[0][1] else None
    return 0


def _with_pair(a: Access, at: int, step: int, count: int, offset: Affine) -> Access:
    pattern = a.pattern[:at] + ((step, count),) + a.pattern[at:]
    return dataclasses.replace(a, offset=offset, pattern=pattern)


def _mergeable(op: Op) -> bool:
    return (op.opcode == "dma_copy" and len(op.outs) == 1 and op.outs[0].scalar is None
            and op.ins[0].scalar is None and op.outs[0].vector is None and op.ins[0].vector is None
            and op.outs[0].tensor != op.ins[0].tensor
            and len(op.outs[0].pattern) < MAX_PAIRS and len(op.ins[0].pattern) < MAX_PAIRS)


def _coalesce_loop(loop: Loop, decls):
    if loop.kind != "static" or len(loop.body.stmts) != 1:
        return None
    op = loop.body.stmts[0]
    if not isinstance(op, Op) or not _mergeable(op):
        return None
    dst, src = op.outs[0], op.ins[0]
    at = _insert_at(src, dst, decls)
    cd, cs = dst.offset.coeff(loop.var), src.offset.coeff(loop.var)
    if at is None:
        return None
    new_dst = _with_pair(dst, at, cd, loop.trip, dst.offset.substitute(loop.var, Affine.of(0)))
    if not injective(new_dst.pattern) or not _small(new_dst, decls):
        return None
    new_src = _with_pair(src, at, cs, loop.trip, src.offset.substitute(loop.var, Affine.of(0)))
    return Op("dma_copy", (new_dst,), (new_src,), op.attrs, op.loc)


def _run_delta(a: Op, b: Op):
    """Constant (dst, src) offset deltas from a to b, if b is a shifted copy of a."""
    da, sa, db, sb = a.outs[0], a.ins[0], b.outs[0], b.ins[0]
    if (da.tensor, sa.tensor, da.pattern, sa.pattern) != (db.tensor, sb.tensor, db.pattern, sb.pattern):
        return None
    dd, ds = db.offset - da.offset, sb.offset - sa.offset
    if not (dd.is_const and ds.is_const):
        return None
    return dd.const, ds.const


def _coalesce_runs(stmts, decls):
    out = []
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if not (isinstance(s, Op) and _mergeable(s)):
            out.append(s)
            i += 1
            continue
        j = i + 1
        delta = None
        while j < len(stmts) and isinstance(stmts[j], Op) and _mergeable(stmts[j]):
            d = _run_delta(stmts[j - 1], stmts[j])
            if d is None or (delta is not None and d != delta) or d[0] == 0:
                break
            delta = d
            j += 1
        count = j - i
        at = _insert_at(s.ins[0], s.outs[0], decls) if count > 1 else None
        dst = _with_pair(s.outs[0], at, delta[0], count, s.outs[0].offset) if at is not None else None
        if dst is None or not injective(dst.pattern) or not _small(dst, decls):
            out.append(s)
            i += 1
            continue
        src = _with_pair(s.ins[0], at, delta[1], count, s.ins[0].offset)
        out.append(Op("dma_copy", (dst,), (src,), s.attrs, s.loc))
        i = j
    return out


def dma_coalesce(block: Block, region, ctx) -> Block:
    stmts = []
    for s in block.stmts:
        if isinstance(s, Loop):
            merged = _coalesce_loop(s, region.decls)
            stmts.append(merged if merged is not None else s)
        else:
            stmts.append(s)
    return Block(tuple(_coalesce_runs(stmts, region.decls)))


@hookimpl
def nkicc_passes():
    return [Pass("dma-coalesce", dma_coalesce, "merge a loop of one DMA, or a run of shifted DMAs, into one transfer",
                 scope="region", version="2", after=("licm",))]
