"""The pass writer's API: everything a pass plugin needs, and nothing of the
driver. A pass module imports this and `nkicc.ir`, and declares its passes
from the `nkicc_passes` hook:

    from nkicc.pass_api import Pass, hookimpl

    def run(kernel, ctx):
        return kernel

    @hookimpl
    def nkicc_passes():
        return [Pass("my-pass", run, "what it does", default=False)]

Kernel-scoped passes are `run(kernel: Kernel, ctx: PassContext) -> Kernel`.
Region-scoped passes are `run(block: Block, region: Region, ctx) -> Block`:
the driver calls them on every block (the kernel body and each loop body),
innermost first, so a pass sees one body at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import pluggy

from .ir import Block, Kernel, Loc, Loop, NkiccError, TensorDecl
from .ir.target import CostTable, Target  # the one definition of a target, for passes and target plugins

hookimpl = pluggy.HookimplMarker("nkicc")

SCOPES = ("region", "kernel")
COSTS = ("body", "unrolled")


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable
    description: str = ""
    default: bool = True      # on unless disabled (False: opt-in)
    required: bool = False    # cannot be disabled
    scope: str = "kernel"     # region | kernel
    version: str = "1"        # part of every cache key: bump when output changes
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    cost: str = "body"        # body: linear in the rolled IR; unrolled: follows the unrolled size
    cacheable: bool = True    # region scope: results may be cached by the body's canonical form (docs/cache.md)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"pass {self.name}: scope must be one of {SCOPES}")
        if self.cost not in COSTS:
            raise ValueError(f"pass {self.name}: cost must be one of {COSTS}")


@dataclass(frozen=True)
class Region:
    """Where a region pass is looking: the block's owning loop (None for the
    kernel body) and the trip counts of every loop variable in scope."""
    loop: Loop | None
    trips: Mapping[str, int]
    decls: Mapping[str, TensorDecl]
    kernel: Kernel


class BudgetExceeded(Exception):
    def __init__(self, what: str, pass_name: str, done: int, total: int) -> None:
        super().__init__(what)
        self.what = what
        self.pass_name = pass_name
        self.done = done
        self.total = total


@dataclass
class PassContext:
    """What a running pass may use: the target, options, warnings, and
    `progress`, which passes whose cost follows the unrolled size must call
    often (it enforces the compile budget and draws the progress bar)."""
    target: Target
    options: Mapping[str, object] = field(default_factory=dict)
    pass_name: str = ""
    _warnings: list = field(default_factory=list)
    _progress: Callable[[str, int, int], None] | None = None
    _notes: dict = field(default_factory=dict)

    def note(self, key: str, value, show: bool = False) -> None:
        """Attach a JSON-able fact to the compile report, under
        report["notes"][pass name][key]; with show, the CLI prints it too."""
        self._notes.setdefault(self.pass_name, {})[key] = value
        if show:
            self._notes.setdefault("_shown", []).append([self.pass_name, key])

    def warn(self, code: str, message: str, loc: Loc | None = None) -> None:
        self._warnings.append(NkiccError(code, message, loc))

    def error(self, code: str, message: str, loc: Loc | None = None, hint: str = "") -> NkiccError:
        return NkiccError(code, message, loc, hint)

    def progress(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress(self.pass_name, done, total)


__all__ = ["Pass", "PassContext", "Region", "Target", "CostTable", "BudgetExceeded", "hookimpl", "Block", "Kernel", "Loop"]
