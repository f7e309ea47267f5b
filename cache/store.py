"""The store: a diskcache.Cache (or a backend from the `nkicc_cache_backend`
hook) holding nkicc-format bytes under str keys, plus the counters, plus
optionally a shared tier behind it (nkicc.cache.remote: a lookup that misses
here asks it, a hit there is written back here, new entries go to both).

Never fatal: a store that cannot be opened or written (read-only folder, full
disk, broken database) turns itself off with one warning and the compile goes
on without it; a corrupt entry is a miss, is evicted and is counted.
"""
from __future__ import annotations

import os
import re
import sqlite3
import sys
import threading
import time

from .format import CorruptEntry, pack, unpack
from .keys import fingerprint_tag
from .stats import Counters

DEFAULT_SIZE = 2 * 2**30  # 2 GiB
EVICTION = "least-recently-used"
KINDS = ("kernel", "region", "source")
PROBE = "nkicc-probe"  # the one key that is not an entry (written when a store opens)
OFF_VALUES = ("0", "false", "no", "off")

_warned: set[str] = set()
_lock = threading.Lock()


def enabled_by_env() -> bool:
    return os.environ.get("NKICC_CACHE", "1").strip().lower() not in OFF_VALUES


def default_directory() -> str:
    """$NKICC_CACHE_DIR, else the platform's user cache folder + /nkicc."""
    d = os.environ.get("NKICC_CACHE_DIR")
    if d:
        return os.path.abspath(os.path.expanduser(d))
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    elif os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~/AppData/Local")
        return os.path.join(base, "nkicc", "Cache")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "nkicc")


_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}


def parse_size(text: str | int | None) -> int:
    """'500MB', '2GiB', '1.5G', '1048576' -> bytes (K/M/G are powers of 1024)."""
    if text is None or text == "":
        return DEFAULT_SIZE
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"cannot read cache size {text!r}: write e.g. 500MB or 2GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def size_from_env() -> int:
    try:
        return parse_size(os.environ.get("NKICC_CACHE_SIZE"))
    except ValueError as exc:
        warn_once("size", f"NKICC_CACHE_SIZE: {exc}; using 2GiB")
        return DEFAULT_SIZE


def warn_once(what: str, message: str, code: str = "W501") -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    sys.stderr.write(f"warning[{code}] {message}\n")
    sys.stderr.flush()


def kind_of(key: str) -> str | None:
    for kind in KINDS:
        if key.startswith(f"nkicc-{kind}-"):
            return kind
    return None


# errors a backend raises when the disk or database is unusable
_STORE_ERRORS = (OSError, sqlite3.Error)


class UnsafeEntry(Exception):
    """An entry that is not plain bytes under a str key (diskcache would
    unpickle it): never read, treated as corrupt."""


def bytes_only_disk():
    """A diskcache Disk that stores and returns only bytes under str keys and
    refuses to unpickle anything, so a shared cache cannot run code."""
    import diskcache
    from diskcache.core import MODE_BINARY, MODE_RAW

    class BytesDisk(diskcache.Disk):
        def put(self, key):
            if type(key) is not str:
                raise UnsafeEntry(f"cache keys are str, not {type(key).__name__}")
            return super().put(key)

        def get(self, key, raw):
            if not raw:
                raise UnsafeEntry("a pickled key")
            return super().get(key, raw)

        def store(self, value, read, key=diskcache.core.UNKNOWN):
            if type(value) is not bytes:
                raise UnsafeEntry(f"cache values are bytes, not {type(value).__name__}")
            return super().store(value, read, key=key)

        def fetch(self, mode, filename, value, read):
            if mode not in (MODE_RAW, MODE_BINARY):
                raise UnsafeEntry(f"an entry stored in diskcache mode {mode} (not raw bytes)")
            return super().fetch(mode, filename, value, read)

    return BytesDisk


def _timeout_types() -> tuple:
    try:
        import diskcache
        return (diskcache.Timeout,)
    except ImportError:  # pragma: no cover
        return ()


