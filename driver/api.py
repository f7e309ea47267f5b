"""The Python face of nkicc: `jit`, `compile`, `simulate`."""
from __future__ import annotations

import contextvars
import copy
import functools
import itertools
import os
import sys
import threading
import time
import dataclasses
from dataclasses import dataclass, field

import numpy as np

from .ir import Counts, Kernel, NkiccError, Op, count_instructions, count_loops, dtypes, format_kernel
from .simulator.reference import poison
from .simulator import run_reference
from .simulator.reference import check_defined
from .simulator.returned import returned_values
from .ir.analysis import written_args
from .ir.ops.collectives import meets_others
from . import dialects, frameworks
from .simulator.machine import MachineSimulator
from .ir.numerics import precise_from_env
from .simulator.plot import plot_timeline
from .simulator.scratch import simulating
from .simulator.ranks import run_ranks as _simulate_ranks
from .pass_api import BudgetExceeded, Target
from .cached import CachePlan, cycle_collection_paused
from .passes import DEFAULT_TARGET, PassOptions, PipelineResult, registry, resolve_target
from .report import peak_rss_mb
from .sim_progress import simulation_progress
from .specs import TensorSpec, bind_call, constant_key
from .language.tracing import MeetsOtherCores, current_builder
from .language.kernel_trace import TraceResult, inspect_unwrap, trace_kernel
from .language.spmd import normalize_grid
from .language.userframes import caller_loc


UNDEFINED_MODES = ("error", "poison")


def undefined_mode(chosen: str | None = None, where: str = "undefined=") -> str:
    """What a kernel call does when never-written memory reaches an output: "error" (E173/E174,
    the default) or "poison" (return it holding the poison, NaN for floats and 4 for ints, as the
    vendor's simulator does). `chosen` (a jit option or `nkicc run --undefined`), else the
    NKICC_UNDEFINED environment variable, else "error"."""
    if chosen is None:
        chosen, where = os.environ.get("NKICC_UNDEFINED") or "error", "NKICC_UNDEFINED="
    if chosen not in UNDEFINED_MODES:
        raise NkiccError("E201", f"{where}{chosen!r}", caller_loc(),
                         "undefined is 'error' (E173/E174, the default) or 'poison' (NaN where nothing wrote)")
    return chosen


@dataclass
class RunSettings:
    """What `nkicc run` asks of the jit kernels a script calls: simulate with
    or without timing, and keep a record of every call (`records`)."""
    timing: bool = True
    undefined: str | None = None  # --undefined: overrides every kernel's own choice
    records: list = field(default_factory=list)
    timeline: str | None = None  # --timeline: draw each kernel call's engine timeline here (PNG)
    pictures: list = field(default_factory=list)  # the timeline files written so far
    memory: object | None = None  # a MemoryWatch (driver/memory_watch.py): each call's own peak RSS

    def timeline_path(self) -> str:
        """The next picture's file: the path itself for the first kernel call,
        then NAME-2.png, NAME-3.png, ... for the calls after it."""
        n = len(self.pictures) + 1
        root, ext = os.path.splitext(self.timeline)
        path = self.timeline if n == 1 else f"{root}-{n}{ext}"
        self.pictures.append(path)
        return path


# set by `nkicc run` for the script it runs; None: every kernel uses its own settings
RUN_SETTINGS: contextvars.ContextVar[RunSettings | None] = contextvars.ContextVar("nkicc_run_settings",
                                                                                default=None)


