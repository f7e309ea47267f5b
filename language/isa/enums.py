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
from ..language.emit import get_nc_version  # noqa: F401 - nisa.get_nc_version (emit checks generations with it)

__all__ = ["get_nc_version", "get_nc_sub_version", "constants"]


def get_nc_sub_version() -> int:
    """The silicon revision within the generation; nkicc models the first (0)."""
    return 0


# `nisa.constants.oob_mode` and `from nki.isa.constants import oob_mode`: this module under both names
constants = sys.modules[__name__]
sys.modules.setdefault(__name__.rsplit(".", 1)[0] + ".constants", constants)
