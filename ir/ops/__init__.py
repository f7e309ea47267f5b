"""nkicc.ir.ops: every instruction defined once (see core.py).

    from nkicc.ir import ops
    d = ops.get("nc_matmul")      # the OpDef: trace rule, engine, semantics, cost
    ops.table()                   # opcode -> OpDef, built-ins and installed families
"""
from .core import (
    ACT_REGS, BUILTIN_FAMILIES, Batched, DVE_ACC, ENTRY_POINT_GROUP, CostContext, Emit, EngineState, OpDef, StateRef, TensorOperand, family_files, free_size, get, initial_state, instruction, of,
    any_shape, by_partition, partitions, require_generation, table,
)

__all__ = ["ACT_REGS", "BUILTIN_FAMILIES", "Batched", "any_shape", "by_partition", "DVE_ACC", "ENTRY_POINT_GROUP", "CostContext", "Emit", "EngineState",
           "OpDef", "StateRef", "family_files", "TensorOperand", "free_size",
           "get", "initial_state", "instruction", "of", "partitions", "require_generation", "table"]
