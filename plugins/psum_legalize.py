"""psum-legalize: make PSUM accumulation legal on NeuronCore-v2/v3.

The seed kernels accumulate through PSUM by copying an SBUF partial sum in,
running nc_matmul onto it, and copying it back out:

    tensor_copy P <- X ; nc_matmul P <- st, mv (accumulate) ; tensor_copy X <- P

Accumulating onto PSUM that a copy initialised is undefined on v2/v3
hardware. The same sum, legally: the matmul overwrites P and the Vector
Engine adds it into X:

    nc_matmul P <- st, mv (accumulate=False) ; tensor_tensor X <- X + P
"""
from nkicc.ir import Access, Alloc, Block, Op
from nkicc.ir.analysis import reads
from nkicc.pass_api import Pass, hookimpl


def _match(stmts, i, decls):
    if i + 2 >= len(stmts):
        return None
    cin, mm, cout = stmts[i], stmts[i + 1], stmts[i + 2]
    if not all(isinstance(s, Op) for s in (cin, mm, cout)):
        return None
    if (cin.opcode, mm.opcode, cout.opcode) != ("tensor_copy", "nc_matmul", "tensor_copy"):
        return None
    p, x = cin.outs[0], cin.ins[0]
    if decls[p.tensor].buffer != "psum" or decls[x.tensor].buffer != "sbuf":
        return None
    if mm.outs[0] != p or cout.outs[0] != x or cout.ins[0] != p or mm.attr("accumulate") is False:
        return None
    if p.scalar is not None or x.scalar is not None:
        return None
    # P must be private to this pattern: allocated in this block, read nowhere after it
    if Alloc(p.tensor) not in stmts[:i]:
        return None
    for later in stmts[i + 3:]:
        if isinstance(later, Op) and any(a.tensor == p.tensor for a in reads(later) + later.outs):
            return None
        if not isinstance(later, Op) and _touches(later, p.tensor):
            return None
    return cin, mm, cout, p, x


def _touches(stmt, tensor: str) -> bool:
    if isinstance(stmt, Alloc):
        return stmt.tensor == tensor
    return any(isinstance(s, Op) and any(a.tensor == tensor for a in reads(s) + s.outs) for s in stmt.body.walk())


def psum_legalize(block: Block, region, ctx) -> Block:
    stmts = list(block.stmts)
    out = []
    i = 0
    while i < len(stmts):
        m = _match(stmts, i, region.decls)
        if m is None:
            out.append(stmts[i])
            i += 1
            continue
        cin, mm, cout, p, x = m
        attrs = tuple((k, v) for k, v in mm.attrs if k != "accumulate") + (("accumulate", False),)
        out.append(Op("nc_matmul", mm.outs, mm.ins, attrs, mm.loc))
        out.append(Op("tensor_tensor", (x,), (x, p), (("op", "add"),), cout.loc))
        i += 3
    return Block(tuple(out))


@hookimpl
def nkicc_passes():
    return [Pass("psum-legalize", psum_legalize,
                 "copy-in/matmul/copy-out PSUM accumulation -> overwriting matmul + add (legal on v2/v3)",
                 scope="region", after=("simplify",))]
