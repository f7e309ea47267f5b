"""nkicc.ir: the rolled IR, affine index expressions, printer, hashing."""
from .affine import Affine
from .errors import NkiccError
from .hash import (
    NotCanonical, Renaming, canonical_kernel, canonical_text, digest, exact_hash, kernel_hash, region_hash,
    region_hashes,
)
from .nodes import (
    BUFFERS, ON_CHIP, Access, Alloc, Block, Const, Kernel, Loc, Loop, Op, Operand,
    ScalarOffset, Stmt, TensorDecl,
)
from .printer import format_block, format_kernel, format_op
from .stats import Counts, count_instructions, count_loops

__all__ = [
    "Affine", "Access", "NkiccError", "Alloc", "Block", "BUFFERS", "Const", "Counts", "Kernel", "Loc",
    "Loop", "ON_CHIP", "Op", "Operand", "ScalarOffset", "Stmt", "TensorDecl",
    "canonical_text", "count_instructions", "count_loops", "digest", "format_block",
    "format_kernel", "format_op", "kernel_hash", "region_hash", "region_hashes",
    "NotCanonical", "Renaming", "canonical_kernel", "exact_hash",
]
