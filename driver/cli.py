"""The `nkicc` command line.

Exit codes: 0 ok, 1 user error (one line: code, kernel file:line, fix),
2 usage, 3 compile budget exceeded, 4 internal error.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import runpy
import sys
import traceback
from typing import List, Optional

import numpy as np
import typer

from . import dialects
from .api import RUN_SETTINGS, UNDEFINED_MODES, BudgetError, RunSettings, _compile, check_array
from .cache.keys import compiler_version
from .diagnostics import explain
from .ir import NkiccError, dtypes
from .ir.numerics import random_values
from .ir.program import dumps_program
from .ir.origin import is_nkicc
from .language.usererrors import user_error
from .language.userframes import _innermost_is_nkicc
from .loader import const_value, enable_nki_alias, parse_pairs, resolve_kernel
from .passes import PassCrash, PassOptions, order, registry, split_names
from .report import summary_lines
from .reproduce import replay, write
from .sim_progress import simulation_progress
from .simulator.plot import INSTALL, have_matplotlib
from .specs import TensorSpec
from .sweep import parse_sweep, tune

app = typer.Typer(
    help="Compile NKI kernels with loops kept rolled, and simulate them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich mode labels every flag "<bool>"
)

EXIT_USER, EXIT_USAGE, EXIT_BUDGET, EXIT_INTERNAL = 1, 2, 3, 4


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nkicc {compiler_version()}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print nkicc's version and exit")) -> None:
    """Compile NKI kernels with loops kept rolled, and simulate them."""


def _fail(err: NkiccError) -> None:
    typer.echo(err.one_line(), err=True)
    raise typer.Exit(EXIT_USER)


@contextlib.contextmanager
def _writing(path: str, flag: str, mode: str = "w"):
    """A file the user asked for: one that cannot be written is a one-line E205, not a traceback."""
    try:
        with open(path, mode) as f:
            yield f
    except OSError as exc:
        _fail(NkiccError("E205", f"cannot write {flag} {path}: {exc.strerror or exc}", None,
                         "give a path in a folder that exists and is writable"))


def _check_writable(path: Optional[str], flag: str) -> None:
    """E205 now, for an output file that could not be written later: a missing
    or read-only folder, or a folder in the file's place."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    why = ("No such file or directory" if not os.path.isdir(folder) else
           "Is a directory" if os.path.isdir(path) else
           "Permission denied" if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK))
           else None)
    if why:
        _fail(NkiccError("E205", f"cannot write {flag} {path}: {why}", None,
                         "give a path in a folder that exists and is writable"))


TIMELINE_HELP = ("Draw the engine timeline (one row per engine and DMA queue, one bar per instruction) as a "
                 "PNG here; needs matplotlib (pip install 'nkicc[plot]')")


def _check_timeline(path: Optional[str], flag: str = "--timeline") -> None:
    """Before the compile and the run: a file that can be written, and matplotlib to draw it."""
    if not path:
        return
    _check_writable(path, flag)
    if not have_matplotlib():
        _fail(NkiccError("E206", f"{flag} needs matplotlib, which is not installed", None,
                         f"{INSTALL} (or pip install matplotlib)"))


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise NkiccError("E201", f"bad value {value!r} for {flag}", None, f"use {flag} {'|'.join(allowed)}")


def _npz_path(output: Optional[str]) -> Optional[str]:
    """The file np.savez(output) writes."""
    return output if not output or output.endswith(".npz") else output + ".npz"


def _npz_specs(inputs: str) -> dict[str, TensorSpec]:
    """Specs of the arrays in an --inputs FILE.npz (empty for random/ones or a
    file that cannot be read: _inputs reports that)."""
    if inputs in ("random", "ones") or not os.path.isfile(inputs):
        return {}
    try:
        with np.load(inputs) as data:
            return {k: TensorSpec.of_array(data[k]) for k in data.files}
    except (OSError, ValueError, AttributeError, TypeError, NkiccError):
        return {}


def _warn(compiled) -> None:
    for line in compiled.report["warnings"]:
        typer.echo(line, err=True)


