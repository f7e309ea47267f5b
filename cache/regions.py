"""The region level: a region-scoped pass looks its result up by the
canonical form of what it sees.

The key is the canonical region (ir.canon.region_form: the block, the
owning loop's header, the enclosing loop variables with their trip counts,
and the declarations of every tensor named there, with tensors, loop
variables and source locations renamed in order of first appearance; nested
bodies enter by their memoised summaries, so keying every block costs about
the size of the kernel) + the pass's name, version and provider + the context's options +
the base fingerprint (compiler, target, plugins, environment). The stored
value is the pass's output in canonical names; a hit maps it back through the
inverse renaming, so a body whose names or line numbers moved (an edit
elsewhere in the kernel) still hits and gets exactly its own names back.

The stored value is small: subtrees of the output that are objects of the
input (a child loop the pass left alone) are stored as references to their
position and taken from the current input on a hit.

The region level pays or steps aside: a region goes through the cache only
where the pass is expected to cost more on it than looking it up and storing
it. The expectation is the pass's measured seconds per statement (from every
earlier compile that used this cache folder, kept as counters
`cost.<pass>.s` and `cost.<pass>.stmts`) times the block's statements; the
lookup cost is the measured mean of earlier lookups (`cost.lookup.s` /
`cost.lookup.n`), the store cost the measured seconds per statement of
encoding entries (`cost.store.s` / `cost.store.stmts`). The same rule
decides what is looked up and what is stored, so that no entry is written
that no lookup would read (for a pass with no measurements yet, the rule is
applied with this compile's measurements once the pass has run on every
block). A pass cheaper than that (all of nkicc's built-in region passes)
just runs: such a region is counted as skipped, neither keyed nor stored.

A region is not stored (a bypass, counted with its reason) when its result
would not be exact under renaming: the output names a tensor, variable or
location the input did not have, the pass warned or wrote a note, the IR has
no exact form. The contract for region passes (docs/cache.md): the output
depends only on the block, the header of `region.loop` (not its body: the
block is the body as it stands), `region.trips`, the declarations of the
tensors the block names, `ctx.target` and `ctx.options`; names are compared
only for equality.
"""
from __future__ import annotations

import contextvars
import json
import time

from nkicc.ir import NotCanonical
from nkicc.ir.canon import Summaries, decode_output, encode_output, region_form
from nkicc.ir.serialize import Unserialisable

from . import keys
from .format import pack

_active: contextvars.ContextVar["RegionSession | None"] = contextvars.ContextVar("nkicc_region_cache", default=None)


def run_region(p, block, region, ctx):
    """Run region pass `p` on `block`, through the active cache session if any."""
    session = _active.get()
    if session is None:
        return p.run(block, region, ctx)
    return session.run(p, block, region, ctx)


DEFAULT_LOOKUP_S = 150e-6  # before any lookup was measured (docs/cache.md: 0.1-0.2 ms)
# before any store was measured: encoding and packing an entry, per statement of its block
# (docs/cache.md: about 5 us on the seeds' blocks)
DEFAULT_STORE_S_PER_STMT = 10e-6


