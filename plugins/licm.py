"""licm: hoist loop-invariant loads, fills and element-wise compute out of static loops.

A load (dma_copy), memset or element-wise instruction (HOISTABLE) in a loop
body is hoisted, with the allocation of its destination, when nothing it
reads depends on the loop index or is written inside the loop, its
destination is allocated in the body and written by nothing else there, and
nothing reads the destination before it in the body. Then every iteration
would have computed the same tile. Repeated until nothing moves, so that an
instruction reading a hoisted load follows it out (Mamba v2's delta * u, which
reads tiles loaded once per channel tile, is computed once, not once per
state, as the vendor's compiler does: docs/fidelity.md).

A hoisted tile is live across the whole loop, so the tiles hoisted out of one
loop may take at most HOIST_SHARE of the target's bytes per partition in their
buffer; what would pass it stays in the loop. Without that bound, a kernel whose
whole body is invariant in its loop (the NKI Library's cumsum, launched on a
two-program grid that it never reads) had every tile of every iteration
hoisted at once: 1.9 MiB of SBUF per partition against 224 KiB.
"""
import dataclasses

from nkicc.ir import Access, Alloc, Block, Loop, Op
from nkicc.ir.analysis import reads
from nkicc.pass_api import Pass, hookimpl

from .alloc import partition_bytes


def _walk_ops(block: Block):
    for s in block.walk():
        if isinstance(s, Op):
            yield s


def _depends_on(a: Access, var: str) -> bool:
    if a.offset.coeff(var):
        return True
    if a.scalar is not None or a.vector is not None:
        return True  # a runtime offset (or a gather's indices) may change inside the loop
    return False


# instructions whose one output is a function of their inputs alone (no state, no accumulation
# into their destination, no engine-internal registers carried between instructions)
HOISTABLE = ("dma_copy", "memset", "tensor_tensor", "tensor_scalar", "tensor_copy", "activation")

# the share of a buffer's bytes per partition that the tiles hoisted out of one loop may take
HOIST_SHARE = 0.5


def _hoist(loop: Loop, room: dict | None = None, decls=None) -> tuple[list, Loop]:
    """What can leave `loop`, and the loop without it. `room`: bytes per partition per buffer
    that hoisted tiles may still take (spent as they are hoisted); None: no bound."""
    if loop.kind != "static":
        return [], loop
    body = list(loop.body.stmts)
    ops = list(_walk_ops(loop.body))
    written: dict[str, int] = {}
    for op in ops:
        for a in op.outs:
            written[a.tensor] = written.get(a.tensor, 0) + 1
    allocated = {s.tensor for s in body if isinstance(s, Alloc)}
    read_so_far: set[str] = set()
    hoisted: list = []
    for idx, s in enumerate(body):
        if isinstance(s, Op) and s.opcode in HOISTABLE and len(s.outs) == 1 \
                and not s.attr("dep_reads") and not s.attr("dep_writes"):  # depends_on edges stay where they are
            dst = s.outs[0]
            srcs = [a for a in s.ins if isinstance(a, Access)]
            if (dst.tensor in allocated and written.get(dst.tensor) == 1 and dst.tensor not in read_so_far
                    and not _depends_on(dst, loop.var)
                    and all(not _depends_on(a, loop.var) and a.tensor not in written for a in srcs)
                    and _fits(dst.tensor, room, decls)):
                hoisted.append(s)
                continue
        if isinstance(s, Op):
            read_so_far |= {a.tensor for a in reads(s)}
        elif isinstance(s, Loop):
            read_so_far |= {a.tensor for op in _walk_ops(s.body) for a in reads(op)}
    if not hoisted:
        return [], loop
    moved = {h.outs[0].tensor for h in hoisted}
    allocs = [s for s in body if isinstance(s, Alloc) and s.tensor in moved]
    rest = [s for s in body if s not in allocs and not any(s is h for h in hoisted)]
    return allocs + hoisted, dataclasses.replace(loop, body=Block(tuple(rest)))


def _fits(tensor: str, room: dict | None, decls) -> bool:
    """Whether the tile may be hoisted within `room` (which it then takes)."""
    if room is None:
        return True
    decl = decls[tensor]
    if decl.buffer not in room:
        return True
    need = partition_bytes(decl)
    if need > room[decl.buffer]:
        return False
    room[decl.buffer] -= need
    return True


def licm(block: Block, region, ctx) -> Block:
    target = ctx.target
    out = []
    for s in block.stmts:
        room = {"sbuf": int(HOIST_SHARE * target.sbuf_partition_bytes),
                "psum": int(HOIST_SHARE * target.psum_partition_bytes)}
        while isinstance(s, Loop):
            pre, s = _hoist(s, room, region.decls)
            if not pre:
                break
            out.extend(pre)
        out.append(s)
    return Block(tuple(out))


@hookimpl
def nkicc_passes():
    return [Pass("licm", licm, "hoist loop-invariant loads, fills and element-wise instructions (with their allocations) out of loops",
                 scope="region", after=("verify",), version="2")]