# FILE::KERNEL and its --arg/--const values (shared with `nkicc tune`)
_parse_pairs, _const_value, _resolve = parse_pairs, const_value, resolve_kernel


# options shared by compile and simulate
ARG = typer.Option([], "--arg", help="A tensor argument: NAME=DTYPE[D0,D1,...], e.g. At=float32[4096,32768]")
CONST = typer.Option([], "--const", help="A compile-time constant: NAME=VALUE (a Python literal)")
TARGET = typer.Option(None, "--target", help="trn1, trn2 or trn3 (default trn2, or $NEURON_PLATFORM_TARGET_OVERRIDE)")
ENABLE = typer.Option([], "--enable-pass", help="Run this pass (repeatable; comma lists)")
DISABLE = typer.Option([], "--disable-pass", help="Do not run this pass (repeatable; comma lists; wins over --enable-pass)")
OPT = typer.Option(2, "-O", help="0: required passes only; 2: the defaults; 3: also opt-in passes linear in the rolled IR")
TIME_PASSES = typer.Option(False, "--time-passes", help="Print time, memory and IR size per pass")
PRINT_BEFORE = typer.Option([], "--print-ir-before", help="Print the IR before this pass (or 'all')")
PRINT_AFTER = typer.Option([], "--print-ir-after", help="Print the IR after this pass (or 'all')")
VERIFY_EACH = typer.Option(False, "--verify-each", help="Simulate on random inputs after every pass; stop at the first pass that changes a result")
MAX_TIME = typer.Option(600.0, "--max-compile-time", help="Compile time budget in seconds (exit code 3 when exceeded)")
MAX_MEMORY = typer.Option(None, "--max-compile-memory", help="Compile memory budget, e.g. 2GB or 512MB (default: half of physical memory)")
NO_PLUGIN = typer.Option([], "--no-plugin", help="Do not load this plugin (entry-point name); NKICC_DISABLE_PLUGIN_AUTOLOAD=1 skips all third-party plugins")
PLUGIN = typer.Option([], "-p", "--plugin", help="Load a plugin module by import name")
NO_CACHE = typer.Option(False, "--no-cache", help="Compile without the compile cache (as NKICC_CACHE=0 does)")
UNDEFINED = typer.Option(None, "--undefined", help="error: an output that holds never-written memory fails the "
                         "kernel call (E173/E174, the default); poison: it comes back holding NaN (ints: 4) there, "
                         "as the vendor's simulator returns it (default: NKICC_UNDEFINED, else error)")
REMOTE_CACHE = typer.Option(None, "--remote-cache", metavar="URL",
                            help="A shared cache tier behind the local one, e.g. redis://HOST:6379/0 or rediss://... "
                                 "(as NKICC_REMOTE_CACHE=URL does; the environment keeps a password out of `ps`)")


def _remote_cache(url: Optional[str]) -> None:
    """--remote-cache is NKICC_REMOTE_CACHE for this process and what it starts
    (a script's own subprocesses, workers)."""
    if url:
        from .cache.remote import URL_ENV  # start-up: cache.remote costs ~10 ms, only with --remote-cache
        os.environ[URL_ENV] = url


def _memory_mb(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    units = {"": 1 / 2**20, "B": 1 / 2**20, "K": 1 / 1024, "KB": 1 / 1024, "M": 1, "MB": 1, "G": 1024, "GB": 1024,
             "KIB": 1 / 1024, "MIB": 1, "GIB": 1024, "T": 2**20, "TB": 2**20}
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in units:
        raise NkiccError("E201", f"cannot read memory size {text!r}", None, "write e.g. 2GB, 512MB")
    return float(m.group(1)) * units[m.group(2).upper()]


def _pass_options(target, enable, disable, opt, time_passes, before, after, verify_each, max_time, max_memory,
                  no_plugin, plugin):
    return PassOptions(enable=split_names(enable), disable=split_names(disable), opt_level=opt, target=target,
                       time_passes=time_passes, print_ir_before=split_names(before),
                       print_ir_after=split_names(after), verify_each=verify_each, max_compile_time=max_time,
                       max_compile_memory_mb=_memory_mb(max_memory), no_plugins=split_names(no_plugin),
                       plugins=_plugin_names(plugin))


def _plugin_names(values) -> tuple[str, ...]:
    """-p values, comma lists split; an empty one is a mistake, not nothing."""
    if any(not n.strip() for v in values for n in str(v).split(",")):
        raise NkiccError("E303", "empty plugin module name (-p '')", None,
                         "give an import name or a plugin file, e.g. -p ./devpass.py")
    # a plugin file by its absolute path: a reproducer replays it from any folder
    return tuple(os.path.abspath(n) if n.endswith(".py") or "/" in n else n for n in split_names(values))


def _build(target_spec, arg, const, options, cache=None, from_inputs=None):
    fn, specs, constants = _resolve(target_spec, arg, const, from_inputs)
    try:
        return _compile(fn, specs, constants, None, passes=options, printer=typer.echo, cache=cache)
    except BudgetError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_BUDGET)


