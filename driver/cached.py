"""Compiling through the cache (nkicc.cache): the source level before the
trace, the kernel level around the pass pipeline, the region level inside it
(passes.run_region_pass).

    plan = CachePlan.prepare(options, reg, target, cache=..., unroll=...)   # opens the store
    warm = plan.warm(fn, specs, constants, name, grid, program)  # source hit: (result, trace), no trace
    pipeline = plan.pipeline(kernel, printer, trace)     # hit: the stored result; miss: run + store
    report["cache"] = plan.finish()               # counters, the report's cache section
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import sqlite3
import time

from .cache import env, keys, source
from .cache.format import pack
from .cache.regions import RegionSession
from .cache.store import Store, enabled_by_env, open_store
from .ir import Kernel, Loc, Loop, NkiccError, NotCanonical, count_instructions, count_loops, exact_hash
from .ir.serialize import Unserialisable
from .passes import PassOptions, PipelineResult, Registry, registry, resolve_target, run_pipeline, select
from .language.kernel_trace import TraceResult

_bases: dict[tuple, tuple] = {}


def _base(reg: Registry, target) -> tuple[dict, str]:
    """The part of every key shared by a registry and target (once per process)."""
    k = (id(reg.manager), target)
    m = _bases.get(k)
    if m is None or m[0] is not reg.manager:  # (the manager is kept, so its id is not reused)
        m = _bases[k] = (reg.manager, keys.base(target, reg.manager, reg.provider), keys.fingerprint_tag())
    _, base, tag = m
    return {**base, "env": env.key_values()}, tag  # the environment is read at every compile


MAX_STORED_STATEMENTS = 20_000  # a fully unrolled kernel is not worth storing (nor encoding)


def _too_big(kernel: Kernel) -> bool:
    n = 0
    stack = [kernel.body]
    while stack:
        b = stack.pop()
        n += len(b.stmts)
        if n > MAX_STORED_STATEMENTS:
            return True
        stack.extend(s.body for s in b.stmts if type(s) is Loop)
    return False


def _warning_json(w) -> list:
    loc = getattr(w, "loc", None)
    return [getattr(w, "code", "W000"), getattr(w, "message", str(w)),
            None if loc is None else [loc.file, loc.line], getattr(w, "hint", "")]


def _warning_from_json(d) -> NkiccError:
    code, message, loc, hint = d
    return NkiccError(code, message, None if loc is None else Loc(loc[0], loc[1]), hint)


@contextlib.contextmanager
def cycle_collection_paused():
    """No cyclic garbage collection inside. A trace, a pass pipeline or a cache lookup makes
    hundreds of thousands of small objects, nearly all acyclic (reference counting frees them),
    and each collection they trigger scans the process's whole heap (torch's and a test suite's
    included): a third of the library attention block's compile. Cycles made inside are
    collected after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def remote_factory(manager):
    """url -> the shared tier's backend from the `nkicc_cache_backend` hook,
    asking only the implementations that take `remote` (an older one would
    answer with its local backend)."""
    def factory(url):
        local_only = [impl.plugin for impl in manager.hook.nkicc_cache_backend.get_hookimpls()
                      if "remote" not in impl.argnames]
        caller = manager.subset_hook_caller("nkicc_cache_backend", local_only)
        return caller(directory=None, size_limit=None, remote=url)
    return factory


