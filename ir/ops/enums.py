"""The enumerations instructions take as arguments (`nisa.engine`,
`nisa.reduce_cmd`, ...). They are part of the instruction definitions (their
members are signature defaults), and nkicc.isa exports them."""
from __future__ import annotations

from enum import Enum, IntEnum

from ..errors import NkiccError


class engine(Enum):
    """The engine an instruction runs on."""
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(Enum):
    """What an instruction does with its engine's accumulator registers."""
    idle = 0          # leaves them alone
    reset = 1         # sets them to the reduction's identity
    reduce = 2        # accumulates onto their current value
    reset_reduce = 3  # resets, then accumulates this instruction's result
    load_reduce = 4   # loads a given value, then accumulates this instruction's result


class dge_mode(Enum):
    """How a DMA's descriptors are generated."""
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(Enum):
    """What an indirect DMA does with an index out of bounds."""
    error = 0
    skip = 1


class matmul_perf_mode(Enum):
    none = "none"
    double_row = "double_row"


class nc_version(IntEnum):
    """NeuronCore generation: gen2 trn1, gen3 trn2, gen4 trn3. An IntEnum (the
    reference declares an Enum) because kernels order it against members and
    plain ints: `get_nc_version() >= nc_version.gen3`, `get_nc_version() >= 3`."""
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(Enum):
    dma = 1
    gpsimd_dma = 2


def member_name(value, enum_type, what: str) -> str:
    """The member name of an enum argument given as a member, its name or its value."""
    if isinstance(value, enum_type):
        return value.name
    if isinstance(value, Enum) and value.name in enum_type.__members__:  # the same enum exported elsewhere
        return value.name
    for m in enum_type:
        if value == m.name or (not isinstance(value, bool) and value == m.value):
            return m.name
    raise NkiccError("E103", f"{what} must be one of {', '.join('nisa.' + enum_type.__name__ + '.' + m.name for m in enum_type)}, "
                             f"got {value!r}")


# nkicc's name of the unit each compute engine of nisa.engine is (schedule lanes, cost clocks)
ENGINE_UNITS = {"tensor": "pe", "vector": "dve", "scalar": "act", "gpsimd": "pool"}
UNIT_ENGINES = {unit: member for member, unit in ENGINE_UNITS.items()}


def engine_choice(value, allowed: tuple, what: str) -> str | None:
    """The unit ("pe", "dve", "act", "pool") an instruction's engine= argument asks for: a
    nisa.engine member, its name or value, or nkicc's own unit name. `allowed` lists the units
    the instruction runs on, and None where nisa.engine.unknown (nkicc places it) is accepted:
    unknown is then None. Anything else is E103, naming the engines it may run on."""
    if value is None:  # (as not given: what kernels written for nkicc's old unknown_engine pass)
        unit = None
    elif isinstance(value, str) and value in UNIT_ENGINES:
        unit = value
    else:
        member = member_name(value, engine, f"{what} engine")
        unit = None if member == "unknown" else ENGINE_UNITS.get(member, member)
    if unit in allowed:
        return unit
    names = [UNIT_ENGINES[u] for u in allowed if u is not None]
    got = "unknown" if unit is None else UNIT_ENGINES.get(unit, unit)
    raise NkiccError("E103", f"{what} runs on the {' or '.join(names)} engine, not {got}", None,
                     f"pass engine=nisa.engine.{names[0]}" + (" or leave engine out" if None in allowed else ""))


__all__ = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine"]