def _time_table(report: dict) -> list[str]:
    lines = [f"{'pass':<18}{'time (ms)':>11}{'mem (MB)':>10}{'IR in':>8}{'IR out':>8}"]
    for p in report["passes"]:
        lines.append(f"{p['name']:<18}{p['s'] * 1000:>11.2f}{p['mem_mb']:>10.1f}{p['ir_in']:>8}{p['ir_out']:>8}")
    total = sum(p["s"] for p in report["passes"])
    lines.append(f"{'total':<18}{total * 1000:>11.2f}")
    return lines


@app.command("compile")
def compile_cmd(
    target_spec: str = typer.Argument(..., metavar="FILE.py[::KERNEL]", help="The kernel: FILE.py::KERNEL, or FILE.py when it holds one kernel"),
    arg: List[str] = ARG, const: List[str] = CONST, target: Optional[str] = TARGET,
    enable_pass: List[str] = ENABLE, disable_pass: List[str] = DISABLE, opt: int = OPT,
    time_passes: bool = TIME_PASSES, print_ir_before: List[str] = PRINT_BEFORE,
    print_ir_after: List[str] = PRINT_AFTER, verify_each: bool = VERIFY_EACH,
    max_compile_time: float = MAX_TIME, max_compile_memory: Optional[str] = MAX_MEMORY,
    no_plugin: List[str] = NO_PLUGIN, plugin: List[str] = PLUGIN,
    print_ir: bool = typer.Option(False, "--print-ir", help="Print the IR after the pipeline"),
    report: Optional[str] = typer.Option(None, "--report", help="Write the compile report as JSON to this file"),
    emit: Optional[str] = typer.Option(None, "--emit", help="Also write: ir (text), program (the lowered program, JSON) or json (the report)"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Where --emit writes (default: stdout)"),
    no_cache: bool = NO_CACHE, remote_cache: Optional[str] = REMOTE_CACHE,
):
    """Trace and compile a kernel; print what it cost and how its loops were kept rolled."""
    _remote_cache(remote_cache)
    try:
        options = _pass_options(target, enable_pass, disable_pass, opt, time_passes, print_ir_before,
                                print_ir_after, verify_each, max_compile_time, max_compile_memory, no_plugin, plugin)
        compiled = _build(target_spec, arg, const, options, cache=False if no_cache else None)
    except NkiccError as err:
        _fail(err)
    _warn(compiled)
    if print_ir:
        typer.echo(compiled.print_ir())
    for line in summary_lines(compiled.report):
        typer.echo(line)
    _echo_notes(compiled)
    if time_passes:
        for line in _time_table(compiled.report):
            typer.echo(line)
    if report:
        with _writing(report, "--report") as f:
            json.dump(compiled.report, f, indent=2)
    if emit:
        _emit(compiled, emit, output)


def _echo_notes(compiled, only=None) -> None:
    """The notes passes asked to show (all, or only those keys)."""
    notes = compiled.report["notes"]
    for pass_name, key in notes.get("_shown", []):
        if only is None or key in only:
            value = notes[pass_name][key]
            typer.echo(f"note[{pass_name}] {key}: {value if isinstance(value, str) else json.dumps(value)}")


def _emit(compiled, what: str, output: Optional[str]) -> None:
    if what == "ir":
        text = compiled.print_ir()
    elif what == "program":
        text = dumps_program(compiled.ir, compiled.target)
    elif what == "json":
        text = json.dumps(compiled.report, indent=2)
    else:
        _fail(NkiccError("E201", f"--emit {what!r} is not ir, program or json", None, "use --emit ir|program|json"))
    if output:
        with _writing(output, "--output") as f:
            f.write(text)
    else:
        typer.echo(text)


def _inputs(compiled, how: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if how not in ("random", "ones"):
        if not os.path.isfile(how):
            raise NkiccError("E201", f"--inputs {how!r} is neither random, ones nor an .npz file", None,
                             "use --inputs random, --inputs ones or --inputs FILE.npz")
        try:
            data = np.load(how)
            files = set(data.files)
        except (OSError, ValueError, AttributeError) as exc:
            raise NkiccError("E201", f"cannot read --inputs {how}: {exc}", None, "give an .npz file (numpy.savez)") from None
        missing = [k for k in compiled.ir.args if k not in files]
        if missing:
            raise NkiccError("E002", f"{how} has no array for {', '.join(missing)}", compiled.ir.loc,
                             f"save one array per kernel argument: {', '.join(compiled.ir.args)}")
        arrays = {k: data[k] for k in compiled.ir.args}
        for k, v in arrays.items():
            check_array(k, v, compiled.specs[k], compiled.ir.loc)
        return arrays
    out = {}
    for name, spec in compiled.specs.items():
        if how == "ones":
            out[name] = np.ones(spec.shape, dtype=dtypes.storage(spec.dtype))
        else:
            out[name] = random_values(rng, spec.dtype, spec.shape)
    return out


@app.command("simulate")
def simulate_cmd(
    target_spec: str = typer.Argument(..., metavar="FILE.py[::KERNEL]", help="The kernel: FILE.py::KERNEL, or FILE.py when it holds one kernel"),
    arg: List[str] = ARG, const: List[str] = CONST, target: Optional[str] = TARGET,
    enable_pass: List[str] = ENABLE, disable_pass: List[str] = DISABLE, opt: int = OPT,
    no_plugin: List[str] = NO_PLUGIN, plugin: List[str] = PLUGIN,
    inputs: str = typer.Option("random", "--inputs", help="random, ones, or an .npz file with one array per argument"),
    seed: int = typer.Option(0, "--seed", help="Seed for --inputs random"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Save the outputs to this .npz file"),
    no_cache: bool = NO_CACHE, remote_cache: Optional[str] = REMOTE_CACHE,
    simulator: str = typer.Option("machine", "--simulator",
                                  help="machine: the lowered program on the NeuronCore model (addresses, engines, "
                                       "semaphores, timing); reference: the IR interpreter"),
    timing: str = typer.Option("on", "--timing", help="on: estimated timing and hazard checks; off: functional only"),
    trace_file: Optional[str] = typer.Option(None, "--trace", help="Write a Perfetto / chrome://tracing timeline "
                                                                   "(JSON) of the machine simulation here"),
    timeline: Optional[str] = typer.Option(None, "--timeline", help=TIMELINE_HELP),
    sim_json: Optional[str] = typer.Option(None, "--sim-json", help="Write the simulation report (JSON) here"),
    report: Optional[str] = typer.Option(None, "--report", help="Write the compile report as JSON here, with the "
                                                                "simulation report under \"sim\""),
    undefined: Optional[str] = UNDEFINED,
):
    """Compile a kernel and run it on the simulator; print output shapes and statistics."""
    _remote_cache(remote_cache)
    try:
        _choice("--simulator", simulator, ("machine", "reference"))
        _choice("--timing", timing, ("on", "off"))
        if undefined is not None:
            _choice("--undefined", undefined, UNDEFINED_MODES)
        for path, flag in ((trace_file, "--trace"), (timeline, "--timeline")):
            if path and (simulator != "machine" or timing == "off"):
                raise NkiccError("E201", f"{flag} needs --simulator machine and --timing on", None)
        # every file asked for is checked before the compile and the (long) simulation, not after
        for path, flag in ((trace_file, "--trace"), (sim_json, "--sim-json"), (_npz_path(output), "--output")):
            _check_writable(path, flag)
        _check_timeline(timeline)
        options = _pass_options(target, enable_pass, disable_pass, opt, False, (), (), False, 600.0, None,
                                no_plugin, plugin)
        compiled = _build(target_spec, arg, const, options, cache=False if no_cache else None,
                          from_inputs=_npz_specs(inputs))
        arrays = _inputs(compiled, inputs, seed)
        _warn(compiled)
        compiled.simulator, compiled.timing = simulator, timing == "on"
        compiled.undefined = undefined
        compiled.trace_path = trace_file or bool(timeline)  # --timeline alone: the trace stays in memory
        with simulation_progress(compiled):
            result = compiled.run(**arrays)
        if timeline and compiled.sim is not None:
            compiled.plot_timeline(timeline)
    except NkiccError as err:
        _fail(err)
    outs = result if isinstance(result, tuple) else (() if result is None else (result,))
    for name, value in zip(compiled.output_names, outs):
        v = np.asarray(value, dtype=np.float64)
        nan = int(np.isnan(v).sum())
        finite = v[np.isfinite(v)]
        stats = (f"min {finite.min():.6g}  max {finite.max():.6g}  mean {finite.mean():.6g}  std {finite.std():.6g}"
                 if finite.size else "no finite values")
        typer.echo(f"{name}: {value.dtype}{list(value.shape)}  {stats}  nan {nan}")
    _echo_notes(compiled, only=("what_alloc_did",))
    for rank, sim in enumerate(compiled.sim_ranks or [compiled.sim]):
        if sim is None:
            continue
        if compiled.sim_ranks:  # a multi-core launch: each core's engines
            typer.echo(f"rank {rank}:")
        typer.echo(sim.summary())
    if timeline and compiled.sim is not None:
        typer.echo(f"  timeline: {timeline}")
    if compiled.sim is not None:
        if sim_json:
            with _writing(sim_json, "--sim-json") as f:
                f.write(compiled.sim.to_json(indent=2))
    if report:
        with _writing(report, "--report") as f:
            json.dump(compiled.report, f, indent=1, default=str)
    if output:
        with _writing(_npz_path(output), "--output", "wb") as f:
            np.savez(f, **dict(zip(compiled.output_names, outs)))


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                      "allow_interspersed_args": False})  # all after SCRIPT is the script's
def run_cmd(
    ctx: typer.Context,
    script: str = typer.Argument(..., help="A Python script written for NKI (import nki, nki.language, nki.isa)"),
    timing: str = typer.Option("on", "--timing", help="on: estimated timing and hazard checks for every kernel "
                                                      "call; off: functional simulation only (faster)"),
    report: Optional[str] = typer.Option(None, "--report", help="Write a JSON record of every kernel call here "
                                                                "(compile and simulation time, peak RSS, the "
                                                                "compile and simulation report)"),
    timeline: Optional[str] = typer.Option(None, "--timeline", help=TIMELINE_HELP + "; one picture per kernel "
                                           "call: the first at this path, then NAME-2.png, NAME-3.png, ..."),
    remote_cache: Optional[str] = REMOTE_CACHE,
    shards: Optional[int] = typer.Option(None, "--shards", help="Run N copies, one per shard, on a Dask cluster; "
                                                                "each gets SHARD / NSHARDS (and NKICC_SHARD / "
                                                                "NKICC_NSHARDS) in its environment, and {shard} / "
                                                                "{nshards} in its arguments are replaced"),
    workers: Optional[int] = typer.Option(None, "--workers", help="With --shards: local worker processes "
                                                                  "(default: one per core)"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="With --shards: an existing Dask scheduler, "
                                                                  "tcp://HOST:PORT"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="With --shards: seconds per shard"),
    undefined: Optional[str] = UNDEFINED,
    dialect: Optional[str] = typer.Option(None, "--dialect", help="The NKI version (0.1 ... 0.6) of the script's "
                                          "`import nki` kernels; `import neuronxcc.nki` is always 0.1 "
                                          "(docs/dialects.md)"),
):
    """Run an NKI script unchanged, with nkicc behind `import nki` (a real installed nki is never shadowed).
    Options go before the script; everything after it is the script's own arguments."""
    if dialect is not None:
        try:
            _set_dialect(ctx, dialects.front.check(dialect, "--dialect "))  # the script's kernels read it
        except NkiccError as err:
            _fail(err)
    if not os.path.isfile(script):
        _fail(NkiccError("E200", f"no such script: {script}", None, "give the path to a .py file"))
    try:
        _choice("--timing", timing, ("on", "off"))
        if undefined is not None:
            _choice("--undefined", undefined, UNDEFINED_MODES)
        if timeline and (timing == "off" or shards is not None):
            raise NkiccError("E201", "--timeline needs --timing on, and one process (not --shards)", None)
    except NkiccError as err:
        _fail(err)
    _check_timeline(timeline)
    _remote_cache(remote_cache)
    if shards is not None:
        _run_shards(script, ctx.args, shards, timing == "on", workers, cluster, timeout, report, undefined)
        return
    if workers or cluster or timeout:
        _fail(NkiccError("E201", "--workers, --cluster and --timeout go with --shards", None, "add --shards N"))
    enable_nki_alias()
    sys.argv = [script, *ctx.args]
    folder = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, folder)
    settings = RunSettings(timing=timing == "on", timeline=timeline, undefined=undefined)
    token = RUN_SETTINGS.set(settings)
    try:
        runpy.run_path(script, run_name="__main__")
    except NkiccError as err:
        _fail(err)
    except Exception as exc:
        _script_failed(exc)
    finally:
        RUN_SETTINGS.reset(token)
        if report:
            with _writing(report, "--report") as f:
                json.dump(settings.records, f, indent=1, default=str)


