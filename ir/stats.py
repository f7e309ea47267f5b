"""Instruction counts of a kernel: as written (rolled), as a compiler that
unrolls every static loop would emit, and as executed."""
from __future__ import annotations

from dataclasses import dataclass

from .nodes import Block, Kernel, Loop, Op


@dataclass(frozen=True)
class Counts:
    rolled: int
    unrolled: int  # static loops unrolled, dynamic loops kept
    executed: int  # every loop counted


def _count(block: Block) -> tuple[int, int, int]:
    rolled = unrolled = executed = 0
    for s in block.stmts:
        if isinstance(s, Op):
            rolled += 1
            unrolled += 1
            executed += 1
        elif isinstance(s, Loop):
            r, u, e = _count(s.body)
            rolled += r
            unrolled += u if s.kind == "dynamic" else u * s.trip
            executed += e * s.trip
    return rolled, unrolled, executed


def count_instructions(kernel: Kernel) -> Counts:
    return Counts(*_count(kernel.body))


def count_loops(block: Block) -> dict[str, int]:
    static = dynamic = 0
    for s in block.walk():
        if isinstance(s, Loop):
            if s.kind == "dynamic":
                dynamic += 1
            else:
                static += 1
    return {"static": static, "dynamic": dynamic}