@dataclass
class CompiledKernel:
    """A traced (and, as passes land, compiled) kernel for one argument signature."""
    name: str
    ir: Kernel
    specs: dict[str, TensorSpec]
    constants: dict
    trace: TraceResult
    compile_s: float = 0.0
    # the kernel as traced; after a source-level cache hit nothing was traced, and
    # `traced_ir` traces on first use (_retrace)
    _traced_ir: Kernel | None = field(default=None, repr=False)
    target: str = DEFAULT_TARGET
    report: dict = field(default_factory=dict)
    # How run() simulates: "machine" (the lowered program on the NeuronCore model: the
    # allocator's addresses, engines, semaphores, estimated timing, hazard checks) or
    # "reference" (the IR interpreter). timing=False: functional only (faster);
    # trace_path: write a Perfetto timeline of each run there. `sim` is the last
    # run's SimReport (also report["sim"]); trace_path=True keeps the trace in
    # memory (sim.timeline) without writing a file. A multi-rank run also
    # leaves every rank's SimReport in `sim_ranks`.
    simulator: str = "machine"
    timing: bool = True
    trace_path: str | bool | None = None
    sim: object = None
    sim_ranks: list | None = None
    running: object = field(default=None, repr=False, compare=False)  # the MachineSimulator now running
    # never-written memory in an output: "error" (E173/E174) or "poison" (returned as it is, NaN for
    # floats); None: NKICC_UNDEFINED, else "error" (undefined_mode)
    undefined: str | None = None
    target_spec: Target | None = field(default=None, repr=False)
    # a multi-core launch: one compiled program per core (kernel[2] whose
    # programs meet at sendrecv / core_barrier / collectives), run at once
    cores: list | None = field(default=None, repr=False)
    # ... or whose programs write the same HBM elements without meeting (W191): run in
    # lockstep, a top-level statement of each core in turn
    lockstep: bool = False
    _retrace: object = field(default=None, repr=False, compare=False)
    # the machine simulator's batched-loop verdicts for `ir` (MachineSimulator(verdicts=)): made by
    # the first simulation, reused by the next ones
    _verdicts: dict = field(default_factory=dict, repr=False, compare=False)
    # the last machine simulator and what it was made for ((target, timing, trace, precise), sim):
    # the next simulation with the same settings runs it again instead of making its plans anew
    # (35 ms for mm2 at 1/8 of the seed, plus a slower first run); it keeps no run's memory
    _machine: tuple | None = field(default=None, repr=False, compare=False)
    _machine_lock: object = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def traced_ir(self) -> Kernel | None:
        if self._traced_ir is None and self._retrace is not None:
            traced = self._retrace()
            self._traced_ir = self.trace.kernel = traced.kernel
        return self._traced_ir

    def run(self, *arrays, **named) -> np.ndarray | tuple[np.ndarray, ...] | None:
        inputs = dict(zip(self.ir.args, arrays))
        inputs.update(named)
        missing = [a for a in self.ir.args if a not in inputs]
        if missing:
            raise NkiccError("E002", f"kernel {self.name} needs arrays for {', '.join(missing)}",
                             caller_loc(self.ir.loc))
        for name in self.ir.args:
            check_array(name, inputs[name], self.specs[name], caller_loc(self.ir.loc))
        mode = undefined_mode(self.undefined)  # (a bad NKICC_UNDEFINED fails before the simulation)
        donated = self._donatable(inputs)
        outputs = self.simulate(inputs, donated=donated)[0]
        if self.cores is None and mode == "error":  # (a multi-core run has no single-program reference)
            check_defined(self.ir, inputs, outputs)  # E173/E174: never-written memory reached an output
        in_place = set()  # the caller's arrays that hold the kernel's result for an argument
        for name in written_args(self.ir):  # an input the kernel wrote is updated in place, as on the device
            if name in outputs and isinstance(inputs[name], np.ndarray) and inputs[name].flags.writeable:
                if not (name in donated and np.may_share_memory(outputs[name], inputs[name])):
                    inputs[name][...] = outputs[name]  # (a simulator that copied it)
                in_place.add(name)
        # a returned argument (an nt.mutable_tensor output the caller passed in) is the caller's own array
        values = returned_values(self.ir, [inputs[o] if o in in_place else outputs[o] for o in self.ir.outputs])
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def _donatable(self, inputs: dict) -> frozenset:
        """The written arguments whose caller's arrays the simulation may write directly: the
        caller gets them updated in place anyway (run()), and a copy in and a copy back of a
        KV cache cost more than the kernel that updates one row of it. Only arrays already in
        the simulator's layout and dtype, writeable, and sharing no memory with another argument
        (which must still read the values from before the call)."""
        precise = precise_from_env()
        names = set()
        for name in written_args(self.ir):
            a = inputs.get(name)
            if (isinstance(a, np.ndarray) and a.flags.writeable and a.flags.c_contiguous
                    and a.dtype == dtypes.storage(self.ir.tensor(name).dtype, precise)
                    and not any(np.may_share_memory(a, b) for other, b in inputs.items()
                                if other != name and isinstance(b, np.ndarray))):
                names.add(name)
        return frozenset(names)

    @cycle_collection_paused()  # (a simulator's plans are tens of thousands of objects: 2x on the attention block)
    @simulating()
    def simulate(self, inputs: dict, simulator: str | None = None, timing: bool | None = None,
                 trace: str | None = None, donated: frozenset = frozenset()):
        """(outputs by name, SimReport or None) of one simulation of the compiled
        program; arguments override the kernel's simulator / timing / trace_path.
        donated: written arguments whose arrays in `inputs` the simulation updates in place
        (the machine simulator; the reference one copies)."""
        simulator = simulator or self.simulator
        if simulator not in ("machine", "reference"):
            raise NkiccError("E201", f"unknown simulator {simulator!r}", None, "machine or reference")
        if self.cores is not None:
            return self._simulate_cores(inputs, simulator, timing, trace, donated)
        lowered = all(t.address is not None for t in self.ir.tensors if t.on_chip)
        if simulator == "reference" or not lowered:
            return run_reference(self.ir, inputs), None
        target = self.target_spec or resolve_target(self.target, registry())
        timing = self.timing if timing is None else timing
        trace = trace or self.trace_path or False
        settings = (target, timing, trace, precise_from_env())
        mine = self._machine_lock.acquire(blocking=False)  # (a concurrent call makes a simulator of its own)
        try:
            kept = self._machine
            if mine and kept is not None and kept[0][0] is target and kept[0][1:] == settings[1:]:
                sim = kept[1]
            else:
                sim = MachineSimulator(self.ir, target, timing=timing, trace=trace, verdicts=self._verdicts,
                                       precise=settings[3])
                if mine:
                    self._machine = (settings, sim)
            self.running = sim  # (how far it is: driver/sim_progress.py reads sim.executed)
            try:
                outputs, self.sim = sim.run(inputs, donated=donated)
            finally:
                self.running = None
                sim.release_memory()
        finally:
            if mine:
                self._machine_lock.release()
        self.sim_ranks = None
        self.report["sim"] = self.sim.to_dict()
        return outputs, self.sim

    def _simulate_cores(self, inputs: dict, simulator: str, timing: bool | None, trace: str | None,
                        donated: frozenset):
        """The cores of a multi-core launch at once, sharing the kernel's HBM:
        the inputs, and outputs each core writes its part of."""
        outputs, reports = self._run_launches([inputs], simulator, timing, trace or self.trace_path or False,
                                              donated)
        # the slowest core's report; without timing (total_ns None) any core's
        self.sim = max((r for r in reports if r is not None), key=lambda r: r.total_ns or 0, default=None)
        return outputs[0], self.sim

    def _run_launches(self, inputs_by_rank: list[dict], simulator: str, timing: bool | None, trace,
                      donated: frozenset = frozenset()):
        """One multi-core launch per rank, every rank's cores at once: each rank's cores share
        that rank's HBM (its inputs, the outputs each core writes its part of, and the kernel's
        nl.shared_hbm scratch). ([outputs by name] per rank, [SimReport or None] per core of
        each rank, rank-major)."""
        precise = precise_from_env()  # the shared arrays hold what every core's simulator holds
        launches = [self._shared_hbm(inputs, precise, donated) for inputs in inputs_by_rank]
        target = self.target_spec or resolve_target(self.target, registry())
        timing = self.timing if timing is None else timing
        n = len(self.cores)
        results = _simulate_ranks([core.ir for core in self.cores] * len(inputs_by_rank),
                                  [inputs for inputs in inputs_by_rank for _ in range(n)], target, simulator,
                                  timing, per_rank_trace(trace), [s for _, _, shared in launches for s in shared],
                                  precise=precise, lockstep=self.lockstep, cores=n)
        reports = [r[1] for r in results]
        self.report["ranks"] = [r.to_dict() if r is not None else None for r in reports]
        self.sim_ranks = reports if all(r is not None for r in reports) else None
        written = set(self.ir.outputs).union(*(written_args(core.ir) for core in self.cores))  # some core wrote
        return [{**{a: args[a] for a in self.ir.args if a in written}, **outs} for args, outs, _ in launches], reports

    def _shared_hbm(self, inputs: dict, precise: bool, donated: frozenset = frozenset()) -> tuple[dict, dict, list]:
        """(arguments, outputs, [per core: HBM tensors by name]) of one launch, as arrays its
        cores share."""
        # an argument some core writes is a copy the caller gets back (or the caller's own array, donated);
        # one no core writes is the caller's own array where it is already contiguous in the simulator's
        # dtype (a KV cache per rank, not two; the simulators view HBM arrays flat and reinterpret their bytes)
        written = set().union(*(written_args(core.ir) for core in self.cores))
        args = {name: inputs[name] if name in donated else (np.array if name in written else np.ascontiguousarray)(
                    inputs[name], dtype=dtypes.storage(self.ir.tensor(name).dtype, precise))
                for name in self.ir.args}
        made = [o for o in self.ir.outputs if o not in args]  # (a returned argument lives in `args`)
        out_dtypes = [(d.shape, dtypes.storage(d.dtype, precise)) for d in map(self.ir.tensor, made)]
        outs = dict(zip(made, (np.full(shape, poison(dt, 1)[0], dtype=dt) for shape, dt in out_dtypes)))
        # and the kernel's own nl.shared_hbm scratch tensors (one core writes, the other reads after a
        # core_barrier): one array for the cores whose programs declare it alike
        scratch = {}
        for core in self.cores:
            for d in core.ir.tensors:
                if d.buffer == "shared_hbm" and d.name not in args and d.name not in core.ir.outputs \
                        and d.name not in scratch:
                    dt = dtypes.storage(d.dtype, precise)
                    scratch[d.name] = (d.shape, d.dtype, np.full(d.shape, poison(dt, 1)[0], dtype=dt))
        shared = [{**args, **{o: outs[n] for o, n in zip(core.ir.outputs, self.ir.outputs) if n in outs},
                   **{d.name: scratch[d.name][2] for d in core.ir.tensors
                      if d.name in scratch and scratch[d.name][:2] == (d.shape, d.dtype)}}
                  for core in self.cores]
        return args, outs, shared

    @cycle_collection_paused()
    @simulating()
    def run_ranks(self, inputs_by_rank: list[dict], simulator: str | None = None, timing: bool | None = None,
                  trace: str | None = None) -> tuple[list[dict], list]:
        """Simulate the program on len(inputs_by_rank) ranks at once, each with its
        own NeuronCore state, meeting at collectives: ([outputs by name], [SimReport
        or None]) per rank. trace: a path with `{rank}` for one timeline per rank."""
        simulator = simulator or self.simulator
        if self.cores is not None:  # a multi-core launch on each rank
            return self._run_launches(inputs_by_rank, simulator, timing, trace or False)
        lowered = all(t.address is not None for t in self.ir.tensors if t.on_chip)
        if simulator == "reference" or not lowered:
            simulator = "reference"
        target = self.target_spec or resolve_target(self.target, registry())
        timing = self.timing if timing is None else timing
        results = _simulate_ranks(self.ir, inputs_by_rank, target, simulator, timing, per_rank_trace(trace or False))
        reports = [r[1] for r in results]
        self.report["ranks"] = [r.to_dict() if r is not None else None for r in reports]
        self.sim_ranks = reports if all(r is not None for r in reports) else None
        return [r[0] for r in results], reports

    def plot_timeline(self, path: str | None = None) -> bytes:
        """The last simulation's engine timeline as PNG bytes (written to `path`
        when given): one row per engine and DMA queue, every rank's rows for a
        multi-rank run. The run must have kept a trace (trace=True or a path);
        needs matplotlib (`pip install 'nkicc[plot]'`, E206 without it)."""
        if self.sim is None and not self.sim_ranks:
            raise NkiccError("E206", f"kernel {self.name} has not been simulated with timing", None,
                             "run it (machine simulator, timing on, trace=True) first")
        return plot_timeline(self.sim_ranks or self.sim, path)

    def print_ir(self) -> str:
        return format_kernel(self.ir)

    @property
    def output_names(self) -> list[str]:
        """The outputs by the names the kernel gives them (`out`), in order; two
        outputs with one name get the line each was made at (`out@12`)."""
        decls = [self.ir.tensor(o) for o in self.ir.outputs]
        names = [d.user_name for d in decls]
        return [f"{n}@{d.loc.line}" if names.count(n) > 1 and d.loc is not None else n
                for n, d in zip(names, decls)]