class Store:
    """One cache directory. `get` and `put_many` never raise for a broken
    store; they turn the store off (`self.off` says why) and warn once."""

    def __init__(self, directory: str, size_limit: int = DEFAULT_SIZE, backend=None) -> None:
        self.directory = directory
        self.size_limit = size_limit
        self.off: str | None = None
        self.pending: dict[str, float] = {}
        self._read_rows: list[int] = []
        self.remote = None              # a nkicc.cache.remote.RemoteTier (open_store sets it)
        self.last_tier: str | None = None  # which tier the last `get` hit: "local", "remote" or None
        self._backfill: list[tuple[str, bytes]] = []  # remote hits, written here after the compile
        self._timeouts = _timeout_types()
        try:
            os.makedirs(directory, exist_ok=True)
            if backend is None:
                import diskcache
                backend = diskcache.Cache(directory, size_limit=size_limit, eviction_policy=EVICTION,
                                          cull_limit=0, statistics=False, tag_index=False, disk=bytes_only_disk())
            self.backend = backend
            self.counters = Counters(directory)
            self.counters._db()
            # one read and one write now: an unreadable or unwritable store
            # shows up here, and the first lookup and the first write of a
            # compile do not pay for priming the connection (SQLite syncs the
            # write-ahead log on the first commit of a connection)
            try:
                backend.get(PROBE)
            except UnsafeEntry:
                pass  # overwritten next
            backend.set(PROBE, b"")
        except Exception as exc:  # anything: the compile must go on
            self.backend = None
            self.counters = None
            self._turn_off(f"cannot open: {type(exc).__name__}: {exc}")

    # --- state ---------------------------------------------------------------------------

    def _turn_off(self, why: str) -> None:
        self.off = why
        warn_once(f"off:{self.directory}", f"compile cache at {self.directory} is unusable ({why}); "
                                           "compiling without it (set NKICC_CACHE_DIR, or NKICC_CACHE=0)")

    @property
    def usable(self) -> bool:
        return self.off is None

    def count(self, name: str, value: float = 1) -> None:
        self.pending[name] = self.pending.get(name, 0) + value

    def flush(self) -> None:
        """Write the pending counters (one transaction)."""
        if not self.pending:
            return
        deltas, self.pending = self.pending, {}
        if self.counters is None:
            return
        try:
            self.counters.add(deltas)
        except _STORE_ERRORS as exc:
            self._turn_off(f"cannot update its statistics: {type(exc).__name__}: {exc}")

    # --- entries -------------------------------------------------------------------------

    def _read(self, key: str):
        """The bytes under `key`, or None. On a diskcache.Cache, a plain
        SELECT: the least-recently-used bookkeeping (a write) is deferred to
        `touch_read`, after the compile."""
        b = self.backend
        disk, sql = getattr(b, "_disk", None), getattr(b, "_sql", None)
        if disk is None or sql is None:
            return b.get(key)
        db_key, raw = disk.put(key)
        rows = sql("SELECT rowid, mode, filename, value FROM Cache WHERE key = ? AND raw = ?"
                   " AND (expire_time IS NULL OR expire_time > ?)", (db_key, raw, time.time())).fetchall()
        if not rows:
            return None
        (rowid, mode, filename, value), = rows
        try:
            blob = disk.fetch(mode, filename, value, False)
        except IOError:  # deleted meanwhile
            return None
        self._read_rows.append(rowid)
        return blob

    def touch_read(self) -> None:
        """Mark what `get` read as just used (least-recently-used eviction);
        write back what the shared tier served."""
        if self._backfill:
            items, self._backfill = self._backfill, []
            self.count("remote.backfills", self._put_local(items, fingerprint_tag()))
            self.cull()  # the size limit holds for written-back entries too
        rows, self._read_rows = self._read_rows, []
        if not rows or self.off is not None:
            return
        try:
            with self.backend.transact():
                self.backend._sql("UPDATE Cache SET access_time = ? WHERE rowid IN (%s)" % ",".join("?" * len(rows)),
                                  (time.time(), *rows))
        except self._timeouts:
            pass
        except _STORE_ERRORS as exc:
            self._turn_off(f"cannot write: {type(exc).__name__}: {exc}")

    def get(self, key: str, kind: str):
        """(meta, ir) for a good entry, None for a miss: the local tier, then
        the shared one (whose hit is written back here by `touch_read`)."""
        if self.off is not None:
            return None
        found = self._get_local(key, kind)
        self.count("local.hit" if found is not None else "local.miss")
        self.last_tier = "local" if found is not None else None
        if found is None and self.remote is not None:
            got = self.remote.get(key, kind)
            if got is not None:
                meta, ir, entry = got
                self._backfill.append((key, entry))
                self.last_tier = "remote"
                return meta, ir
        return found

    def _get_local(self, key: str, kind: str):
        """(meta, ir) for a good local entry, None for a miss. A corrupt entry
        is evicted and counted."""
        try:
            blob = self._read(key)
        except self._timeouts:
            return None
        except UnsafeEntry as exc:
            blob = exc
        except _STORE_ERRORS as exc:
            self._turn_off(f"cannot read: {type(exc).__name__}: {exc}")
            return None
        if blob is None:
            return None
        try:
            if isinstance(blob, UnsafeEntry):
                raise CorruptEntry(str(blob))
            return unpack(blob, kind, key)
        except CorruptEntry as exc:
            self.count("corrupt")
            self.last_corrupt = str(exc)
            self.delete(key)
            return None

    def delete(self, key: str) -> None:
        self._backfill = [(k, b) for k, b in self._backfill if k != key]  # never write back what was refused
        if self.off is not None:
            return
        try:
            self.backend.delete(key)
        except self._timeouts:
            pass
        except _STORE_ERRORS as exc:
            self._turn_off(f"cannot delete: {type(exc).__name__}: {exc}")

    def put_many(self, items: list[tuple[str, bytes]], tag: str | None = None) -> int:
        """Store entries in one local transaction and in the shared tier;
        returns how many were written locally."""
        if self.off is not None or not items:
            return 0
        if self.remote is not None:
            self.remote.put_many(items)
        n = self._put_local(items, tag)
        if n:
            self.count("stores", n)
        return n

    def _put_local(self, items: list[tuple[str, bytes]], tag: str | None) -> int:
        if self.off is not None or not items:
            return 0
        try:
            transact = getattr(self.backend, "transact", None)
            if transact is not None:
                with transact():
                    for key, blob in items:
                        self._set(key, blob, tag)
            else:
                for key, blob in items:
                    self._set(key, blob, tag)
        except self._timeouts:
            self.count("store_errors")
            return 0
        except _STORE_ERRORS as exc:
            self.count("store_errors")
            self._turn_off(f"cannot write: {type(exc).__name__}: {exc}")
            return 0
        return len(items)

    def _set(self, key: str, blob: bytes, tag: str | None) -> None:
        if tag is not None and hasattr(self.backend, "_disk"):  # a diskcache.Cache
            self.backend.set(key, bytes(blob), tag=tag)
        else:
            self.backend.set(key, bytes(blob))

    def put(self, key: str, kind: str, meta: dict, ir=None, tag: str | None = None) -> int:
        return self.put_many([(key, pack(kind, key, meta, ir))], tag)

    def cull(self) -> int:
        """Evict least-recently-used entries until under the size limit."""
        if self.off is not None or not hasattr(self.backend, "cull"):
            return 0
        try:
            if hasattr(self.backend, "volume") and self.backend.volume() <= self.size_limit:
                return 0
            n = self.backend.cull()
        except self._timeouts as exc:
            n = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        except _STORE_ERRORS as exc:
            self._turn_off(f"cannot evict: {type(exc).__name__}: {exc}")
            return 0
        if n:
            self.count("evictions", n)
        return n

    def volume(self) -> int:
        if self.off is not None or not hasattr(self.backend, "volume"):
            return 0
        return int(self.backend.volume())

    def keys(self):
        """Every entry's key."""
        if self.off is not None or not hasattr(self.backend, "iterkeys"):
            return []
        try:
            return [k for k in self.backend.iterkeys() if k != PROBE]
        except UnsafeEntry:
            # a key that is not a str (pickled): drop every such row, then list again
            with self.backend.transact():
                n = self.backend._sql("SELECT COUNT(*) FROM Cache WHERE raw = 0").fetchone()[0]
                self.backend._sql("DELETE FROM Cache WHERE raw = 0")
            self.count("corrupt", n)
            return [k for k in self.backend.iterkeys() if k != PROBE]

    def entry_count(self) -> int:
        if self.off is not None:
            return 0
        try:
            return max(len(self.backend) - (PROBE in self.backend), 0)
        except TypeError:
            return len(self.keys())

    def clear(self) -> int:
        if self.off is not None:
            return 0
        n = self.entry_count()
        if hasattr(self.backend, "clear"):
            self.backend.clear()
        if self.counters is not None:
            self.counters.reset()
        return int(n or 0)

    def prune(self, keep_tag: str | None, max_size: int | None = None) -> dict:
        """Drop entries that can never hit again (written by another nkicc
        build: their tag differs), entries that do not read back, and then
        the least recently used until under `max_size` (default: the limit)."""
        out = {"stale": 0, "corrupt": 0, "evicted": 0}
        if self.off is not None:
            return out
        for key in self.keys():
            kind = kind_of(key) if isinstance(key, str) else None
            try:
                if hasattr(self.backend, "_disk"):
                    blob, tag = self.backend.get(key, tag=True)
                else:
                    blob, tag = self.backend.get(key), None
            except self._timeouts:
                continue
            except UnsafeEntry:
                blob, tag = b"", None
            if blob is None:
                continue
            if kind is None or (keep_tag is not None and tag is not None and tag != keep_tag):
                self.delete(key)
                out["stale"] += 1
                continue
            try:
                unpack(blob, kind, key)
            except CorruptEntry:
                self.delete(key)
                self.count("corrupt")
                out["corrupt"] += 1
        if out["stale"]:
            self.count("pruned", out["stale"])
        if max_size is not None:
            saved = self.size_limit
            self.size_limit = max_size
            try:
                if hasattr(self.backend, "reset"):
                    self.backend.reset("size_limit", max_size)
                out["evicted"] = self.cull()
            finally:
                if hasattr(self.backend, "reset"):
                    self.backend.reset("size_limit", saved)
                self.size_limit = saved
        else:
            out["evicted"] = self.cull()
        self.flush()
        return out

    def close(self) -> None:
        try:
            self.flush()
            if self.remote is not None:
                self.remote.close()
            if self.backend is not None and hasattr(self.backend, "close"):
                self.backend.close()
            if self.counters is not None:
                self.counters.close()
        except Exception:
            pass


