"""nkicc.ir.ops: every instruction defined once (see core.py).

    from nkicc.ir import ops
    d = ops.get("nc_matmul")      # the OpDef: trace rule, engine, semantics, cost
    ops.table()                   # opcode -> OpDef, built-ins and installed families
"""
from .core import (
    BUILTIN_FAMILIES, ENTRY_POINT_GROUP, CostContext, Emit, OpDef, TensorOperand, free_size, get, instruction, of,
    partitions, table,
)

__all__ = ["BUILTIN_FAMILIES", "ENTRY_POINT_GROUP", "CostContext", "Emit", "OpDef", "TensorOperand", "free_size",
           "get", "instruction", "of", "partitions", "table"]