class CachePlan:
    def __init__(self, options: PassOptions, reg: Registry, target, store: Store | None, why_not: str | None,
                 unroll: bool) -> None:
        self.options = options
        self.reg = reg
        self.target = target
        self.store = store
        self.why_not = why_not        # a kernel-level bypass reason, or None
        self.unroll = unroll
        self.dialect: str | None = None  # an NKI dialect chosen for the trace (api.compile(dialect=))
        self.kernel = "bypass"
        self.tier: str | None = None  # the tier a kernel hit came from
        self.saved_s = 0.0
        self.session: RegionSession | None = None
        self.source = "bypass"          # the source level: hit, miss or bypass
        self.source_why: str | None = None
        self.source_key: str | None = None
        self.files: list[str] = []      # the files of the walked functions (source.fingerprint)
        self.meets = False  # the source level knows this launch's programs meet (remember_meets)

    @staticmethod
    def prepare(options: PassOptions, reg: Registry, target, cache: bool | None = None,
                unroll: bool = False) -> "CachePlan":
        if cache is False:
            return CachePlan(options, reg, target, None, "disabled (--no-cache)", unroll)
        if not enabled_by_env():
            return CachePlan(options, reg, target, None, "disabled (NKICC_CACHE=0)", unroll)

        def backend(directory, size_limit):
            return reg.manager.hook.nkicc_cache_backend(directory=directory, size_limit=size_limit, remote=None)

        store = open_store(backend_factory=backend if reg.manager.hook.nkicc_cache_backend.get_hookimpls() else None,
                           remote_factory=remote_factory(reg.manager))
        if not store.usable:
            return CachePlan(options, reg, target, None, "cache unusable", unroll)
        _base(reg, target)  # the compiler's fingerprint, once per process (like loading the plugins)
        why = None
        if options.print_ir_before or options.print_ir_after:
            why = "print-ir"
        elif options.time_passes:
            why = "time-passes"
        elif options.verify_each:
            why = "verify-each"
        return CachePlan(options, reg, target, store, why, unroll)

    # --- the compile -----------------------------------------------------------------------

    def pipeline(self, kernel: Kernel, printer=print, trace: TraceResult | None = None) -> PipelineResult:
        store = self.store
        if store is None:
            return run_pipeline(kernel, self.options, self.reg, self.target, printer)
        base, tag = _base(self.reg, self.target)
        with cycle_collection_paused():
            key = self._key(kernel, base)
            found = self._lookup(key) if key is not None else None
        if found is not None:
            if trace is not None:
                store.put_many(self._source_entry(key, trace), tag=tag)
            return found
        self.session = RegionSession(store, base, dict(self.reg.provider), tag, costs=self._costs())
        t0 = time.perf_counter()
        with self.session:
            result = run_pipeline(kernel, self.options, self.reg, self.target, printer)
        seconds = time.perf_counter() - t0
        entries = list(self.session.pending)
        if key is not None:
            try:
                if _too_big(result.kernel):
                    raise ValueError("too big")
                meta = {"s": round(seconds, 9), "passes": result.timings,
                        "warnings": [_warning_json(w) for w in result.warnings],
                        "pipeline": result.pipeline, "notes": result.notes}
                entries.append((key, pack("kernel", key, meta, result.kernel)))
                if trace is not None:
                    entries += self._source_entry(key, trace)
            except (Unserialisable, TypeError, ValueError) as exc:
                self.why_not = "result too big to store" if str(exc) == "too big" else "result has no exact form"
                self.kernel = "bypass"
        store.put_many(entries, tag=tag)
        store.cull()
        self.saved_s = self.session.saved_s
        return result

    # --- the source level --------------------------------------------------------------------

    def warm(self, fn, specs: dict, constants: dict, name: str | None, grid: tuple[int, ...] | None,
             program: tuple[int, ...] | None = None) -> tuple[PipelineResult, TraceResult] | None:
        """The stored result for what the trace would read, without tracing;
        None: trace (and `pipeline` stores the mapping for next time)."""
        if self.store is None or self.why_not is not None:
            self.source_why = self.why_not or "cache off"
            return None
        base, _ = _base(self.reg, self.target)
        with cycle_collection_paused():
            return self._warm(fn, specs, constants, name, grid, program, base)

    def _warm(self, fn, specs, constants, name, grid, program, base):
        t0 = time.perf_counter()
        try:
            what, self.files = source.fingerprint(fn, constants)
            self.source_key = keys.make_key("source", {
                **self._compile_parts(base), "source": what, "name": name,
                "grid": list(grid) if grid else None, "program": list(program) if program else None,
                "specs": [[k, str(v)] for k, v in specs.items()]})
        except source.Incomplete as exc:
            self.source_why = f"incomplete: {exc}"
            return None
        except (TypeError, ValueError) as exc:
            self.source_why = f"incomplete: {type(exc).__name__}"
            return None
        self.source = "miss"
        found = self.store.get(self.source_key, "source")
        if found is None:
            return None
        meta, _ = found
        if meta.get("meets") is True:
            self.source = "hit"
            self.meets = True
            return None
        try:
            t = meta["trace"]
            stored_files = list(meta["files"])
            kernel_key = str(meta["kernel"])
            if len(stored_files) != len(self.files):
                raise ValueError("files")
            trace = TraceResult(None, int(t["attempts"]), 0.0, dict(t["loops"]), dict(t["decisions"]),
                                [_warning_from_json(w) for w in t["warnings"]])
            counts = [int(n) for n in t["counts"]]
            static_loops = int(t["static_loops"])
            traced_s = float(t["s"])
        except (KeyError, TypeError, ValueError):
            self.store.count("corrupt")
            self.store.delete(self.source_key)
            return None
        result = self._lookup(kernel_key)
        if result is None:  # the kernel entry is gone: trace, and both are stored again
            self.kernel = "bypass"
            return None
        moved = {old: new for old, new in zip(stored_files, self.files) if old != new}
        if moved:  # the same code in another file (a restarted notebook): point at it
            result.kernel = source.relocate(result.kernel, moved)
            for w in result.warnings + trace.warnings:  # (fresh objects, read from the entries)
                if getattr(w, "loc", None) is not None and w.loc.file in moved:
                    w.loc = Loc(moved[w.loc.file], w.loc.line)
            trace.decisions = {k: {_moved(s, moved): v for s, v in d.items()} for k, d in trace.decisions.items()}
            names = {**moved, **{os.path.basename(a): os.path.basename(b) for a, b in moved.items()}}
            result.notes = json.loads(_moved(json.dumps(result.notes), names))
        trace.counts = counts
        trace.static_loops = static_loops
        self.source = "hit"
        self.saved_s = max(self.saved_s + traced_s - (time.perf_counter() - t0), 0.0)
        return result, trace

    def _source_entry(self, kernel_key: str, trace: TraceResult) -> list[tuple[str, bytes]]:
        if self.source_key is None or trace.kernel is None:
            return []
        counts = count_instructions(trace.kernel)
        meta = {"kernel": kernel_key, "files": self.files, "trace": {
            "attempts": trace.attempts, "s": round(trace.seconds, 9), "loops": trace.loops,
            "decisions": trace.decisions, "warnings": [_warning_json(w) for w in trace.warnings],
            "counts": [counts.rolled, counts.unrolled, counts.executed],
            "static_loops": count_loops(trace.kernel.body)["static"]}}
        try:
            return [(self.source_key, pack("source", self.source_key, meta))]
        except (TypeError, ValueError):
            return []

    def remember_meets(self) -> None:
        """Store that this launch's programs meet other cores, so that they are traced one
        program at a time (api._compile): the next compile skips the grid's own trace."""
        if self.store is None or self.source_key is None:
            return
        _, tag = _base(self.reg, self.target)
        try:
            self.store.put_many([(self.source_key, pack("source", self.source_key, {"meets": True,
                                                                                    "files": self.files}))], tag=tag)
        except (TypeError, ValueError):
            pass

    # --- the kernel level --------------------------------------------------------------------

    def _compile_parts(self, base: dict) -> dict:
        """What both the source and the kernel key hold besides the kernel."""
        parts = {**base, "options": self.options.cache_key(), "unroll": bool(self.unroll),
                 "passes": [[p.name, str(p.version), p.scope, self.reg.provider.get(p.name, "?")]
                            for p in select(self.options, self.reg)]}
        if self.dialect is not None:
            parts["dialect"] = self.dialect
        return parts

    def _costs(self) -> dict:
        """The counters (the region level reads the passes' measured costs from them)."""
        counters = getattr(self.store, "counters", None)
        if counters is None:
            return {}
        try:
            return counters.read()
        except (OSError, sqlite3.Error):  # advisory: a broken stats file costs the region level, not the compile
            return {}

    def _key(self, kernel: Kernel, base: dict) -> str | None:
        if self.why_not is not None:
            return None
        try:
            return keys.make_key("kernel", {**self._compile_parts(base), "ir": exact_hash(kernel)})
        except (Unserialisable, NotCanonical, TypeError, ValueError):
            self.why_not = "IR has no exact form"
            return None

    def _lookup(self, key: str) -> PipelineResult | None:
        t0 = time.perf_counter()
        self.kernel = "miss"
        found = self.store.get(key, "kernel")
        if found is None:
            return None
        meta, ir = found
        try:
            if not isinstance(ir, Kernel):
                raise TypeError("not a kernel")
            result = PipelineResult(ir, list(meta["passes"]), [_warning_from_json(w) for w in meta["warnings"]],
                                    list(meta["pipeline"]), dict(meta["notes"]))
        except (KeyError, TypeError, ValueError):
            self.store.count("corrupt")
            self.store.delete(key)
            return None
        self.kernel = "hit"
        self.tier = self.store.last_tier
        self.saved_s = max(float(meta.get("s", 0.0)) - (time.perf_counter() - t0), 0.0)
        return result

    def finish(self) -> dict:
        """The report's cache section; writes this compile's counters."""
        s = self.session
        info = {"kernel": self.kernel, "regions_hit": s.hit if s else 0, "regions_total": s.total if s else 0,
                "regions_skipped": s.skipped if s else 0, "saved_s": round(self.saved_s, 6), "source": self.source}
        if self.kernel == "bypass":
            info["reason"] = self.why_not or "?"
        if self.source == "bypass" and self.source_why and self.source_why != info.get("reason"):
            info["source_reason"] = self.source_why
        if self.kernel == "hit":
            info["tier"] = self.tier  # local or remote (the shared tier; docs/scale-out.md)
        store = self.store
        if store is not None:
            store.touch_read()
            store.count("compiles")
            store.count(f"kernel.{self.kernel}")
            store.count(f"source.{self.source}")
            if self.source == "bypass" and self.source_why and self.source_why.startswith("incomplete"):
                store.count("source.bypass.incomplete")
            if self.kernel == "bypass":
                store.count(f"kernel.bypass.{info['reason']}")
            if s is not None:
                bypassed = sum(s.bypass.values())
                store.count("region.hit", s.hit)
                store.count("region.miss", s.total - s.hit - bypassed - s.skipped)
                store.count("region.skipped", s.skipped)
                store.count("region.bypass", bypassed)
                for name, value in s.measured.items():
                    store.count(name, value)
                for why, n in s.bypass.items():
                    store.count(f"region.bypass.{why}", n)
            store.count("saved_s", self.saved_s)
            store.flush()
        return info


def _moved(text: str, moved: dict[str, str]) -> str:
    for old, new in moved.items():
        text = text.replace(old, new)
    return text


def kernel_key(kernel: Kernel, options: PassOptions | None = None, reg: Registry | None = None, target=None,
               unroll: bool = False) -> str | None:
    """The kernel-level cache key of a traced kernel (None: it has none)."""
    options = PassOptions.coerce(options)
    reg = reg or registry(options.no_plugins, options.plugins)
    target = target or resolve_target(options.target, reg)
    plan = CachePlan(options, reg, target, None, None, unroll)
    return plan._key(kernel, _base(reg, target)[0])