def _set_dialect(ctx: typer.Context, value: str) -> None:
    """`--dialect` as NKICC_DIALECT for this command (its shards inherit it), restored after it."""
    old = os.environ.get("NKICC_DIALECT")
    os.environ["NKICC_DIALECT"] = value

    def restore() -> None:
        if old is None:
            os.environ.pop("NKICC_DIALECT", None)
        else:
            os.environ["NKICC_DIALECT"] = old
    ctx.call_on_close(restore)


def _run_shards(script, args, shards, timing, workers, cluster, timeout, report, undefined=None) -> None:
    from . import sweep_view  # start-up: rich's views and the shard runner (5-20 ms), for --shards only
    from .shards import run_shards

    console = sweep_view.console()
    try:
        result = run_shards(script, shards, args, timing=timing, workers=workers, cluster=cluster,
                            timeout=timeout, progress=True, undefined=undefined)
    except NkiccError as err:
        _fail(err)
    except KeyboardInterrupt:
        typer.echo("stopped (Ctrl-C) before any shard finished", err=True)
        raise typer.Exit(130)
    sweep_view.show_shards(console, result)
    if report:
        with _writing(report, "--report") as f:
            json.dump(result.to_dict(), f, indent=1, default=str)
    if result.interrupted:
        raise typer.Exit(130)
    if not result.ok:
        raise typer.Exit(EXIT_USER)