def check_array(name: str, array, spec: TensorSpec, loc=None) -> None:
    a = np.asarray(array)
    if tuple(a.shape) != spec.shape:
        raise NkiccError("E002", f"argument {name} has shape {list(a.shape)}, the kernel was compiled for "
                                 f"{list(spec.shape)}", loc, "pass an array of the compiled shape")


def compile(kernel, *args, name: str | None = None, unroll: bool = False, passes=None,  # noqa: A001
            cache: bool | None = None, dialect: str | None = None, **named) -> CompiledKernel:
    """Trace `kernel` for the given arguments: numpy arrays, TensorSpecs or
    strings like "float32[128,512]" for tensors; anything else is a constant.
    `unroll=True` traces every static loop iteration by iteration (NKI's own
    semantics; the reference the rolled trace is tested against). `passes`
    chooses the pipeline: a PassOptions, a dict of its fields
    ({"enable": ["unroll"], "disable": ["licm"], "opt_level": 2}), or a list
    of passes to enable. `cache=False` compiles without the compile cache
    (as does NKICC_CACHE=0). `dialect="0.1"` traces the kernel as NKI 0.1
    (by default: the dialect its imports say, NKICC_DIALECT, else 0.6;
    docs/dialects.md)."""
    fn = inspect_unwrap(getattr(kernel, "fn", kernel))
    specs, constants, _ = bind_call(fn, args, named, allow_specs=True)
    return _compile(fn, specs, constants, name, unroll=unroll, passes=passes, cache=cache,
                    grid=getattr(kernel, "grid", None),
                    dialect=dialects.chosen(dialect, getattr(kernel, "options", {}).get("dialect"), fn))


