"""Facts about instructions that passes and the simulator share: what an op
reads and writes, and the element range an access can touch."""
from __future__ import annotations

from typing import Mapping

from . import ops
from .affine import Affine
from .nodes import Access, Op, TensorDecl
from .dtypes import itemsize


def engine_of(op: Op, decls: Mapping[str, TensorDecl]) -> str:
    """The engine that runs `op`: the schedule's choice once made, else its definition's."""
    return op.attr("engine") or ops.of(op).engine_of(op, decls)


def runtime_guard(loop) -> Op | None:
    """The loop_guard that heads a loop whose trip count is decided at run
    time (nl.fori_loop, nl.while_loop; see ir.ops.control), or None."""
    stmts = loop.body.stmts
    if loop.kind == "dynamic" and stmts and isinstance(stmts[0], Op) and stmts[0].opcode == "loop_guard":
        return stmts[0]
    return None


def written_args(kernel) -> tuple[str, ...]:
    """The kernel's input tensors that an instruction writes (updated in place
    for the caller, as on the device)."""
    args = set(kernel.args)
    found = {a.tensor for s in kernel.body.walk() if isinstance(s, Op) for a in s.outs if a.tensor in args}
    return tuple(a for a in kernel.args if a in found)


def _tokens(op: Op, key: str) -> tuple[Access, ...]:
    """The dependency tokens (`nisa` instruction.depends_on) an op writes
    (dep_writes, a producer) or reads (dep_reads, a consumer): one-element
    state tensors that carry an ordering and no data."""
    return tuple(Access(name, Affine(), ((1, 1),)) for name in op.attr(key, ()) or ())


def writes(op: Op) -> tuple[Access, ...]:
    if op.attr("dep_writes"):
        return op.outs + _tokens(op, "dep_writes")
    return op.outs


def reads(op: Op) -> tuple[Access, ...]:
    """What the op reads: its operands, scalar and vector offsets, dependence tokens, and the
    destination of an accumulation. (Kept on the op, which is immutable: the passes ask again and
    again, 180 k times in one compile of the library's attention block.)"""
    known = op.__dict__.get("_reads")
    if known is None:
        known = op.__dict__["_reads"] = _reads(op)
    return known


def _reads(op: Op) -> tuple[Access, ...]:
    ins = tuple(a for a in op.ins if isinstance(a, Access))
    scalars = tuple(Access(a.scalar.tensor, a.scalar.offset, ((1, 1),))
                    for a in ins + op.outs if a.scalar is not None and a.scalar.tensor)
    scalars += tuple(a.vector for a in ins + op.outs if a.vector is not None)  # gather / scatter indices
    tokens = _tokens(op, "dep_reads") if op.attr("dep_reads") else ()
    if ops.of(op).accumulates(op):
        return ins + op.outs + scalars + tokens  # accumulation reads the destination
    return ins + scalars + tokens


def tensors_touched(op: Op) -> set[str]:
    """Every tensor the op reads or writes, runtime-offset tiles included."""
    return {a.tensor for a in reads(op) + writes(op)}


def pattern_span(pattern) -> tuple[int, int]:
    """(lowest, highest) element a (step, num) pattern reaches, relative to its first: the sum of
    its negative spans and the sum of its positive ones."""
    lo = hi = 0
    for step, num in pattern:
        span = step * (num - 1)
        if span >= 0:
            hi += span
        else:
            lo += span
    return lo, hi


def extent(a: Access, trips: Mapping[str, int], decl: TensorDecl) -> tuple[int, int]:
    """Smallest and largest element index the access can touch over the given
    loop ranges; a runtime scalar offset makes it the whole tensor."""
    if a.scalar is not None or a.vector is not None:
        return 0, decl.size - 1
    lo, hi = a.offset.bounds(trips)
    below, above = pattern_span(a.pattern)
    lo, hi = lo + below, hi + above
    if a.dtype is not None and a.dtype != decl.dtype:  # elements of another dtype: the tensor's own they touch
        ai, ti = itemsize(a.dtype), itemsize(decl.dtype)
        lo, hi = (lo * ai) // ti, ((hi + 1) * ai - 1) // ti
    return lo, hi


def access_dtype(a: Access, decls) -> str:
    """The dtype an access reads or writes: its own (a reinterpreting view) or its tensor's."""
    return a.dtype or decls[a.tensor].dtype


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def run_length(pairs) -> int | None:
    """How many consecutive values sum(i_k * step_k) over the (step, count) pairs walks from 0,
    or None when they are not one run (a negative step, a gap, a repeat)."""
    run = 1
    for step, num in sorted(pairs):
        if step != run:
            return None
        run *= num
    return run


def injective(pattern) -> bool:
    """Whether no two index tuples of (step, count) pairs address the same
    element: sorted by step, each step must clear the span of the smaller ones
    (sufficient, not necessary)."""
    span = 0
    for step, num in sorted((abs(st), n) for st, n in pattern if n > 1):
        if step <= span:
            return False
        span += step * (num - 1)
    return True