def _script_failed(exc: Exception) -> None:
    """An exception out of a script `nkicc run` ran: the script's own traceback
    (from its first frame on) and exit 1, as python itself would; one raised
    inside nkicc is an internal error (re-raised: exit 4 with nkicc's traceback)."""
    err = user_error(exc) if isinstance(exc, ImportError) else None
    if err is not None:  # a name nkicc lacks: one line at the import (a script's own assert stays Python's)
        _fail(err)
    if _innermost_is_nkicc(exc.__traceback__):
        raise exc
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith("<frozen")
                              or is_nkicc(tb.tb_frame.f_code.co_filename)):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
    raise typer.Exit(EXIT_USER)


@app.command("tune")
def tune_cmd(
    target_spec: str = typer.Argument(..., metavar="FILE.py::KERNEL", help="The kernel: FILE.py::KERNEL"),
    sweep: List[str] = typer.Option([], "--sweep", help="A constant to sweep: NAME=v1,v2,... (repeatable; the "
                                                        "variants are the cross product)"),
    arg: List[str] = ARG, const: List[str] = CONST,
    target: Optional[str] = typer.Option(None, "--target", help="Target(s) to sweep, comma-separated: trn1,trn2"),
    enable_pass: List[str] = ENABLE, disable_pass: List[str] = DISABLE,
    inputs: str = typer.Option("random", "--inputs", help="random, ones, or an .npz file with one array per argument"),
    seed: int = typer.Option(0, "--seed", help="Seed for --inputs random"),
    workers: Optional[int] = typer.Option(None, "--workers", help="Local worker processes (default: one per core)"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="An existing Dask scheduler, tcp://HOST:PORT"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per variant; a slower one is stopped "
                                                                    "and is a failed row"),
    json_out: Optional[str] = typer.Option(None, "--json", help="Write the rows as JSON here"),
    plot: Optional[str] = typer.Option(None, "--plot", help="Draw the estimated times as a bar chart to this .svg file"),
    no_cache: bool = NO_CACHE,
):
    """Compile and simulate every variant of a sweep on a Dask cluster; rank them by estimated time.
    Exit 0 when at least one variant ran, 1 when none did, 130 when stopped with Ctrl-C."""
    from . import sweep_view  # start-up: rich's views (3-10 ms), for nkicc tune only

    console = sweep_view.console()
    try:
        sweeps = dict(parse_sweep(s) for s in sweep)
        options = [*_flags("--enable-pass", enable_pass), *_flags("--disable-pass", disable_pass)]
        result = tune(target_spec, sweeps, args=_parse_pairs(arg, "--arg"),
                      consts={k: _const_value(v) for k, v in _parse_pairs(const, "--const").items()},
                      targets=target, inputs=inputs, seed=seed, workers=workers, cluster=cluster,
                      timeout=timeout, cache=not no_cache, options=options, progress=True)
        sweep_view.show(console, result)
        if json_out:
            with _writing(json_out, "--json") as f:
                f.write(result.to_json(indent=1))
        if plot:
            sweep_view.plot(result, plot)
    except NkiccError as err:
        _fail(err)
    except KeyboardInterrupt:
        typer.echo("stopped (Ctrl-C) before any variant finished", err=True)
        raise typer.Exit(130)
    if result.interrupted:
        raise typer.Exit(130)
    if result.best is None:
        raise typer.Exit(EXIT_USER)