def _compile(fn, specs: dict[str, TensorSpec], constants: dict, name: str | None,
             unroll: bool = False, passes=None, printer=print, cache: bool | None = None,
             grid: tuple[int, ...] | None = None, program: tuple[int, ...] | None = None,
             dialect: str | None = None, learned=None) -> CompiledKernel:
    options = PassOptions.coerce(passes)
    reg = registry(options.no_plugins, options.plugins)
    target = resolve_target(options.target, reg)
    plan = CachePlan.prepare(options, reg, target, cache=cache, unroll=unroll)
    plan.dialect = dialect
    t0 = time.perf_counter()
    warm = plan.warm(fn, specs, constants, name, grid, program)  # a source-level hit: no trace
    compile_s = time.perf_counter() - t0
    whole_grid = bool(grid) and program is None
    if warm is not None:
        pipeline, result = warm
    else:
        meets, learned_there = plan.meets, None
        if not meets:
            try:
                with cycle_collection_paused():
                    result = trace_kernel(fn, specs, constants, name, unroll=unroll, grid=grid, program=program,
                                          nc_version=target.nc_version, dialect=dialect, stop_if_meeting=whole_grid,
                                          learned=learned)
            except MeetsOtherCores as stop:
                # (only what it learned is kept: its traceback holds the stopped trace's frames)
                meets, learned_there = True, stop.policy
        if meets:
            # programs that meet (sendrecv, core_barrier, collectives) run at once, one core each:
            # traced and compiled one program at a time, and the grid's own program is never made
            # (outside the except clause: an error of a core's compile is not reported as its context)
            plan.remember_meets()
            launch = _compile_cores(fn, specs, constants, name, unroll, passes, printer, cache, grid, dialect,
                                    learned_there)
            reg.manager.hook.nkicc_compile_finished(report=launch.report)
            return launch
        t0 = time.perf_counter()
        try:
            with cycle_collection_paused():
                pipeline = plan.pipeline(result.kernel, printer, trace=result)
        except BudgetExceeded as exc:
            raise BudgetError(exc) from None
        compile_s += time.perf_counter() - t0
    compiled = CompiledKernel(pipeline.kernel.name if warm else result.kernel.name, pipeline.kernel, specs,
                              constants, result, compile_s, _traced_ir=result.kernel, target=target.name)
    if warm is not None:
        compiled._retrace = lambda: trace_kernel(fn, specs, constants, name, unroll=unroll, grid=grid,
                                                 program=program, nc_version=target.nc_version, dialect=dialect)
    compiled.target_spec = target
    compiled.report = build_report(compiled, pipeline)
    compiled.report["cache"] = plan.finish()
    if grid:
        compiled.report["grid"] = list(grid)
    # (meetings stop a whole grid's trace above; this finds one that a pass, not the trace, made)
    meet = whole_grid and _meets_other_cores(pipeline.kernel)
    race = whole_grid and not meet and any(w.code == "W191" for w in compiled.trace.warnings)
    if meet or race:
        # programs that write the same HBM elements (W191) run in lockstep, as cores that start together
        compiled.cores = _compile_cores(fn, specs, constants, name, unroll, passes, printer, cache, grid, dialect,
                                        result.policy).cores
        compiled.lockstep = bool(race)
        compiled.report["cores"] = len(compiled.cores)
    reg.manager.hook.nkicc_compile_finished(report=compiled.report)
    return compiled


