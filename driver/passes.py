"""The pass manager: loads pass plugins through pluggy, chooses and orders the
pipeline, and runs it with timing, IR dumps, result checks and the compile
budget."""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import pluggy

from . import hookspecs
from .cache.regions import run_region
from .ir import Block, Kernel, Loop, NkiccError, count_instructions, format_kernel
from .pass_api import BudgetExceeded, Pass, PassContext, Region, Target, hookimpl
from .ir.numerics import random_values
from .ir.target import GENERATION_NAMES
from .report import current_rss_mb, peak_rss_mb
from .simulator import run_reference

AUTOLOAD_ENV = "NKICC_DISABLE_PLUGIN_AUTOLOAD"
OWN_DISTRIBUTION = "nkicc"


@dataclass(frozen=True)
class PassOptions:
    """Which passes run and how the pipeline is watched. The same choices as
    the CLI's flags; `nkicc.compile(..., passes=PassOptions(...))`."""
    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    opt_level: int = 2
    target: str | None = None
    time_passes: bool = False
    print_ir_before: tuple[str, ...] = ()
    print_ir_after: tuple[str, ...] = ()
    verify_each: bool = False
    max_compile_time: float = 600.0
    max_compile_memory_mb: float | None = None  # default: half of physical memory
    no_plugins: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()  # extra plugin modules to load by import name

    @staticmethod
    def coerce(value) -> "PassOptions":
        if value is None:
            return PassOptions()
        if isinstance(value, PassOptions):
            return value
        if isinstance(value, dict):
            fields = {f.name for f in dataclasses.fields(PassOptions)}
            unknown = set(value) - fields
            if unknown:
                raise NkiccError("E302", f"unknown pass option(s) {sorted(unknown)}", None,
                                 f"use {', '.join(sorted(fields))}")
            return PassOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})
        if isinstance(value, (list, tuple)):
            return PassOptions(enable=tuple(value))
        raise NkiccError("E302", f"passes= takes PassOptions, a dict or a list of pass names, not {type(value).__name__}")

    def cache_key(self) -> dict:
        """The options that change output (not the ones that only observe)."""
        return {"enable": sorted(self.enable), "disable": sorted(self.disable), "opt_level": self.opt_level}


def split_names(values) -> tuple[str, ...]:
    out = []
    for v in values:
        out.extend(n.strip() for n in str(v).split(",") if n.strip())
    return tuple(out)


# --- plugin manager ------------------------------------------------------------------

class _Runner:
    """nkicc's own implementation of `nkicc_run_pass`: it runs the pass."""

    @hookimpl(trylast=True)
    def nkicc_run_pass(self, pass_: Pass, ir: Kernel, ctx: PassContext):
        if pass_.scope == "kernel":
            return pass_.run(ir, ctx)
        return run_region_pass(pass_, ir, ctx)


@dataclass
class Registry:
    manager: pluggy.PluginManager
    passes: dict[str, Pass]
    provider: dict[str, str]  # pass name -> distribution
    targets: dict[str, Target]


_registries: dict[tuple, Registry] = {}


def registry(no_plugins: tuple[str, ...] = (), plugins: tuple[str, ...] = ()) -> Registry:
    """The plugin manager with every pass loaded (one per configuration)."""
    autoload = os.environ.get(AUTOLOAD_ENV, "") in ("", "0")
    key = (tuple(sorted(no_plugins)), tuple(plugins), autoload)
    if key not in _registries:
        _registries[key] = _load(set(no_plugins), plugins, autoload)
    return _registries[key]


DEFAULT_TARGET = "trn2"


def resolve_target(name: str | None, reg: Registry) -> Target:
    """The registered target of that name (None: NEURON_PLATFORM_TARGET_OVERRIDE, else trn2)."""
    name = name or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or DEFAULT_TARGET
    name = GENERATION_NAMES.get(name, name)  # the vendor's generation names: gen2 trn1, gen3 trn2, gen4 trn3
    if name not in reg.targets:
        near = difflib.get_close_matches(name, list(reg.targets), n=1)
        raise NkiccError("E202", f"unknown target {name!r}", None,
                         f"did you mean {near[0]}?" if near else f"targets: {', '.join(sorted(reg.targets))}")
    return reg.targets[name]