def _flags(flag: str, items: List[str]) -> List[str]:
    return [x for item in items for x in (flag, item)]


@app.command("migrate")
def migrate_cmd(
    file: str = typer.Argument(..., metavar="FILE.py", help="A kernel file written for an older NKI version"),
    from_: Optional[str] = typer.Option(None, "--from", help="The version it is written for: 0.1 ... 0.5 (default: "
                                                             "0.1 for neuronxcc.nki imports, else 0.2)"),
    to: str = typer.Option("0.6", "--to", help="The version to migrate to"),
    diff: bool = typer.Option(False, "--diff", help="Print the rewrite as a unified diff (the default)"),
    write: bool = typer.Option(False, "--write", help="Rewrite FILE.py in place (atomically; after --check passes)"),
    check: bool = typer.Option(False, "--check", help="Compile and simulate the kernel before and after on random "
                                                      "inputs; fail unless the outputs agree"),
    kernel: Optional[str] = typer.Option(None, "--kernel", help="With --check: the kernel, when the file has several"),
    arg: List[str] = ARG, const: List[str] = CONST, target: Optional[str] = TARGET,
    seed: int = typer.Option(0, "--seed", help="Seed of --check's random inputs"),
    grid: Optional[str] = typer.Option(None, "--grid", help="With --check: an SPMD launch grid, e.g. 2,2"),
):
    """Rewrite a kernel to a newer NKI version, rule by rule of the migration guide (docs/migration.md).
    What cannot be rewritten stays, with a `# nkicc-migrate: RULE` comment and a warning."""
    from . import migrate  # start-up: libcst (~100 ms) for nkicc migrate only

    try:
        if diff and write:
            raise NkiccError("E201", "--diff and --write exclude each other", None, "give one of them")
        m = migrate.migrate_file(file, from_, to)
        typer.echo(f"nkicc migrate: {file}: NKI {m.start} -> {m.stop}" + (f" ({m.assumed})" if m.assumed else ""),
                   err=True)
        for line in m.infos:
            typer.echo(line, err=True)
        for note in m.notes:
            typer.echo(note.warning(file), err=True)
        if check:
            launch = tuple(int(g) for g in grid.split(",")) if grid else None
            typer.echo(migrate.check(m, kernel, arg, const, seed=seed, target=target, grid=launch).line(), err=True)
        if write:
            if m.changed:
                migrate.write_atomically(file, m.after)
            typer.echo(f"wrote {file}: {len(m.rules_applied)} rule(s) applied, {len(m.notes)} left to finish", err=True)
        else:
            typer.echo(m.diff(), nl=False)
    except NkiccError as err:
        _fail(err)


