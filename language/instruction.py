"""`nisa.NkiInstruction` (what every nisa call returns) and
`nisa.NkiValidationError` (what a broken hardware rule raises).

`consumer.depends_on(*producers)` orders instructions that share no data: it
gives the producer a dependency token it writes and the consumer the token
it reads (op attributes `dep_writes` / `dep_reads`, one-element state tensors,
see ir.analysis.reads/writes), so the schedule, the hazard checks and the
machine simulator order them like any read after a write. The edge costs
nothing by itself; it shows on the timeline as the consumer waiting.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

from ..ir import NkiccError, Op
from .objects import NKIObject
from .tracing import user_loc


class NkiValidationError(NkiccError):
    """A hardware rule an instruction's arguments break (shape, buffer, dtype,
    ...): nkicc's coded one-line error, catchable under the reference's name."""


@dataclass
class _Handle:
    builder: object
    block: list       # the block the op was emitted into (a list while it is traced)
    index: int        # the op's position in it
    frames: tuple     # the loop frames open when it was emitted, the kernel's first
    seq: int          # emission order within the trace

    @property
    def closed(self) -> bool:
        """Its loop has ended: the op already sits in a finished Loop node."""
        return self.frames[-1].ended

    @property
    def op(self) -> Op:
        op = self.block[self.index]
        return self.builder.late_edits.get(id(op), (op, op))[1]

    def set(self, op: Op) -> None:
        if self.closed:  # the finished tree is rebuilt once, when the trace ends (Builder.finish)
            orig = self.block[self.index]
            self.builder.late_edits[id(orig)] = (orig, op)
        else:
            self.block[self.index] = op


class NkiInstruction(NKIObject):
    """Handle to one traced instruction: `c.depends_on(a, b)` makes c run
    after a and b have completed (returns c, so calls chain)."""

    def __init__(self, handle):
        self._handle = handle

    def __repr__(self) -> str:
        return f"NkiInstruction({self._handle.op.opcode})"

    def depends_on(self, *producers) -> "NkiInstruction":
        """An edge may cross static loops (each end stands for every iteration
        of its rolled loops, which waits at least as long as the unrolled edge);
        not a runtime loop, whose semaphore could fire a different number of
        times than its partner waits."""
        loc = user_loc(2)
        me = self._handle
        b = me.builder
        for p in producers:
            if not isinstance(p, NkiInstruction):
                raise NkiccError("E103", f"depends_on takes instructions (what nisa calls return), got "
                                         f"{type(p).__name__}", loc, "pass the value a nisa.* call returned")
            src = p._handle
            if src.builder is not b:
                raise NkiccError("E103", "depends_on names an instruction of another kernel", loc)
            if src.seq >= me.seq:
                raise NkiccError("E103", f"{me.op.opcode}.depends_on: a producer must come before its consumer",
                                 loc, "call depends_on on the later instruction")
            common = 0
            while common < min(len(me.frames), len(src.frames)) and me.frames[common] is src.frames[common]:
                common += 1
            if any(f.kind == "dynamic" for f in me.frames[common:] + src.frames[common:]):
                raise NkiccError("E103", f"{me.op.opcode}.depends_on({src.op.opcode}): the edge crosses a runtime "
                                         "loop (fori_loop, while_loop, dynamic_range)", loc,
                                 "both must sit in the same runtime loop, or the producer in an enclosing scope")
            token = next(iter(src.op.attr("dep_writes", ()) or ()), None)
            if token is None:
                token = b.state_tensor(f"dep.{sum(1 for n in b.decls if n.startswith('dep.'))}", (1, 1),
                                       "uint32").name
                src.set(_with(src.op, "dep_writes", (token,)))
            reads = tuple(me.op.attr("dep_reads", ()) or ())
            if token not in reads:
                me.set(_with(me.op, "dep_reads", reads + (token,)))
        return self


# NKIObject's metaclass hides __init__ from inspect.signature(NkiInstruction): say it (docs/api.md)
NkiInstruction.__signature__ = inspect.signature(NkiInstruction.__init__).replace(
    parameters=list(inspect.signature(NkiInstruction.__init__).parameters.values())[1:])


def _with(op: Op, key: str, value) -> Op:
    attrs = tuple((k, v) for k, v in op.attrs if k != key) + ((key, value),)
    return replace(op, attrs=attrs)


def handle_of(builder, op: Op) -> NkiInstruction:
    """The handle of `op`, just emitted into the builder's current block."""
    block = builder._blocks[-1]
    return NkiInstruction(_Handle(builder, block, len(block) - 1, tuple(builder._frames), next(builder.emitted)))