def _compile_cores(fn, specs, constants, name, unroll, passes, printer, cache, grid, dialect,
                   learned) -> CompiledKernel:
    """A multi-core launch: one program per core, each traced starting from what the
    traces before it learned (where to split and unroll its loops). Stands for the
    launch as core 0's program with `cores` (its report: core 0's, with `grid` and `cores`)."""
    cores = []
    for p in itertools.product(*(range(g) for g in grid)):
        core = _compile(fn, specs, constants, name, unroll, passes, printer, cache, grid, p, dialect, learned)
        learned = core.trace.policy or learned  # (a cache hit traced nothing)
        cores.append(core)
    launch = dataclasses.replace(cores[0], cores=cores, lockstep=False, report=dict(cores[0].report),
                                 _verdicts={}, _machine=None, _machine_lock=threading.Lock())
    launch.report.update(grid=list(grid), cores=len(cores))
    return launch


def _meets_other_cores(kernel: Kernel) -> bool:
    return any(isinstance(s, Op) and meets_others(s.opcode, s.attr("groups"))
               for s in kernel.body.walk())


class BudgetError(Exception):
    """A compile stopped by its budget (exit code 3 on the command line)."""

    def __init__(self, exc: BudgetExceeded) -> None:
        how_far = f", {exc.done:,} of {exc.total:,} done" if exc.total else ""
        super().__init__(f"error[E320] pass {exc.pass_name!r} stopped: over the {exc.what}{how_far} "
                         f"(raise --max-compile-memory/--max-compile-time, or --disable-pass {exc.pass_name})")
        self.pass_name = exc.pass_name