@app.command("passes")
def passes_cmd(
    no_plugin: List[str] = NO_PLUGIN, plugin: List[str] = PLUGIN,
):
    """List the passes: name, default, scope, cost, version, providing package, what it does."""
    try:
        reg = registry(split_names(no_plugin), _plugin_names(plugin))
    except NkiccError as err:
        _fail(err)
    rows = [("name", "default", "scope", "cost", "version", "provided by", "description")]
    for p in order(list(reg.passes.values())):
        default = "required" if p.required else ("on" if p.default else "off")
        rows.append((p.name, default, p.scope, p.cost, p.version, reg.provider.get(p.name, "?"), p.description))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6])


@app.command("explain")
def explain_cmd(code: str = typer.Argument(..., help="An error or warning code, e.g. E101 or W201")):
    """Print the longer story behind an error or warning code."""
    text = explain(code.upper())
    if text is None:
        _fail(NkiccError("E201", f"no such code {code!r}", None, "codes look like E101 or W201; see docs/errors.md"))
    typer.echo(text)


@app.command("reproduce")
def reproduce_cmd(path: str = typer.Argument(..., help="A reproducer file written when a pass crashed")):
    """Replay a reproducer: the recorded IR through the recorded pipeline and options;
    a crash prints the pass's traceback (the one recorded first is in the file's "traceback")."""
    try:
        replay(path, printer=typer.echo)
    except NkiccError as err:
        _fail(err)
    except PassCrash as crash:
        typer.echo(crash.summary(), err=True)
        typer.echo(crash.traceback_text().rstrip("\n"), err=True)
        typer.echo(f"  this is a bug in {crash.provider}, not in the kernel; the traceback recorded when it "
                   f"first crashed is under \"traceback\" in {path}", err=True)
        raise typer.Exit(EXIT_INTERNAL)
    typer.echo("the reproducer ran without the recorded error")


