"""Which NKI dialect a kernel is written in, and what that changes while tracing.

A kernel's dialect is that of the `nl` / `nisa` modules it calls: NKI 0.1's
(`neuronxcc.nki.language`, language/legacy_nl.py and legacy_isa.py, which say
so in `__nki_dialect__`) or nkicc's own (0.6; the `nki` namespace of 0.2 to
0.6; 0.2 to 0.5 trace with it too, 0.2 with the four nisa signatures it wrote
otherwise: nki02_isa.py). An explicit dialect (`nkicc.compile(..., dialect="0.1")`, `nkicc run
--dialect`, NKICC_DIALECT) overrides that: the kernel's module globals are
traced with that dialect's modules in place of nkicc's.
"""
from __future__ import annotations

import types

from ..ir import NkiccError
from .. import isa
from .. import language as nl
from . import legacy, legacy_isa, legacy_nl, nki02_isa

VERSIONS = ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")
CURRENT = "0.6"
LEGACY = "0.1"  # the dialect with its own front end; 0.2-0.5 are nkicc's nl / nisa (0.2: nki02_isa's signatures)


def check(version: str | None, where: str) -> str | None:
    """`version` as given (`0.1`, `0.1.0`), or E201 naming the versions."""
    if version is None:
        return None
    v = str(version)
    v = ".".join(v.split(".")[:2])
    if v not in VERSIONS:
        raise NkiccError("E201", f"{where}{version!r} is not an NKI version nkicc knows", None,
                         f"give one of {', '.join(VERSIONS)}")
    return v


def _global_names(code: types.CodeType):
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def dialect_of(fn) -> str | None:
    """The dialect of the modules the kernel's code names (`nl` bound by `import
    neuronxcc.nki.language as nl`), if one of them says."""
    g = getattr(fn, "__globals__", {})
    code = getattr(fn, "__code__", None)
    values = [g.get(name) for name in set(_global_names(code))] if code is not None else []
    for cell in getattr(fn, "__closure__", None) or ():  # a kernel nested in a function that imported nl
        try:
            values.append(cell.cell_contents)
        except ValueError:  # (a cell not yet filled)
            continue
    for value in values:
        if isinstance(value, types.ModuleType) and getattr(value, "__nki_dialect__", None):
            return value.__nki_dialect__
    return None


# the modules a dialect traces with in place of nkicc's own nl and nisa
MODULES = {LEGACY: {nl: legacy_nl, isa: legacy_isa}, "0.2": {isa: nki02_isa}}


def rebind(g: dict, dialect: str | None) -> None:
    """Make the kernel's globals call `dialect`'s nl and nisa."""
    swap = MODULES.get(dialect, {})
    for name, value in list(g.items()):
        if isinstance(value, types.ModuleType) and value in swap:
            g[name] = swap[value]


def setitem_of(dialect: str | None):
    """What `t[key] = value` does in the dialect (None: not allowed)."""
    return legacy.assign if dialect == LEGACY else None
