"""simplify: fold what the trace leaves behind.

Loops of one iteration are inlined and empty loops dropped; DMA access
patterns lose pairs of count 1 and merge contiguous pairs (a DMA copies in
flattened order, so this never changes which element goes where); a
tensor_scalar that adds 0 or multiplies by 1 becomes a copy, or vanishes when
it copies a tile onto itself.
"""
from nkicc.ir import Access, Block, Const, Loop, Op
from nkicc.ir.rewrite import bind_block
from nkicc.pass_api import Pass, hookimpl

_IDENTITY = {("add", 0.0), ("subtract", 0.0), ("multiply", 1.0), ("divide", 1.0)}


def normalize_pattern(pattern, keep_first: bool):
    """Drop count-1 pairs and merge contiguous neighbours; with keep_first
    the (partition) pair stays as it is."""
    head = [pattern[0]] if keep_first else []
    rest = [p for p in (pattern[1:] if keep_first else pattern) if p[1] != 1]
    merged: list[tuple[int, int]] = []
    for step, num in rest:
        if merged and merged[-1][0] == step * num:
            merged[-1] = (step, merged[-1][1] * num)
        else:
            merged.append((step, num))
    out = head + merged
    return tuple(out) if out else ((1, 1),)


def _normal_access(a: Access, decls) -> Access:
    if a.vector is not None:
        return a  # the first pair is the gathered one: it must stay a pair of its own
    pattern = normalize_pattern(a.pattern, keep_first=decls[a.tensor].on_chip)
    return Access(a.tensor, a.offset, pattern, a.scalar, a.scalar_scale, a.dtype)


def _simplify_op(op: Op, decls):
    if op.opcode == "dma_copy":
        return Op(op.opcode, tuple(_normal_access(a, decls) for a in op.outs),
                  tuple(_normal_access(a, decls) for a in op.ins), op.attrs, op.loc)
    if (op.opcode == "tensor_scalar" and op.attr("op1") is None and isinstance(op.ins[1], Const)
            and not op.attr("reverse0") and (op.attr("op0"), float(op.ins[1].value)) in _IDENTITY):
        if op.outs[0] == op.ins[0]:
            return None
        return Op("tensor_copy", op.outs, (op.ins[0],), (), op.loc)
    return op


def simplify(block: Block, region, ctx) -> Block:
    stmts = []
    for s in block.stmts:
        if isinstance(s, Loop):
            if s.trip == 0 or not s.body.stmts:
                continue
            if s.trip == 1 and s.kind == "static":
                stmts.extend(bind_block(s.body, {s.var: 0}).stmts)
                continue
            stmts.append(s)
        elif isinstance(s, Op):
            op = _simplify_op(s, region.decls)
            if op is not None:
                stmts.append(op)
        else:
            stmts.append(s)
    return Block(tuple(stmts))


@hookimpl
def nkicc_passes():
    return [Pass("simplify", simplify, "inline one-trip loops, drop empty ones, fold identity ops and DMA patterns",
                 scope="region")]
