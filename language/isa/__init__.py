"""nkicc.isa (`nisa`): instructions, destination first, nothing returned.

Every function here is made from the instruction's one definition
(nkicc.ir.ops) by nkicc.language.emit: its signature, docstring and trace
rules come from there. This package is the namespace kernels import; it sits
above nkicc.language, whose nl operations emit through the same functions.
"""
from __future__ import annotations

from ..ir import ops
from ..ir.ops.enums import dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd
from ..language.control import VirtualRegister, register_alloc
from ..language.emit import function
from ..language.instruction import NkiInstruction, NkiValidationError
from ..language.tensor import unsupported_name
from . import enums
from .enums import *  # noqa: F401,F403 - get_nc_version, get_nc_sub_version, nisa.constants

# the reference's deprecated spellings of the engine members (engine= puts an instruction there)
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown

for _d in ops.table().values():
    if _d.public and _d.module == "isa":
        globals()[_d.name] = function(_d.name)

__all__ = sorted(d.name for d in ops.table().values() if d.public and d.module == "isa") + ["NkiInstruction", "NkiValidationError", "VirtualRegister", "register_alloc", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine",
                                 "unknown_engine", "dge_mode", "dma_engine", "engine", "matmul_perf_mode",
                                 "nc_version", "oob_mode", "reduce_cmd"]
__all__ += enums.__all__


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'nkicc.isa' has no attribute {name!r}")
    raise unsupported_name("nisa", name)
