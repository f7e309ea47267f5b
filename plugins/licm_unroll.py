"""licm-unroll: open a short static loop whose body holds work that is invariant in the loop
around it, so that licm can hoist that work.

In `for s in affine_range(S): for t in static_range(T): x_t = f(a[t])` the instruction computing
x_t does not depend on s, but licm cannot take it out of the s loop: it depends on t, and it is
inside the t loop. The vendor's compiler unrolls static loops at trace time and then hoists each
x_t on its own (Mamba v3's delta * u per sequence tile, computed once per channel tile and not
once per state: docs/fidelity.md). This pass does the first half: a static loop of at most
MAX_TRIP iterations, directly inside another static loop, is unrolled in place when its body
holds such an instruction (licm's HOISTABLE compute, reading nothing the outer loop writes nor its
index, its destination allocated in the inner body); the tiles allocated in the inner body get
one name per iteration (`name.u<i>`), so that each copy can be hoisted and allocated on its own.
licm, which runs after it, does the hoisting.
"""
import dataclasses

from nkicc.ir import Access, Alloc, Block, Loop, Op
from nkicc.ir.rewrite import bind_op
from nkicc.pass_api import Pass, hookimpl

from .licm import HOISTABLE

MAX_TRIP = 32  # the unrolled body grows by the trip count: short loops only
# what is worth opening a loop for: compute (a load or fill licm can already hoist where it stands)
COMPUTE = tuple(op for op in HOISTABLE if op not in ("dma_copy", "memset"))


def _ops(block: Block):
    for s in block.walk():
        if isinstance(s, Op):
            yield s


def _depends_on(a: Access, var: str) -> bool:
    return bool(a.offset.coeff(var)) or a.scalar is not None or a.vector is not None


def _shared(outer: Loop, inner: Loop) -> set:
    """The tiles of the inner loop's body that it computes alike in every iteration of the outer
    loop (empty: nothing to open the inner loop for)."""
    if inner.kind != "static" or not 1 < inner.trip <= MAX_TRIP \
            or not all(isinstance(s, (Op, Alloc)) for s in inner.body.stmts):
        return set()
    # (the inner loop as rewritten already: loops inside it opened, their tiles renamed)
    written = {a.tensor for op in _ops(outer.body) for a in op.outs} | {a.tensor for op in _ops(inner.body)
                                                                        for a in op.outs}
    allocated = {s.tensor for s in inner.body.stmts if isinstance(s, Alloc)}
    found = set()
    for s in inner.body.stmts:
        if (isinstance(s, Op) and s.opcode in COMPUTE and len(s.outs) == 1 and s.outs[0].tensor in allocated
                and not s.attr("dep_reads") and not s.attr("dep_writes")):
            srcs = [a for a in s.ins if isinstance(a, Access)]
            if srcs and all(not _depends_on(a, outer.var) and a.tensor not in written for a in srcs):
                found.add(s.outs[0].tensor)
    return found


def _renamed(a, names: dict):
    if not isinstance(a, Access):
        return a
    vector = _renamed(a.vector, names) if a.vector is not None else None
    return dataclasses.replace(a, tensor=names.get(a.tensor, a.tensor), vector=vector)


def _open(inner: Loop, hoisted: set, decls: dict, new_decls: list) -> list:
    """The inner loop's body once per iteration, its index bound and its own tiles renamed: a tile
    licm will hoist gets a name per iteration; the others take two names in turn, as the two
    buffers multi-buffer gives a loop (so that a copy's loads need not wait for the copy before)."""
    own = [s.tensor for s in inner.body.stmts if isinstance(s, Alloc)]
    out = []
    made = set()
    for i in range(inner.trip):
        names = {t: f"{t}.u{i if t in hoisted else i % 2}" for t in own}
        for s in inner.body.stmts:
            if isinstance(s, Alloc):
                if names[s.tensor] not in made:  # one allocation per name: the copies after reuse it
                    made.add(names[s.tensor])
                    new = dataclasses.replace(decls[s.tensor], name=names[s.tensor], address=None)
                    decls[new.name] = new
                    new_decls.append(new)
                    out.append(dataclasses.replace(s, tensor=names[s.tensor]))
            else:
                op = bind_op(s, {inner.var: i})
                out.append(dataclasses.replace(op, outs=tuple(_renamed(a, names) for a in op.outs),
                                               ins=tuple(_renamed(a, names) for a in op.ins)))
    return out


def licm_unroll(kernel, ctx):
    decls = kernel.tensor_map()
    new_decls: list = []

    def walk(block: Block, outer: Loop | None) -> Block:
        out = []
        for s in block.stmts:
            if isinstance(s, Loop):
                s = dataclasses.replace(s, body=walk(s.body, s if s.kind == "static" else None))
                hoisted = _shared(outer, s) if outer is not None else set()
                if hoisted:
                    out.extend(_open(s, hoisted, decls, new_decls))
                    continue
            out.append(s)
        return Block(tuple(out))

    body = walk(kernel.body, None)
    if not new_decls:
        return kernel
    used = {a.tensor for op in _ops(body) for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access))}
    used |= {s.tensor for s in body.walk() if isinstance(s, Alloc)}
    kept = tuple(t for t in kernel.tensors if t.on_chip is False or t.name in used or t.role != "local")
    return dataclasses.replace(kernel, body=body, tensors=kept + tuple(new_decls))


@hookimpl
def nkicc_passes():
    return [Pass("licm-unroll", licm_unroll,
                 "unroll a short static loop whose body holds work invariant in the loop around it (for licm)",
                 scope="kernel", after=("verify",), before=("licm",))]
