"""What the NKI Library's test suite calls in its simulation mode, answered by nkicc.

The suite's CPU mode (`--test-mode simulation`) calls
`nki.cpu_simulate(kernel)[lnc](**inputs)` of the vendor's CPU simulator, and its
trace-only tests call `nki.compiler.frontend.ParserFrontend().compile(...)`.
nkicc's stand-ins (the alias path's `nki_cpu_simulator`) call `cpu_simulate` and
`trace_only` here: the kernel traced and compiled by nkicc, for the target the
suite names (`NKI_NC_VERSION`, which it sets per test), and run on nkicc's
machine simulator for values only (no timing: the suite checks values), with
never-written memory reading NaN as in the vendor's simulator.

The vendor's simulator runs one rank, so the suite's CPU mode cannot run its
collectives tests; `run_ranks` runs them on nkicc's N-rank simulation, each rank
with the inputs the suite's per-rank generator gives it (the pytest plugin,
nkicc.pytest_plugin, routes the suite's harness there).

Every call is timed into the `nkicc run` record list (api.RUN_SETTINGS) when
one is set, which is how the plugin tells nkicc's seconds from the goldens'."""
from __future__ import annotations

import os
import time

import numpy as np

from .api import RUN_SETTINGS, JitKernel, RunSettings
from .language.kernel_trace import inspect_unwrap
from .memory_watch import watched_call
from .report import peak_rss_mb

NC_VERSION_ENV = "NKI_NC_VERSION"  # the suite's choice of NeuronCore generation (gen2, gen3, gen4)
POISON = "poison"


def _jit(kernel, target: str | None = None) -> JitKernel:
    """A fresh nkicc jit kernel for one of the suite's kernels (decorated by the
    vendor's `nki.jit`, nkicc's, or not at all)."""
    fn = kernel.fn if isinstance(kernel, JitKernel) else inspect_unwrap(kernel)
    return JitKernel(fn, target=target or os.environ.get(NC_VERSION_ENV) or None, undefined=POISON)


class _Launcher:
    """`cpu_simulate(kernel)`: index it with the logical core count, then call it."""

    def __init__(self, kernel, lnc=1) -> None:
        self.kernel = kernel
        self.lnc = lnc

    def __getitem__(self, lnc) -> "_Launcher":
        return _Launcher(self.kernel, lnc)

    def __call__(self, *args, **kwargs):
        jk = _jit(self.kernel)
        if _grid_needed(self.lnc):
            jk = jk[self.lnc]
        settings = RUN_SETTINGS.get()
        if settings is not None:
            with watched_call(settings):
                return jk(*args, **kwargs)
        token = RUN_SETTINGS.set(RunSettings(timing=False))  # values only, as the vendor's CPU simulator
        try:
            return jk(*args, **kwargs)
        finally:
            RUN_SETTINGS.reset(token)


def _grid_needed(lnc) -> bool:
    return not (isinstance(lnc, int) and lnc == 1)


def cpu_simulate(kernel) -> _Launcher:
    """`nki.cpu_simulate(kernel)[lnc](**inputs)` of the vendor's CPU simulator:
    nkicc compiles the kernel for these inputs and simulates it; returns what the
    kernel returns (numpy arrays)."""
    return _Launcher(kernel)


def trace_only(kernel, inputs: dict, target: str | None, lnc) -> object:
    """The suite's trace-only check: nkicc traces and compiles the kernel for
    these inputs (arrays, and constants for the other parameters). Returns the
    compiled kernel; raises nkicc's error where it does not compile."""
    jk = _jit(kernel, target)
    if _grid_needed(lnc):
        jk = jk[lnc]
    t0 = time.perf_counter()
    with watched_call(RUN_SETTINGS.get()):
        compiled = jk.compile(**inputs)
    _record(compiled, True, time.perf_counter() - t0, 0.0)
    return compiled


def run_ranks(kernel, inputs_by_rank: list[dict], lnc=1) -> list[list[np.ndarray]]:
    """Each rank's outputs, in the kernel's order, of one run on
    len(inputs_by_rank) ranks meeting at collectives: rank r gets inputs_by_rank[r]
    (the arrays by parameter name; constants must agree across ranks)."""
    jk = _jit(kernel)
    if _grid_needed(lnc):
        jk = jk[lnc]
    with watched_call(RUN_SETTINGS.get()):
        t0 = time.perf_counter()
        compiled = jk.compile(**inputs_by_rank[0])
        compile_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        outputs, _ = compiled.run_ranks([{a: np.asarray(inputs[a]) for a in compiled.ir.args}
                                         for inputs in inputs_by_rank], timing=False)
    _record(compiled, True, compile_s, time.perf_counter() - t1, ranks=len(inputs_by_rank))
    return [[out[o] for o in compiled.ir.outputs] for out in outputs]


def _record(compiled, fresh: bool, compile_s: float, run_s: float, ranks: int = 1) -> None:
    """A record like JitKernel's under `nkicc run`, for calls that do not go through it."""
    settings = RUN_SETTINGS.get()
    if settings is not None:
        settings.records.append({"kernel": compiled.name, "compiled_now": fresh, "compile_s": compile_s,
                                 "run_s": run_s, "ranks": ranks, "peak_rss_mb": peak_rss_mb()})


def nkicc_seconds(records: list) -> tuple[float, float]:
    """(compile seconds, simulate seconds) of a record list (compile counted for
    fresh compiles only: a kernel variant compiled before is reused)."""
    compile_s = sum(r.get("compile_s") or 0.0 for r in records if r.get("compiled_now"))
    return compile_s, sum(r.get("run_s") or 0.0 for r in records)
