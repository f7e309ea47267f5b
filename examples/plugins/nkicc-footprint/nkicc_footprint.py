"""footprint-report: how much SBUF and PSUM a kernel needs per partition, and
how its loops nest, read off the rolled IR (so it costs the same for a
25 x 8 x 32 x 16 loop nest as for a single loop).

A tensor allocated in a loop body is live for one iteration of that body, so
the footprint of a block is what it allocates itself plus the largest
footprint of the loops inside it.
"""
from nkicc.ir import Alloc, Block, Loop
from nkicc.ir.dtypes import itemsize
from nkicc.pass_api import Pass, hookimpl


def _per_partition_bytes(decl) -> int:
    free = 1
    for d in decl.shape[1:]:
        free *= d
    return free * itemsize(decl.dtype)


def _footprint(block: Block, decls) -> dict[str, int]:
    own = {"sbuf": 0, "psum": 0}
    inner = {"sbuf": 0, "psum": 0}
    for s in block.stmts:
        if isinstance(s, Alloc) and decls[s.tensor].on_chip:
            own[decls[s.tensor].buffer] += _per_partition_bytes(decls[s.tensor])
        elif isinstance(s, Loop):
            child = _footprint(s.body, decls)
            for k in inner:
                inner[k] = max(inner[k], child[k])
    return {k: own[k] + inner[k] for k in own}


def _loops(block: Block, depth: int = 0) -> list[str]:
    out = []
    for s in block.stmts:
        if isinstance(s, Loop):
            out.append(f"{'  ' * depth}{s.var}: {s.kind} x{s.trip}")
            out.extend(_loops(s.body, depth + 1))
    return out


def footprint_report(kernel, ctx):
    peak = _footprint(kernel.body, kernel.tensor_map())
    ctx.note("sbuf_kib_per_partition", round(peak["sbuf"] / 1024, 1), show=True)
    ctx.note("sbuf_capacity_kib", ctx.target.sbuf_partition_bytes // 1024, show=True)
    ctx.note("psum_kib_per_partition", round(peak["psum"] / 1024, 1), show=True)
    ctx.note("loops", _loops(kernel.body), show=True)
    return kernel


@hookimpl
def nkicc_passes():
    return [Pass("footprint-report", footprint_report,
                 "report loop nesting and peak SBUF/PSUM bytes per partition (no change to the IR)",
                 default=False, scope="kernel", after=("dce",))]
