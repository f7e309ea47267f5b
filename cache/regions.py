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


class RegionSession:
    """Region lookups and pending stores for one compile."""

    def __init__(self, store, base_key: dict, providers: dict, tag: str | None = None) -> None:
        self.store = store
        self.base = keys.digest(base_key)
        self.providers = providers
        self.tag = tag
        self.hit = 0
        self.total = 0
        self.saved_s = 0.0
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
        self.summaries.clear()

    def _bypass(self, why: str) -> None:
        self.bypass[why] = self.bypass.get(why, 0) + 1

    def run(self, p, block, region, ctx):
        self.total += 1
        if getattr(p, "cacheable", True) is False:
            self._bypass("pass not cacheable")
            return p.run(block, region, ctx)
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
            return p.run(block, region, ctx)
        found = self.fresh.get(key)  # a body equal up to names, compiled earlier in this compile
        if found is None and self.store is not None:
            found = self.store.get(key, "region")
        if found is not None:
            meta, _ = found
            try:
                restored = decode_output(meta["out"], block, renaming)
            except (NotCanonical, KeyError, IndexError, TypeError, ValueError):
                restored = None  # a well-formed entry that does not fit: corrupt
                self.store.count("corrupt")
                self.store.delete(key)
            if restored is not None:
                self.hit += 1
                self.saved_s += float(meta.get("s", 0.0))
                return restored
        warnings = getattr(ctx, "_warnings", None)
        notes = getattr(ctx, "_notes", None)
        n_warn = len(warnings) if warnings is not None else 0
        notes_before = _snapshot(notes, p.name)
        t0 = time.perf_counter()
        out = p.run(block, region, ctx)
        seconds = time.perf_counter() - t0
        if warnings is not None and len(warnings) != n_warn:
            self._bypass("pass warned")
            return out
        if _snapshot(notes, p.name) != notes_before:
            self._bypass("pass wrote a note")
            return out
        try:
            stored = encode_output(out, block, renaming, self.summaries)
            meta = {"s": round(seconds, 9), "pass": p.name, "out": stored}
            self.pending.append((key, pack("region", key, meta)))
            self.fresh[key] = (json.loads(json.dumps(meta)), None)  # as a stored entry reads back
        except NotCanonical:
            self._bypass("output names something new")
        except (Unserialisable, TypeError, ValueError, AttributeError):
            self._bypass("output has no exact form")
        return out

    def report(self) -> dict:
        return {"regions_hit": self.hit, "regions_total": self.total}


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