class RegionSession:
    """Region lookups and pending stores for one compile. `costs`: the
    counters of earlier compiles (the `cost.*` ones are used)."""

    def __init__(self, store, base_key: dict, providers: dict, tag: str | None = None,
                 costs: dict | None = None) -> None:
        self.store = store
        self.base = keys.digest(base_key)
        self.providers = providers
        self.tag = tag
        self.hit = 0
        self.total = 0
        self.skipped = 0                # regions run without the cache: the pass is cheaper than a lookup
        self.saved_s = 0.0
        costs = costs or {}
        n = costs.get("cost.lookup.n", 0)
        self.lookup_s = costs["cost.lookup.s"] / n if n and costs.get("cost.lookup.s") else DEFAULT_LOOKUP_S
        stored = costs.get("cost.store.stmts", 0)
        self.store_s = (costs["cost.store.s"] / stored if stored and costs.get("cost.store.s")
                        else DEFAULT_STORE_S_PER_STMT)  # per statement
        self.rates = {}                 # pass -> seconds per statement, measured by earlier compiles
        for name, value in costs.items():
            if name.startswith("cost.") and name.endswith(".stmts") and value:
                p = name[len("cost."):-len(".stmts")]
                self.rates[p] = costs.get(f"cost.{p}.s", 0.0) / value
        self.measured: dict[str, float] = {}  # this compile's cost counters (written by finish)
        self._deferred: list[tuple] = []  # results of a pass with no measurements yet (see _settle)
        self.bypass: dict[str, int] = {}
        self.pending: list[tuple[str, bytes]] = []
        self.fresh: dict[str, tuple] = {}
        self.summaries = Summaries()
        self._token = None

    def __enter__(self) -> "RegionSession":
        self._token = _active.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _active.reset(self._token)
        if exc[0] is None:
            self._settle()
        self._deferred = []
        self.summaries.clear()

    def _bypass(self, why: str) -> None:
        self.bypass[why] = self.bypass.get(why, 0) + 1

    def _measure(self, name: str, value: float) -> None:
        self.measured[name] = self.measured.get(name, 0.0) + value

    def _pays(self, rate: float, stmts: int) -> bool:
        """Whether a region of `stmts` statements is worth the cache for a pass that costs `rate`
        seconds per statement: the pass costs more than looking the region up and storing it
        (an entry pays for itself at its first hit)."""
        return rate * stmts > self.lookup_s + self.store_s * stmts

    def _key(self, p, block, region, ctx):
        """(key, renaming) of the region for pass p, or None (a bypass, counted)."""
        try:
            canon, renaming = region_form(block, region.loop, region.trips, region.decls, self.summaries)
            options = dict(getattr(ctx, "options", None) or {})
            key = keys.make_key("region", {
                "base": self.base,
                "pass": [p.name, str(p.version), self.providers.get(p.name, "?")],
                "options": options,
                "region": canon,
            })
        except (NotCanonical, Unserialisable, TypeError, ValueError) as exc:
            self._bypass(f"no canonical form ({type(exc).__name__})")
            return None
        return key, renaming

    def run(self, p, block, region, ctx):
        self._settle(p.name)
        self.total += 1
        if getattr(p, "cacheable", True) is False:
            self._bypass("pass not cacheable")
            return p.run(block, region, ctx)
        stmts = max(len(block.stmts), 1)
        rate = self.rates.get(p.name)
        keyed = None
        if rate is not None and self._pays(rate, stmts):
            t0 = time.perf_counter()
            keyed = self._key(p, block, region, ctx)
            if keyed is None:
                return p.run(block, region, ctx)
            key, renaming = keyed
            found = self.fresh.get(key)  # a body equal up to names, compiled earlier in this compile
            if found is None and self.store is not None:
                found = self.store.get(key, "region")
            restored = None
            if found is not None:
                meta, _ = found
                try:
                    restored = decode_output(meta["out"], block, renaming)
                except (NotCanonical, KeyError, IndexError, TypeError, ValueError):
                    restored = None  # a well-formed entry that does not fit: corrupt
                    self.store.count("corrupt")
                    self.store.delete(key)
            self._measure("cost.lookup.s", time.perf_counter() - t0)
            self._measure("cost.lookup.n", 1)
            if restored is not None:
                self.hit += 1
                self.saved_s += float(meta.get("s", 0.0))
                return restored
        if keyed is None and rate is not None:  # cheaper than the cache by its own rule: no entry
            t0 = time.perf_counter()
            out = p.run(block, region, ctx)
            self._measure(f"cost.{p.name}.s", time.perf_counter() - t0)
            self._measure(f"cost.{p.name}.stmts", stmts)
            self.skipped += 1
            return out
        warnings = getattr(ctx, "_warnings", None)
        notes = getattr(ctx, "_notes", None)
        n_warn = len(warnings) if warnings is not None else 0
        notes_before = _snapshot(notes, p.name)  # (only where the result may be stored)
        t0 = time.perf_counter()
        out = p.run(block, region, ctx)
        seconds = time.perf_counter() - t0
        self._measure(f"cost.{p.name}.s", seconds)
        self._measure(f"cost.{p.name}.stmts", stmts)
        if warnings is not None and len(warnings) != n_warn:
            self._bypass("pass warned")
            return out
        if _snapshot(notes, p.name) != notes_before:
            self._bypass("pass wrote a note")
            return out
        if keyed is None:  # no measurements of this pass yet: decided once it has run on every block
            self._deferred.append((p, block, region, ctx, out, seconds, stmts))
            return out
        self._store(p, block, region, ctx, out, seconds, keyed)
        return out

    def _store(self, p, block, region, ctx, out, seconds: float, keyed=None) -> None:
        if keyed is None:
            keyed = self._key(p, block, region, ctx)
            if keyed is None:
                return
        key, renaming = keyed
        t0 = time.perf_counter()
        try:
            stored = encode_output(out, block, renaming, self.summaries)
            meta = {"s": round(seconds, 9), "pass": p.name, "out": stored}
            self.pending.append((key, pack("region", key, meta)))
            self.fresh[key] = (json.loads(json.dumps(meta)), None)  # as a stored entry reads back
            self._measure("cost.store.s", time.perf_counter() - t0)
            self._measure("cost.store.stmts", max(len(block.stmts), 1))
        except NotCanonical:
            self._bypass("output names something new")
        except (Unserialisable, TypeError, ValueError, AttributeError):
            self._bypass("output has no exact form")

    def _settle(self, running: str | None = None) -> None:
        """The stores of a pass that had no measurements, once it ran on every
        block: by the rule later lookups will use (its seconds per statement,
        measured now, times the block's statements above the lookup cost), so
        that what is stored is what they will look for."""
        if not self._deferred or self._deferred[0][0].name == running:
            return
        items, self._deferred = self._deferred, []
        rate = sum(i[5] for i in items) / max(sum(i[6] for i in items), 1)
        for p, block, region, ctx, out, seconds, stmts in items:
            if self._pays(rate, stmts):
                self._store(p, block, region, ctx, out, seconds)
            else:
                self.skipped += 1

    def report(self) -> dict:
        return {"regions_hit": self.hit, "regions_total": self.total, "regions_skipped": self.skipped}


def _snapshot(notes, name: str) -> str | None:
    if notes is None:
        return None
    mine = notes.get(name)
    if mine is None:
        return None
    try:
        return json.dumps(mine, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(mine)