def _load(no_plugins: set[str], plugins: tuple[str, ...], autoload: bool) -> Registry:
    pm = pluggy.PluginManager("nkicc")
    pm.add_hookspecs(hookspecs)
    pm.register(_Runner(), name="nkicc-runner")
    dist_of: dict[object, str] = {}
    for dist in importlib.metadata.distributions():
        eps = [ep for ep in dist.entry_points if ep.group == "nkicc"]
        if not eps:
            continue  # (its METADATA is not parsed: that costs ~3 ms a distribution, every process)
        dist_name = dist.metadata["Name"] or "?"
        for ep in eps:
            if ep.name in no_plugins or pm.get_plugin(ep.name) is not None:
                continue
            if not autoload and _normal(dist_name) != OWN_DISTRIBUTION:
                continue  # autoload off drops third-party plugins, never nkicc's own
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
            dist_of[plugin] = dist_name
    for modname in plugins:
        if modname in no_plugins:
            continue
        plugin = _import_plugin(modname)
        if pm.get_plugin(modname) is None:
            pm.register(plugin, name=modname)
            dist_of[plugin] = f"module {modname}"
    pm.check_pending()
    passes: dict[str, Pass] = {}
    provider: dict[str, str] = {}
    for impl in pm.hook.nkicc_passes.get_hookimpls():
        for p in impl.function() or ():
            if p.name in passes:
                raise NkiccError("E304", f"two plugins declare the pass {p.name!r}", None,
                                 "uninstall one of them or disable it with --no-plugin")
            passes[p.name] = p
            provider[p.name] = dist_of.get(impl.plugin, impl.plugin_name)
    targets: dict[str, Target] = {}
    for batch in pm.hook.nkicc_targets():
        for t in batch or ():
            targets[t.name] = t
    return Registry(pm, passes, provider, targets)


def _import_plugin(spec: str):
    """A plugin module given by import name (`devpass`, `pkg.devpass`) or by
    file (`./devpass.py`, `plugins/devpass.py`)."""
    hint = ("give an import name (the current folder is not on the import path: add its folder to "
            "PYTHONPATH) or the plugin's file, e.g. -p ./devpass.py")
    if not spec.strip():
        raise NkiccError("E303", "empty plugin module name", None, hint)
    if spec.endswith(".py") or "/" in spec or os.sep in spec:
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise NkiccError("E303", f"no plugin file {spec}", None, "give the path to a .py file")
        name = "nkicc_plugin_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(path)[0])
        module_spec = importlib.util.spec_from_file_location(name, path)
        try:
            plugin = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = plugin  # what dataclasses and pickling in the plugin look up
            module_spec.loader.exec_module(plugin)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise NkiccError("E303", f"importing plugin file {spec} raised {type(exc).__name__}: {exc}", None,
                             "fix the plugin") from None
        return plugin
    if spec.startswith("."):
        raise NkiccError("E303", f"plugin module {spec!r} is a relative import name", None, hint)
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise NkiccError("E303", f"cannot import plugin module {spec!r}: {exc}", None, hint) from None
    except Exception as exc:
        raise NkiccError("E303", f"importing plugin module {spec!r} raised {type(exc).__name__}: {exc}", None,
                         "fix the plugin") from None


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


# --- choosing and ordering ---------------------------------------------------------------

