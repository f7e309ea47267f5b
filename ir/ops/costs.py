"""An instruction's estimated time: its definition's cost rule applied to a
target's cost table (`ir/target.py` defines the targets and their tables,
with the source of every constant)."""
from __future__ import annotations

from ..target import CostTable
from .core import CostContext, of


def cost_ns(op, engine: str, decls, target, table: CostTable, ranks: int = 1) -> float:
    """Estimated ns of one execution of `op` on `engine`: its definition's cost rule applied to
    the table's constants (what the machine simulator times it by, and the passes plan with)."""
    return of(op).cost(op, CostContext(decls, target, table, engine, ranks))
