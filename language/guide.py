"""The sections of the vendor's NKI migration guide (aws-neuron-sdk
`nki/migration/index.rst` and its block-dimension guide) that nkicc's
one-line errors about older dialects name, by a short key.

The titles are the guide's headings, so that a user can find the section;
`nkicc migrate` (docs/migration.md) lists the same sections rule by rule."""
from __future__ import annotations

SECTIONS = {
    # 0.1 -> 0.2
    "mgrid": "0.1 -> 0.2: Update indexing syntax for mgrid and arange",
    "mask": "0.1 -> 0.2: Deprecation of masking",
    "dst": "0.1 -> 0.2: All ISA functions require a destination parameter",
    "loop-reduce": "0.1 -> 0.2: All ISA functions require a destination parameter",
    "control-flow": "0.1 -> 0.2: Consistent control flow behavior",
    "allocation": "0.1 -> 0.2: Translate from the NKI 0.1.0 direct allocation API",
    "sub-kernels": "0.1 -> 0.2: Remove nki.jit decorator on sub-kernels",
    "dynamic-access": "0.1 -> 0.2: Dynamic access pattern",
    "block-dims": "Removing block dimensions from NKI kernels",
    # 0.2 -> 0.3
    "dma-rmw": "0.2 -> 0.3: nisa.dma_copy — dst_rmw_op and unique_indices removed",
    "int-enums": "0.2 -> 0.3: Integer enum constants no longer supported",
    "str-buffers": "0.2 -> 0.3: String buffer names no longer supported",
    "register-move": "0.2 -> 0.3: nisa.register_move — imm renamed to src",
    "affine-select": "0.2 -> 0.3: nisa.affine_select — offset parameter moved",
    "dma-compute": "0.2 -> 0.3: nisa.dma_compute — parameter reorder",
    "shared-hbm": "0.2 -> 0.3: Output tensors must use nl.shared_hbm",
    # 0.3 -> 0.4
    "copy-dynamic": "0.3 -> 0.4: nki.isa.tensor_copy_dynamic_src / tensor_copy_dynamic_dst — removed",
    "neuronxcc-in-kernel": "0.3 -> 0.4: neuronxcc.nki.* inside kernels — now a compilation error",
    # 0.4 -> 0.5
    "rsqrt-psum": "0.4 -> 0.5: nki.language.rsqrt — PSUM inputs no longer supported",
    "reshape-count": "0.4 -> 0.5: nki.language.NkiTensor.reshape — element count now validated",
    # 0.5 -> 0.6
    "dynamic-loops": "0.5 -> 0.6: Deprecated: dynamic nl.dynamic_range and while loops",
}


# the rule of `nkicc migrate` (driver/migrate_rules.py, docs/migration.md) that rewrites each form
RULES = {
    "mgrid": "M0203", "mask": "M0204", "dst": "M0202", "loop-reduce": "M0214", "control-flow": "M0209",
    "allocation": "M0210", "sub-kernels": "M0207", "dynamic-access": "M0206", "block-dims": "M0252",
    "dma-rmw": "M0307", "int-enums": "M0316", "str-buffers": "M0317", "register-move": "M0313",
    "affine-select": "M0312", "dma-compute": "M0310", "shared-hbm": "M0315", "copy-dynamic": "M0403",
    "neuronxcc-in-kernel": "M0402", "rsqrt-psum": "M0501", "reshape-count": "M0502", "dynamic-loops": "M0601",
}

# names of NKI 0.1 that 0.2 removed, and the section that says what replaces them
REMOVED = {"nl.arange": "mgrid", "nl.mgrid": "mgrid", "nl.loop_reduce": "loop-reduce"}


def section(key: str) -> str:
    return SECTIONS[key]


def hint(key: str) -> str:
    """What an error about an older form says: the guide's section, and the migrate rule."""
    return f"see the migration guide, section {SECTIONS[key]!r}; `nkicc migrate` rule {RULES[key]}"