def build_report(c: CompiledKernel, pipeline: PipelineResult) -> dict:
    counts = count_instructions(c.traced_ir) if c.trace.counts is None else Counts(*c.trace.counts)
    compiled = count_instructions(c.ir)
    return {
        "kernel": c.name,
        "args": {k: str(v) for k, v in c.specs.items()},
        "constants": {k: repr(v) for k, v in c.constants.items()},
        "trace_s": round(c.trace.seconds, 6),
        "trace_attempts": c.trace.attempts if c.trace.kernel is not None else 0,
        "compile_s": round(c.compile_s, 6),
        "total_s": round(c.trace.seconds + c.compile_s, 6),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "instructions_rolled": counts.rolled,
        "instructions_unrolled": counts.unrolled,
        "instructions_executed": counts.executed,
        "loops": dict(c.trace.loops),
        "warnings": list({(w.code, str(w.loc)): w.one_line() for w in c.trace.warnings + pipeline.warnings}.values()),
        "target": c.target,
        "pipeline": pipeline.pipeline,
        "passes": pipeline.timings,
        "instructions_compiled": compiled.rolled,
        "instructions_compiled_executed": compiled.executed,
        # static loops in the IR as traced and as compiled: a pass that unrolls
        # (unroll) or merges loops changes the second, and the summary says so
        "static_loops": {"traced": c.trace.static_loops if c.trace.static_loops is not None
                         else count_loops(c.traced_ir.body)["static"], "compiled": count_loops(c.ir.body)["static"]},
        "notes": pipeline.notes,
    }


