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


# names of NKI 0.1 that 0.2 removed, and the section that says what replaces them
REMOVED = {"nl.arange": "mgrid", "nl.mgrid": "mgrid", "nl.loop_reduce": "dst"}


def section(key: str) -> str:
    return SECTIONS[key]
