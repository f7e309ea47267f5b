"""Instruction costs for the machine simulator: each instruction's own cost
rule (its definition in nkicc.ir.ops) applied to the constants of the
target's table (`target.costs`, nkicc.ir.target). ESTIMATES, NOT MEASUREMENTS.

Cycle counts are engine cycles; an engine's clock comes from the Target
(pe_ghz, dve_ghz, act_ghz, pool_ghz). DMA costs are in nanoseconds, from the
table's DMA engine and HBM bandwidths (docs/fidelity.md lists every constant).
"""
from __future__ import annotations

from ..ir import Op, TensorDecl, ops
from ..ir.ops.costs import cost_ns
from ..ir.target import CostTable

# engines that run compute instructions; DMA queues are separate resources
COMPUTE_ENGINES = ("pe", "dve", "act", "pool")


def traffic_bytes(op: Op, decls: dict[str, TensorDecl]) -> int:
    """Bytes a DMA moves (0 for compute instructions)."""
    rule = ops.of(op).traffic
    return rule(op, decls) if rule is not None else 0


__all__ = ["CostTable", "cost_ns", "traffic_bytes", "COMPUTE_ENGINES"]
