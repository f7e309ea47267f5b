"""The enumerations of nki.isa (`nisa.engine`, `nisa.dge_mode`, ...) and
`nisa.get_nc_version()`.

Names and values follow the NKI API reference. Kernels pass these as
instruction options (`dma_copy(..., dge_mode=nisa.dge_mode.hwdge)`) and
branch on the NeuronCore generation at trace time. The same module is
`nisa.constants` (kernels write `from nki.isa.constants import oob_mode`).
"""
from __future__ import annotations

import enum
import sys

from ..language.tracing import current_builder

__all__ = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine",
           "get_nc_version", "get_nc_sub_version", "constants"]


class engine(enum.Enum):
    """The engine an instruction is asked to run on (nkicc's schedule pass
    chooses engines itself, so this is a hint)."""
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(enum.Enum):
    """What an instruction does with the engine's accumulator registers."""
    idle = 0          # leaves them alone
    reset = 1         # clears them
    reduce = 2        # adds this instruction's result to them
    reset_reduce = 3  # clears, then adds this instruction's result
    load_reduce = 4   # loads a value, then adds this instruction's result


class dge_mode(enum.Enum):
    """Who builds a DMA's descriptors."""
    unknown = 0  # the compiler picks
    swdge = 1    # software, on the GpSimd engine, while the kernel runs
    hwdge = 2    # the descriptor-generation hardware, started by an engine's sequencer
    none = 3     # the runtime, before the kernel starts


class oob_mode(enum.Enum):
    """What an indirect access outside its tensor does at run time."""
    error = 0  # stops with an error
    skip = 1   # the element is not transferred


class matmul_perf_mode(enum.Enum):
    """Tensor Engine throughput modes."""
    none = "none"
    double_row = "double_row"  # two fp8 rows per pass: twice the matmul rate


class nc_version(enum.IntEnum):
    """NeuronCore generation. An IntEnum (the reference declares an Enum)
    because kernels compare it both with members and with plain ints:
    `get_nc_version() >= nc_version.gen3`, `get_nc_version() >= 3`."""
    gen2 = 2  # Trainium1 / Inferentia2 (target trn1)
    gen3 = 3  # Trainium2 (target trn2)
    gen4 = 4  # Trainium3 (target trn3)


class dma_engine(enum.Enum):
    """Which DMA engine moves the data."""
    dma = 1         # the shared DMA queues (the default)
    gpsimd_dma = 2  # GpSimd's own DMA, for low-latency SBUF-to-SBUF moves between logical cores


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