def _crashed(crash) -> None:
    path = crash.path or write(crash)
    typer.echo(crash.summary(), err=True)
    if path:
        typer.echo(f"  a reproducer is in {path}; replay it with: nkicc reproduce {path}", err=True)
    typer.echo(f"  this is a bug in {crash.provider}, not in the kernel; --disable-pass {crash.pass_name} "
               "may get you going", err=True)
    sys.exit(EXIT_INTERNAL)


from .cache_cli import cache_app  # noqa: E402  `nkicc cache stats|clear|prune|path`

app.add_typer(cache_app, name="cache")


def entry() -> None:
    """The `nkicc` command's process (the console script, `python -m nkicc`, a
    task's child process): what the imports made lives until it exits, so it is
    moved out of the cyclic collector's reach and a full collection no longer
    walks it (13 ms of a 125 ms `nkicc compile`, the same again in every
    simulate and tune task). `main` alone leaves the caller's heap as it is."""
    gc.freeze()
    main()


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except PassCrash as crash:
        _crashed(crash)
    except NkiccError as err:
        typer.echo(err.one_line(), err=True)
        sys.exit(EXIT_USER)
    except Exception:  # a bug in nkicc, not in the kernel
        typer.echo("internal error in nkicc (please report it with the traceback below):", err=True)
        traceback.print_exc()
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    entry()
