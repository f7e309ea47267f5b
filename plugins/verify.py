"""verify: the IR obeys the hardware rules a kernel author is held to.

Shapes, buffers and partition rules of every instruction, static bounds of
every access over its loop ranges, and the PSUM accumulation rule: a matmul
accumulating onto PSUM that a memset or copy initialised is undefined on
NeuronCore-v2/v3 (a warning naming psum-legalize, which rewrites the
copy-in / matmul / copy-out form). Runs after psum-legalize so that it warns
only about what is left.
"""
from nkicc.ir import Access, Alloc, Block, Loop, NkiccError, Op, ops
from nkicc.ir.analysis import extent
from nkicc.pass_api import Pass, hookimpl

PMAX = 128


def _partition_start_ok(a: Access, decl, trips) -> bool:
    pstride = a.pattern[0][0] if a.pattern else 1
    rows = decl.size // decl.shape[0] if decl.shape else 1
    if pstride != rows or a.offset.floordiv_exact(rows) is None:
        return True  # not a partition-aligned view; the per-op rules do not apply
    start = a.offset.floordiv_exact(rows)
    count = a.pattern[0][1]
    allowed = 32 if count <= 32 else 64 if count <= 64 else 128
    return all(c % allowed == 0 for _, c in start.terms) and start.const % allowed == 0


def check_access(a: Access, op: Op, decls, trips, write: bool) -> None:
    decl = decls.get(a.tensor)
    if decl is None:
        raise NkiccError("E900", f"{op.opcode} uses undeclared tensor {a.tensor}", op.loc)
    lo, hi = extent(a, trips, decl)
    if lo < 0 or (hi >= decl.size and (write or not decl.on_chip)):
        raise NkiccError("E101", f"{op.opcode} {'writes' if write else 'reads'} elements [{lo}, {hi}] of "
                                 f"{decl.described()}, which has {decl.size}", op.loc,
                         "check the slice bounds and the loop trip counts")
    if decl.on_chip and a.pattern:
        if a.pattern[0][1] > PMAX:
            raise NkiccError("E110", f"{op.opcode} accesses {a.pattern[0][1]} partitions of {decl.described()}; at most {PMAX}",
                             op.loc, "tile the partition dimension by 128")
        # the start rule binds the compute engines' SBUF/PSUM ports; DMA writes and reads any partition
        d = ops.get(op.opcode)
        exempt = d.family == "dma" or (d.start_exempt is not None and d.start_exempt(op, a))
        if not exempt and not _partition_start_ok(a, decl, trips):
            raise NkiccError("E111", f"{op.opcode} accesses {decl.described()} from a partition that is not a legal start "
                                     f"for {a.pattern[0][1]} partitions", op.loc,
                             "start at partition 0 (65-128 partitions), 0/64 (33-64) or 0/32/64/96 (<=32)")


def check_op(op: Op, decls) -> None:
    """The instruction's own rules on the lowered IR (its definition's `verify`)."""
    rule = ops.of(op).verify
    if rule is not None:
        rule(op, decls)


def verify(kernel, ctx):
    decls = kernel.tensor_map()
    psum_init: dict[str, object] = {}  # PSUM tensor -> loc of a non-matmul write, while that is the latest

    def walk(block: Block, trips):
        for s in block.stmts:
            if isinstance(s, Loop):
                walk(s.body, {**trips, s.var: s.trip})
            elif isinstance(s, Alloc):
                psum_init.pop(s.tensor, None)
            else:
                check_op(s, decls)
                for a in s.outs:
                    check_access(a, s, decls, trips, write=True)
                for a in s.ins:
                    if isinstance(a, Access):
                        check_access(a, s, decls, trips, write=False)
                for a in s.outs:
                    if decls[a.tensor].buffer != "psum":
                        continue
                    if s.opcode in ("nc_matmul", "nc_matmul_mx"):
                        init = psum_init.get(a.tensor)
                        if init is not None and s.attr("accumulate") is not False:
                            ctx.warn("W201", f"nc_matmul accumulates onto PSUM {decls[a.tensor].described()} that a {init[0]} at line "
                                             f"{init[1].line if init[1] else '?'} initialised; undefined on "
                                             "NeuronCore-v2/v3 (psum-legalize rewrites the copy-in/matmul/copy-out "
                                             "form; for a zeroed accumulator drop the memset and let the first "
                                             "matmul overwrite)", s.loc)
                        psum_init.pop(a.tensor, None)
                    else:
                        psum_init[a.tensor] = (s.opcode, s.loc)

    walk(kernel.body, {})
    return kernel


@hookimpl
def nkicc_passes():
    return [Pass("verify", verify, "shapes, buffers, partition rules, static bounds; warns on undefined PSUM use",
                 required=True, scope="kernel", after=("psum-legalize", "simplify"))]
