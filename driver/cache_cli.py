"""`nkicc cache stats|clear|prune|path`: the compile cache from the command line."""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from .cache.keys import fingerprint_tag
from .cache.store import Store, default_directory, parse_size, size_from_env, warn_once
from .cached import remote_factory
from .passes import registry

cache_app = typer.Typer(
    help="The compile cache: where it is, what it did, clearing and pruning it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _directory() -> str:
    return default_directory()


def _open(create: bool = False):
    d = _directory()
    if not create and not os.path.isdir(d):
        return None
    store = Store(d, size_from_env())
    if not store.usable:
        typer.echo(f"error: the cache at {d} cannot be used ({store.off})", err=True)
        raise typer.Exit(1)
    return store


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def collect_stats() -> dict:
    """Counters plus what is in the store now (JSON-able)."""
    store = _open()
    counters = {} if store is None else store.counters.read()
    out = {
        "path": _directory(),
        "entries": 0 if store is None else store.entry_count(),
        "bytes": 0 if store is None else store.volume(),
        "size_limit": size_from_env(),
        "source": {k: int(counters.get(f"source.{k}", 0)) for k in ("hit", "miss", "bypass")},
        "kernel": {k: int(counters.get(f"kernel.{k}", 0)) for k in ("hit", "miss", "bypass")},
        "region": {k: int(counters.get(f"region.{k}", 0)) for k in ("hit", "miss", "bypass", "skipped")},
        "bypass_reasons": {
            level: {name[len(f"{level}.bypass."):]: int(v) for name, v in sorted(counters.items())
                    if name.startswith(f"{level}.bypass.")}
            for level in ("source", "kernel", "region")
        },
        "evictions": int(counters.get("evictions", 0)),
        "pruned": int(counters.get("pruned", 0)),
        "corrupt": int(counters.get("corrupt", 0)),
        "stores": int(counters.get("stores", 0)),
        "store_errors": int(counters.get("store_errors", 0)),
        "compiles": int(counters.get("compiles", 0)),
        "saved_s": round(float(counters.get("saved_s", 0.0)), 6),
    }
    out["local"] = {"hits": int(counters.get("local.hit", 0)), "misses": int(counters.get("local.miss", 0)),
                    "entries": out["entries"], "bytes": out["bytes"],
                    "errors": out["corrupt"] + out["store_errors"]}
    out["remote"] = _remote_stats(counters)
    if store is not None:
        store.close()
    return out


# stats name -> counter name (remote.*)
REMOTE_COUNTERS = {"hits": "hit", "misses": "miss", "refused": "refused", "corrupt": "corrupt", "errors": "errors",
                   "written": "stores", "written_back": "backfills"}


def _remote_stats(counters: dict) -> dict | None:
    """The shared tier: this machine's counters, and what the tier holds now
    (when NKICC_REMOTE_CACHE names one); None when there is neither."""
    from .cache.remote import open_tier, redact, url_from_env  # start-up: ~10 ms, for `cache stats` only

    url = url_from_env()
    mine = {k: int(counters.get(f"remote.{c}", 0)) for k, c in REMOTE_COUNTERS.items()}
    if url is None and not any(mine.values()):
        return None
    out = {"url": None if url is None else redact(url), **mine}
    if url is not None:
        tier = open_tier(url, remote_factory(registry().manager), warn_once, lambda name, n=1: None)
        if tier is None:
            out["error"] = "cannot be used (see the warning)"
        else:
            out.update(tier.usage())
            tier.close()
    return out


@cache_app.command("path")
def path_cmd():
    """Print the cache folder ($NKICC_CACHE_DIR, or the user cache folder)."""
    typer.echo(_directory())


@cache_app.command("stats")
def stats_cmd(as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON"),
              remote_cache: Optional[str] = typer.Option(None, "--remote-cache", metavar="URL",
                                                         help="The shared tier to show (default $NKICC_REMOTE_CACHE)")):
    """Hits and misses per level and per tier, bypasses with reasons, evictions, corrupt entries, bytes used,
    time saved."""
    if remote_cache:
        from .cache.remote import URL_ENV  # start-up: ~10 ms, for `cache stats` only
        os.environ[URL_ENV] = remote_cache
    s = collect_stats()
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    typer.echo(f"cache {s['path']}: {s['entries']} entries, {_bytes(s['bytes'])} of {_bytes(s['size_limit'])}")
    for level in ("source", "kernel", "region"):
        c = s[level]
        looked = c["hit"] + c["miss"]
        rate = f" ({100 * c['hit'] / looked:.0f}% of lookups hit)" if looked else ""
        skipped = f", {c['skipped']} run without it (cheaper than a lookup)" if "skipped" in c else ""
        typer.echo(f"  {level} level: {c['hit']} hits, {c['miss']} misses, {c['bypass']} bypasses{skipped}{rate}")
        for why, n in s["bypass_reasons"][level].items():
            typer.echo(f"    bypass {why}: {n}")
    typer.echo(f"  evictions: {s['evictions']}, pruned: {s['pruned']}, corrupt entries: {s['corrupt']}, "
               f"entries written: {s['stores']}, write errors: {s['store_errors']}")
    typer.echo(f"  compiles: {s['compiles']}, compile time saved: {s['saved_s']:.3f} s")
    t = s["local"]
    typer.echo(f"  local tier: {t['hits']} hits, {t['misses']} misses, {t['entries']} entries, {_bytes(t['bytes'])}, "
               f"{t['errors']} errors")
    r = s["remote"]
    if r is not None:
        held = (f"{r['entries']} entries, {_bytes(r['bytes'])}" if "entries" in r
                else f"unreachable ({r['error']})" if "error" in r else "size unknown")
        typer.echo(f"  remote tier {r['url'] or '(none configured now)'}: {r['hits']} hits, {r['misses']} misses, "
                   f"{held}; {r['refused']} refused, {r['corrupt']} corrupt, {r['errors']} errors; "
                   f"{r['written']} written, {r['written_back']} written back locally")


@cache_app.command("clear")
def clear_cmd():
    """Remove every entry and reset the statistics."""
    store = _open()
    if store is None:
        typer.echo(f"cache {_directory()} is empty")
        return
    n = store.clear()
    store.close()
    typer.echo(f"removed {n} entries from {_directory()}")


@cache_app.command("prune")
def prune_cmd(max_size: Optional[str] = typer.Option(None, "--max-size",
                                                     help="Evict least recently used entries down to this size, e.g. 500MB")):
    """Drop entries an older nkicc wrote (they can never hit again) and entries that do not read back,
    then evict least recently used entries down to the size limit."""
    try:
        limit = parse_size(max_size) if max_size is not None else None
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    store = _open()
    if store is None:
        typer.echo(f"cache {_directory()} is empty")
        return
    out = store.prune(fingerprint_tag(), limit)
    left, used = store.entry_count(), store.volume()
    store.close()
    typer.echo(f"pruned {_directory()}: {out['stale']} from other nkicc builds, {out['corrupt']} corrupt, "
               f"{out['evicted']} evicted; {left} entries, {_bytes(used)} left")