_stores: dict[tuple, Store] = {}


def open_store(directory: str | None = None, size_limit: int | None = None, backend_factory=None,
               remote_factory=None) -> Store:
    """The process's Store for a directory and shared tier (opened once).
    The shared tier is $NKICC_REMOTE_CACHE's, its backend `remote_factory(url)`
    (the `nkicc_cache_backend` hook, asked with `remote=URL`)."""
    from .remote import open_tier, url_from_env  # start-up: ~10 ms, at the first store, not at `import nkicc`

    directory = directory or default_directory()
    size_limit = size_limit if size_limit is not None else size_from_env()
    url = url_from_env()
    key = (directory, size_limit, url)  # the factories are asked once, when the store opens
    store = _stores.get(key)
    if store is None:
        backend = None
        if backend_factory is not None:
            try:
                backend = backend_factory(directory, size_limit)
            except Exception as exc:
                warn_once(f"backend:{directory}", f"cache backend plugin failed ({type(exc).__name__}: {exc}); "
                                                  "using the local disk cache")
        store = _stores[key] = Store(directory, size_limit, backend)
        if url is not None and store.usable:
            store.remote = open_tier(url, remote_factory, warn_once, store.count)
    return store


def forget_stores() -> None:
    """Close every open store (tests; after `nkicc cache clear`)."""
    for store in _stores.values():
        store.close()
    _stores.clear()
