"""`nisa.get_nc_version()` by target, and `nisa.constants`.

The enumerations themselves (`nisa.engine`, `nisa.dge_mode`, `nisa.nc_version`,
...) are defined once with the instructions that take them (nkicc.ir.ops.enums).
This module adds what kernels ask of the target at trace time, and is
`nisa.constants` too: kernels write `from nki.isa.constants import oob_mode`.
"""
from __future__ import annotations

import sys

from ..ir.ops.enums import (  # noqa: F401 - re-exported: nisa.constants.<enum>
    dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd,
)
from ..language.tracing import current_builder

__all__ = ["get_nc_version", "get_nc_sub_version", "constants"]

# the generation of the default target (trn2) when no kernel is being traced
_DEFAULT_VERSION = nc_version.gen3


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the target the kernel is traced for
    (trn1: gen2, trn2: gen3, trn3: gen4)."""
    builder = current_builder()
    return nc_version(getattr(builder, "nc_version", None) or _DEFAULT_VERSION)


def get_nc_sub_version() -> int:
    """The silicon revision within the generation; nkicc models the first (0)."""
    return 0


# `nisa.constants.oob_mode` and `from nki.isa.constants import oob_mode`: this module under both names
constants = sys.modules[__name__]
sys.modules.setdefault(__name__.rsplit(".", 1)[0] + ".constants", constants)