class JitKernel:
    """`@nkicc.jit`: call with numpy arrays, get numpy arrays back. Compiled
    once per argument signature (shapes, dtypes and constant values).
    Options: enable_passes=[...], disable_passes=[...], opt_level=N,
    target="trn2", passes=PassOptions(...), unroll=False, cache=None (False: no compile cache),
    dialect=None (the NKI version the kernel is written in: docs/dialects.md),
    undefined=None ("poison": an output that never-written memory reached comes back holding NaN
    there, as from the vendor's simulator, instead of E173/E174; None: NKICC_UNDEFINED, else "error")."""

    def __init__(self, fn, enable_passes=(), disable_passes=(), opt_level=None, target=None, passes=None,
                 unroll=False, cache=None, undefined=None, dialect=None) -> None:
        self.fn = fn
        self.undefined = None if undefined is None else undefined_mode(undefined)
        base = PassOptions.coerce(passes)
        changes = {}
        if enable_passes:
            changes["enable"] = tuple(base.enable) + tuple(enable_passes)
        if disable_passes:
            changes["disable"] = tuple(base.disable) + tuple(disable_passes)
        if opt_level is not None:
            changes["opt_level"] = opt_level
        if target is not None:
            changes["target"] = target
        self.options = {"passes": dataclasses.replace(base, **changes), "unroll": unroll, "cache": cache,
                        "dialect": dialect}
        self._compiled: dict[tuple, CompiledKernel] = {}
        self.grid: tuple[int, ...] | None = None
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid) -> "JitKernel":
        """`kernel[grid](...)`: an SPMD launch, the kernel runs once per program id
        (nl.program_id / nl.num_programs); the grid is traced as rolled loops."""
        launched = copy.copy(self)  # shares the options and the compiled variants
        launched.grid = normalize_grid(grid)
        return launched

    def signature(self, args, kwargs) -> tuple[tuple, dict, dict, dict]:
        specs, constants, arrays = bind_call(inspect_unwrap(self.fn), args, kwargs)
        key = (tuple((k, str(v)) for k, v in specs.items()),
               tuple((k, constant_key(v)) for k, v in constants.items()),
               self.grid, os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE"))
        return key, specs, constants, arrays

    def compile(self, *args, **kwargs) -> CompiledKernel:
        key, specs, constants, _ = self.signature(args, kwargs)
        return self._variant(key, specs, constants)[0]

    def _variant(self, key, specs, constants) -> tuple[CompiledKernel, bool]:
        """(the compiled kernel for this signature, whether it was compiled now)."""
        compiled = self._compiled.get(key)
        if compiled is not None:
            return compiled, False
        fn = inspect_unwrap(self.fn)
        options = {**self.options, "dialect": dialects.chosen(None, self.options["dialect"], fn)}
        compiled = self._compiled[key] = _compile(fn, specs, constants, None, grid=self.grid, **options)
        compiled.undefined = self.undefined  # (what its own run() does, as a call of the jit kernel would)
        for line in compiled.report["warnings"]:  # what `nkicc compile` prints, once per signature
            print(line, file=sys.stderr)
        return compiled, True

    def __call__(self, *args, **kwargs):
        """Numpy arrays in, numpy arrays out; framework tensors (torch, JAX) in,
        the same framework's tensors out."""
        if current_builder() is not None:  # called from a kernel being traced: NKI inlines it
            if self.grid:
                raise NkiccError("E160", f"launching {self.fn.__name__}[{', '.join(map(str, self.grid))}] from "
                                         "inside another kernel is not supported", caller_loc(),
                                 "call it without a grid; the caller's launch grid applies")
            return inspect_unwrap(self.fn)(*args, **kwargs)
        framework = frameworks.detect(args, kwargs)
        if framework is not None:
            args, kwargs = frameworks.to_numpy(args), frameworks.to_numpy(kwargs)
            return frameworks.convert_result(self._call(*args, **kwargs), framework)
        return self._call(*args, **kwargs)

    def _call(self, *args, **kwargs):
        key, specs, constants, arrays = self.signature(args, kwargs)
        t_compile = time.perf_counter()
        compiled, fresh = self._variant(key, specs, constants)
        # what this call spent compiling: the trace and every core's pipeline (compiled.compile_s is
        # core 0's pipeline alone; the suite's seconds read this record)
        compile_s = time.perf_counter() - t_compile if fresh else 0.0
        settings = RUN_SETTINGS.get()
        compiled.undefined = (settings and settings.undefined) or self.undefined
        if settings is None:
            return compiled.run(**arrays)
        compiled.timing = settings.timing
        if settings.timeline and settings.timing:
            compiled.trace_path = compiled.trace_path or True
        t0 = time.perf_counter()
        with simulation_progress(compiled):  # under `nkicc run`: a long simulation shows how far it is
            result = compiled.run(**arrays)
        settings.records.append({"kernel": compiled.name, "compiled_now": fresh, "compile_s": compile_s,
                                 "run_s": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(),
                                 "report": compiled.report})
        _draw_for_run(settings, compiled.sim_ranks or compiled.sim)
        return result

    @property
    def compiled(self) -> list[CompiledKernel]:
        return list(self._compiled.values())


def jit(fn=None, **options):
    """Decorator: `@nkicc.jit` or `@nkicc.jit(...)`."""
    if fn is None:
        return lambda f: JitKernel(f, **options)
    return JitKernel(fn, **options)


def run_ranks(kernel, ranks: int, *args, simulator: str = "machine", timing: bool = True, trace: str | None = None,
              **named) -> list:
    """Run `kernel` on `ranks` ranks (NeuronCores with their own SBUF/PSUM, meeting
    at nki.collectives calls): each array argument is one array that every rank
    gets, or a list of `ranks` arrays, one per rank. Returns each rank's result,
    as a kernel call returns it."""
    if not isinstance(ranks, int) or ranks < 1:
        raise NkiccError("E201", f"ranks must be a positive int, got {ranks!r}", None)
    per_rank = []
    for r in range(ranks):
        per_rank.append([_rank_value(a, r, ranks) for a in args])
    jk = kernel if isinstance(kernel, JitKernel) else JitKernel(inspect_unwrap(kernel))
    compiled = jk.compile(*per_rank[0], **named)  # the jit's options, and its variants kept as a call keeps them
    inputs = [dict(zip(compiled.ir.args, values)) for values in per_rank]
    settings = RUN_SETTINGS.get()  # under `nkicc run --timeline`: a picture of every rank
    drawing = settings is not None and settings.timeline and timing and simulator == "machine"
    outputs, reports = compiled.run_ranks(inputs, simulator=simulator, timing=timing, trace=trace or bool(drawing))
    if drawing:
        _draw_for_run(settings, reports)
    results = []
    for out in outputs:
        values = returned_values(compiled.ir, [out[o] for o in compiled.ir.outputs])
        results.append(None if not values else values[0] if len(values) == 1 else tuple(values))
    return results


def per_rank_trace(trace):
    """A trace path for each rank of a multi-rank run: `{rank}` in it is the
    rank; a path without it gets `.rank{rank}` before its extension."""
    if not isinstance(trace, str) or "{rank}" in trace:
        return trace
    root, ext = os.path.splitext(trace)
    return f"{root}.rank{{rank}}{ext}"


def _draw_for_run(settings: RunSettings, source) -> None:
    """`nkicc run --timeline`: the picture of the kernel call that just ran."""
    if not settings.timeline or not settings.timing or not source:
        return
    reports = source if isinstance(source, list) else [source]
    if any(r is None or r.timeline is None for r in reports):
        return  # (the reference simulator ran: no timeline)
    path = settings.timeline_path()
    plot_timeline(source, path)
    print(f"nkicc: timeline of {reports[0].kernel} written to {path}", file=sys.stderr)


def _rank_value(a, rank: int, ranks: int):
    if isinstance(a, (list, tuple)) and len(a) == ranks and all(isinstance(x, np.ndarray) for x in a):
        return a[rank]
    return a


def simulate(kernel):
    """`nkicc.simulate(kernel)(*arrays)`: compile for these arrays and run."""
    jk = kernel if isinstance(kernel, JitKernel) else JitKernel(inspect_unwrap(kernel))
    return jk
