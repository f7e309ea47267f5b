"""psum-legalize: make PSUM accumulation legal on NeuronCore-v2/v3.

The seed kernels accumulate through PSUM by copying an SBUF partial sum in,
running nc_matmul onto it, and copying it back out:

    tensor_copy P <- X ; nc_matmul P <- st, mv (accumulate) ; tensor_copy X <- P

Accumulating onto PSUM that a copy initialised is undefined on v2/v3
hardware. The same sum, legally: the matmul overwrites P and the Vector
Engine adds it into X:

    nc_matmul P <- st, mv (accumulate=False) ; tensor_tensor X <- X + P
"""
from nkicc.ir import Alloc, Block, Op
from nkicc.ir.analysis import reads
from nkicc.pass_api import Pass, hookimpl


def _last_touch(stmts) -> tuple[dict[str, int], dict[str, int]]:
    """Index of the last statement of the block that touches each tensor, and
    of the first that allocates it."""
    last: dict[str, int] = {}
    allocated: dict[str, int] = {}
    for i, s in enumerate(stmts):
        if isinstance(s, Alloc):
            last[s.tensor] = i
            allocated.setdefault(s.tensor, i)
            continue
        ops = [s] if isinstance(s, Op) else [o for o in s.body.walk() if isinstance(o, Op)]
        for op in ops:
            for a in reads(op) + op.outs:
                last[a.tensor] = i
    return last, allocated


def _match(stmts, i, decls, last, allocated):
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
    if p.scalar is not None or x.scalar is not None or p.vector is not None or x.vector is not None:
        return None
    # P must be private to this pattern: allocated in this block, touched nowhere after it
    if last.get(p.tensor, -1) > i + 2 or allocated.get(p.tensor, i) >= i:
        return None
    return cin, mm, cout, p, x


def psum_legalize(block: Block, region, ctx) -> Block:
    stmts = list(block.stmts)
    last, allocated = _last_touch(stmts)
    out = []
    i = 0
    while i < len(stmts):
        m = _match(stmts, i, region.decls, last, allocated)
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