def _check_names(names, known: dict[str, Pass], flag: str) -> None:
    for n in names:
        if n == "all" and flag.startswith("--print"):
            continue
        if n not in known:
            near = difflib.get_close_matches(n, list(known), n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"known passes: {', '.join(sorted(known))}"
            raise NkiccError("E301", f"unknown pass {n!r} in {flag}", None, hint)


def select(options: PassOptions, reg: Registry) -> list[Pass]:
    known = reg.passes
    _check_names(options.enable, known, "--enable-pass")
    _check_names(options.disable, known, "--disable-pass")
    _check_names(options.print_ir_before, known, "--print-ir-before")
    _check_names(options.print_ir_after, known, "--print-ir-after")
    for n in options.disable:
        if known[n].required:
            raise NkiccError("E305", f"the pass {n!r} is required and cannot be disabled", None,
                             "drop it from --disable-pass")
    if options.opt_level not in (0, 1, 2, 3):
        raise NkiccError("E302", f"-O{options.opt_level} is not an optimisation level", None, "use -O0, -O1, -O2 or -O3")
    chosen = []
    for p in known.values():
        if p.required:
            on = True
        elif p.name in options.disable:
            on = False
        elif p.name in options.enable:
            on = True
        elif options.opt_level == 0:
            on = False
        elif options.opt_level == 3:
            on = p.default or p.cost == "body"
        else:
            on = p.default
        if on:
            chosen.append(p)
    return order(chosen)


def order(passes: list[Pass]) -> list[Pass]:
    """Topological order of the after/before constraints; ties by name."""
    names = {p.name: p for p in passes}
    preds: dict[str, set[str]] = {n: set() for n in names}
    for p in passes:
        preds[p.name] |= {a for a in p.after if a in names}
        for b in p.before:
            if b in names:
                preds[b].add(p.name)
    out: list[Pass] = []
    ready = sorted(n for n, s in preds.items() if not s)
    done: set[str] = set()
    while ready:
        n = ready.pop(0)
        out.append(names[n])
        done.add(n)
        for m, s in preds.items():
            if m not in done and m not in ready and n in s and s <= done:
                ready.append(m)
        ready.sort()
    if len(out) != len(passes):
        cycle = sorted(set(names) - done)
        raise NkiccError("E306", f"pass ordering constraints form a cycle among {cycle}", None,
                         "fix the after/before declarations of those passes")
    return out


# --- running ------------------------------------------------------------------------------

_LOOP_HEAD = tuple(f.name for f in dataclasses.fields(Loop) if f.name != "body")


class _Tokens:
    """Equal blocks get equal small tokens, at a cost linear in the blocks'
    own statements: a loop's body enters by its token, so no block is hashed
    all the way down (a frozen dataclass's hash is not cached: hashing each
    block of a nest as a whole costs its depth times the nest)."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[Block, int]] = {}  # id(block) -> (block, token); the block keeps the id
        self.by_form: dict[tuple, int] = {}

    def of(self, block: Block) -> int:
        known = self.by_id.get(id(block))
        if known is not None:
            return known[1]
        form = tuple((tuple(getattr(s, f) for f in _LOOP_HEAD), self.of(s.body)) if isinstance(s, Loop) else s
                     for s in block.stmts)
        token = self.by_form.setdefault(form, len(self.by_form))
        self.by_id[id(block)] = (block, token)
        return token


def run_region_pass(p: Pass, kernel: Kernel, ctx: PassContext) -> Kernel:
    """Apply a region pass to every block, innermost first. Identical bodies
    in identical loop contexts are transformed once."""
    decls = kernel.tensor_map()
    memo: dict = {}
    tokens = _Tokens()

    def walk(block: Block, loop: Loop | None, trips: dict[str, int]) -> Block:
        stmts = []
        for s in block.stmts:
            if isinstance(s, Loop):
                s = dataclasses.replace(s, body=walk(s.body, s, {**trips, s.var: s.trip}))
            stmts.append(s)
        new = Block(tuple(stmts))
        key = (tokens.of(new), loop.var if loop else None, tuple(sorted(trips.items())))
        out = memo.get(key)
        if out is None:
            out = memo[key] = run_region(p, new, Region(loop, trips, decls, kernel), ctx)  # through the cache
        return out

    return dataclasses.replace(kernel, body=walk(kernel.body, None, {}))


def physical_memory_mb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return 8192.0


class Budget:
    """Stops a compile that runs past its time or memory budget."""

    def __init__(self, seconds: float, memory_mb: float | None) -> None:
        self.seconds = seconds
        self.memory_mb = memory_mb if memory_mb is not None else physical_memory_mb() / 2
        self.start = time.perf_counter()
        self._last_check = 0.0
        self._last_draw = 0.0
        self.tty = sys.stderr.isatty()

    def check(self, pass_name: str, done: int = 0, total: int = 0, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last_check < 0.02:
            return
        self._last_check = now
        if now - self.start > self.seconds:
            raise BudgetExceeded(f"compile time budget of {self.seconds:g} s", pass_name, done, total)
        if current_rss_mb() > self.memory_mb:
            raise BudgetExceeded(f"compile memory budget of {self.memory_mb:.0f} MB", pass_name, done, total)
        if self.tty and total and now - self._last_draw > 0.1:
            self._last_draw = now
            frac = min(done / total, 1.0)
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{pass_name} [{bar:<30}] {done:,}/{total:,} ({frac:.0%})")
            sys.stderr.flush()

    def end_line(self) -> None:
        if self.tty and self._last_draw:
            sys.stderr.write("\n")
            self._last_draw = 0.0


@dataclass
class PipelineResult:
    kernel: Kernel
    timings: list[dict] = field(default_factory=list)
    warnings: list = field(default_factory=list)
    pipeline: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)


class PassCrash(Exception):
    """A pass raised something other than a diagnostic."""

    def __init__(self, pass_name: str, provider: str, error: BaseException, kernel, options, target: str) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.pass_name = pass_name
        self.provider = provider
        self.error = error
        self.kernel = kernel
        self.options = options
        self.target = target
        self.path: str | None = None

    def summary(self) -> str:
        return (f"internal error[E999] pass {self.pass_name!r} (from {self.provider}) crashed: "
                f"{type(self.error).__name__}: {self.error}")

    def traceback_text(self) -> str:
        return "".join(traceback.format_exception(self.error))


def run_pipeline(kernel: Kernel, options: PassOptions, reg: Registry, target: Target,
                 printer=print) -> PipelineResult:
    pipeline = select(options, reg)
    traced = kernel  # what a reproducer replays the whole pipeline on
    budget = Budget(options.max_compile_time, options.max_compile_memory_mb)
    result = PipelineResult(kernel, pipeline=[p.name for p in pipeline])
    check = _ResultCheck(kernel) if options.verify_each else None
    for p in pipeline:
        ctx = PassContext(target, {}, p.name, result.warnings, budget.check, result.notes)
        if "all" in options.print_ir_before or p.name in options.print_ir_before:
            printer(f"// ----- IR before {p.name} ----- //\n{format_kernel(kernel)}")
        ir_in = count_instructions(kernel).rolled
        rss0, peak0 = current_rss_mb(), peak_rss_mb()
        t0 = time.perf_counter()
        try:
            kernel = reg.manager.hook.nkicc_run_pass(pass_=p, ir=kernel, ctx=ctx)
            budget.check(p.name, force=True)
        except (NkiccError, BudgetExceeded):
            raise
        except Exception as exc:  # a bug in the pass, not in the kernel
            raise PassCrash(p.name, reg.provider.get(p.name, "?"), exc, traced, options, target.name) from exc
        finally:
            budget.end_line()
        if not isinstance(kernel, Kernel):
            raise NkiccError("E307", f"pass {p.name!r} returned {type(kernel).__name__}, not a Kernel", None,
                             f"report this to the provider of {p.name} ({reg.provider.get(p.name)})")
        seconds = time.perf_counter() - t0
        result.timings.append({
            "name": p.name, "s": round(seconds, 6),
            "mem_mb": round(max(peak_rss_mb() - peak0, current_rss_mb() - rss0, 0.0), 1),
            "ir_in": ir_in, "ir_out": count_instructions(kernel).rolled,
        })
        if "all" in options.print_ir_after or p.name in options.print_ir_after:
            printer(f"// ----- IR after {p.name} ----- //\n{format_kernel(kernel)}")
        if check is not None:
            check.after(p.name, kernel, reg.provider.get(p.name, "?"))
    result.kernel = kernel
    return result


class _ResultCheck:
    """--verify-each: run the reference simulator on random inputs before the
    pipeline and after every pass; the first pass that changes a result is
    named."""

    def __init__(self, kernel: Kernel) -> None:
        self.run = run_reference
        rng = np.random.default_rng(0)
        self.inputs = {}
        for name in kernel.args:
            d = kernel.tensor(name)
            self.inputs[name] = random_values(rng, d.dtype, d.shape, int_high=8)
        self.expected = self.run(kernel, self.inputs)

    def after(self, pass_name: str, kernel: Kernel, provider: str) -> None:
        try:
            got = self.run(kernel, self.inputs)
        except NkiccError as err:  # the program ran before this pass: the pass broke it
            raise NkiccError("E310", f"pass {pass_name!r} (from {provider}) broke the program: {err.one_line()}",
                             None, f"rerun with --disable-pass {pass_name} and report it to its provider") from None
        for name, want in self.expected.items():
            have = got.get(name)
            if have is None or have.shape != want.shape or not _close(have, want):
                raise NkiccError("E310", f"pass {pass_name!r} (from {provider}) changed the result of output {name}",
                                 None, f"rerun with --disable-pass {pass_name} and report it to its provider")


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    ok = ~np.isnan(a)
    return bool(np.allclose(a[ok], b[ok], rtol=1e-4, atol=1e-4 * (np.abs(b[ok]).max() if ok.any() else 0.0)))
