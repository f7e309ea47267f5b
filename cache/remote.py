"""The shared tier behind the local cache (docs/scale-out.md, "The shared Redis tier").

    lookup:  local diskcache -> shared tier (a hit there is written back to the local tier)
    store:   local diskcache and shared tier

The shared tier holds the very bytes the local tier holds (nkicc.cache.format:
versioned header, checksum, never a pickle), under names that carry the entry
format (`nkicc:f1:nkicc-kernel-<hex>`, `nkicc:f1:nkicc-source-<hex>`), so nkicc builds that read another
format never look at each other's entries.

Anyone who can reach a shared tier can write to it, so with a secret
(NKICC_CACHE_SECRET, or the contents of the file NKICC_CACHE_SECRET_FILE) every
value is an HMAC-SHA256 envelope around the entry:

    b"nkicc-signed 1 <hmac-sha256 hex of name + NUL + entry>\\n" + entry

and a value without one, or with a wrong one, is refused (counted, never used).
Without a secret, entries are stored as they are and an envelope's signature
cannot be checked (the entry's own checksum still is).

The tier is never fatal: an error (refused connection, timeout, failed
authentication, anything the backend raises) turns it off with one warning
(W502) for the process, and compiles go on with the local tier. A long-lived
process (a sweep's worker) tries the server again, once, every
RETRY_AFTER_S, silently; a server that is back is used again. The URL is
only ever shown without its password (`redact`).

A tier's backend comes from the `nkicc_cache_backend` hook called with
`remote=URL` (nkicc's own `redis-cache` plugin answers redis:// and
rediss://): an object with `get(name) -> bytes | None` and
`set_many([(name, bytes), ...])`, optionally `usage(prefix) -> (entries,
bytes)` and `close()`.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import time
import urllib.parse

from .format import FORMAT, CorruptEntry, unpack

NAMESPACE = f"nkicc:f{FORMAT}:"
SIGNED = b"nkicc-signed"
SIGNATURE_VERSION = 1
# Kernel entries, and source entries (what the trace reads -> the kernel
# entry's key), so that a machine with an empty local tier skips the trace
# too. Not regions: a round trip per region lookup would cost more than most
# region passes.
KINDS = ("kernel", "source")
URL_ENV = "NKICC_REMOTE_CACHE"
SECRET_ENV = "NKICC_CACHE_SECRET"
SECRET_FILE_ENV = "NKICC_CACHE_SECRET_FILE"
RETRY_AFTER_S = 60.0  # a failed server is tried again after this long (one attempt, no new warning)


_PREFIXES = tuple(f"nkicc-{kind}-" for kind in KINDS)


class Refused(Exception):
    """A value that is not signed with this process's secret."""


def url_from_env() -> str | None:
    url = os.environ.get(URL_ENV, "").strip()
    return url or None


def redact(url: str) -> str:
    """The URL as it may be shown: no password, no query (which can hold one)."""
    try:
        u = urllib.parse.urlsplit(url)
        host = u.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{u.port}" if u.port else "")
        if u.username or u.password:
            netloc = f"{urllib.parse.unquote(u.username or '')}:***@{netloc}" if u.password else \
                f"{urllib.parse.unquote(u.username)}@{netloc}"
        return urllib.parse.urlunsplit((u.scheme, netloc, u.path, "", ""))
    except ValueError:
        return "<unreadable URL>"


def _passwords(url: str) -> list[str]:
    """Every spelling of the URL's passwords, to scrub them out of error messages."""
    out = []
    try:
        u = urllib.parse.urlsplit(url)
        raw = [u.password or ""] + [v for k, vs in urllib.parse.parse_qs(u.query).items() if "pass" in k.lower()
                                    for v in vs]
    except ValueError:
        return [url]
    for p in raw:
        if p:
            out += [p, urllib.parse.unquote(p)]
    return sorted(set(out), key=len, reverse=True)


def load_secret() -> tuple[bytes | None, str | None]:
    """(secret or None, a problem or None). A secret file that cannot be read
    is a problem, not "no secret": the tier must not then trust unsigned values."""
    text = os.environ.get(SECRET_ENV)
    if text:
        return text.encode(), None
    path = os.environ.get(SECRET_FILE_ENV)
    if not path:
        return None, None
    try:
        with open(os.path.expanduser(path), "rb") as f:
            data = f.read().strip()
    except OSError as exc:
        return None, f"cannot read {SECRET_FILE_ENV} ({type(exc).__name__}: {exc.strerror or exc})"
    if not data:
        return None, f"{SECRET_FILE_ENV} is empty"
    return data, None


def _mac(secret: bytes, name: str, entry: bytes) -> str:
    return hmac.new(secret, name.encode() + b"\0" + entry, hashlib.sha256).hexdigest()


def sign(secret: bytes | None, name: str, entry: bytes) -> bytes:
    if secret is None:
        return entry
    return b"%s %d %s\n" % (SIGNED, SIGNATURE_VERSION, _mac(secret, name, entry).encode()) + entry


def open_envelope(secret: bytes | None, name: str, value: bytes) -> bytes:
    """The entry inside a stored value; Refused when a secret is set and the
    value is unsigned or signed with another secret."""
    if not value.startswith(SIGNED + b" "):
        if secret is not None:
            raise Refused("unsigned")
        return value
    nl = value.find(b"\n", 0, 128)
    parts = value[:nl].split(b" ") if nl > 0 else []
    if len(parts) != 3 or parts[1] != str(SIGNATURE_VERSION).encode():
        raise Refused("unreadable signature") if secret is not None else CorruptEntry("unreadable signature")
    entry = value[nl + 1:]
    if secret is not None and not hmac.compare_digest(parts[2], _mac(secret, name, entry).encode()):
        raise Refused("wrong signature")
    return entry


class RemoteTier:
    """The shared tier of one Store. `count(name)` is the Store's counter;
    every outcome of a lookup is counted as remote.hit, remote.miss,
    remote.corrupt, remote.refused or remote.errors.

    The backend is made (`factory(url)`: the hook) at the first lookup that
    misses locally or the first write, so a process whose lookups all hit
    locally never imports a client library or connects."""

    def __init__(self, factory, url: str, secret: bytes | None, count, warn) -> None:
        self._factory = factory
        self._url = url
        self._made = None
        self.name = redact(url)
        self.secret = secret
        self.count = count
        self._warn = warn
        self._passwords = _passwords(url)
        self.off: str | None = None
        self._retry_at: float | None = None  # when a failed server may be tried again (time.monotonic)
        # names whose value was refused or corrupt: not read again by this
        # process (a source hit whose kernel entry is bad traces and looks the
        # kernel up again; one bad value is one count) until it writes them
        self._bad: set[str] = set()

    @property
    def backend(self):
        if self._made is None and self.off is None:
            try:
                made = self._factory(self._url) if self._factory is not None else None
            except Exception as exc:  # a bad URL, a missing client library: trying again will not help
                self._fail("open", exc, retry=False)
                return None
            if made is None:
                self.off = "no backend"
                self._warn(f"remote:{self.name}", f"no cache backend for {self.name} (nkicc knows redis:// and "
                                                  "rediss://; a plugin can add others); compiling with the local "
                                                  "cache only", code="W502")
                return None
            self._made = made
        return self._made

    def scrub(self, text: str) -> str:
        for p in self._passwords:
            text = text.replace(p, "***")
        return text

    def _usable(self) -> bool:
        if self.off is None:
            return True
        if self._retry_at is not None and time.monotonic() >= self._retry_at:
            self.off, self._retry_at = None, None  # one more attempt; a failure turns it off again
            return True
        return False

    def _fail(self, doing: str, exc: BaseException, retry: bool = True) -> None:
        self.count("remote.errors")
        self.off = self.scrub(f"{doing}: {type(exc).__name__}: {exc}")
        self._retry_at = time.monotonic() + RETRY_AFTER_S if retry else None
        self._warn(f"remote:{self.name}", f"remote cache {self.name} failed ({self.off}); "
                                          "compiling with the local cache only", code="W502")

    def get(self, key: str, kind: str):
        """(meta, ir, entry bytes) of a good entry, else None (counted)."""
        if kind not in KINDS or not self._usable():
            return None
        name = NAMESPACE + key
        if name in self._bad:
            return None
        backend = self.backend
        if backend is None:
            return None
        try:
            value = backend.get(name)
        except Exception as exc:  # anything: a compile never fails for the shared tier
            self._fail("read", exc)
            return None
        if value is None:
            self.count("remote.miss")
            return None
        try:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise CorruptEntry(f"a {type(value).__name__}, not bytes")
            entry = open_envelope(self.secret, name, bytes(value))
            meta, ir = unpack(entry, kind, key)
        except Refused:
            self._bad.add(name)
            self.count("remote.refused")
            return None
        except CorruptEntry:
            self._bad.add(name)
            self.count("remote.corrupt")
            return None
        self.count("remote.hit")
        return meta, ir, entry

    def put_many(self, items: list[tuple[str, bytes]]) -> int:
        """Store (key, entry) pairs of the kinds the tier holds; returns how many."""
        if not self._usable():
            return 0
        mine = [(NAMESPACE + key, sign(self.secret, NAMESPACE + key, bytes(entry))) for key, entry in items
                if key.startswith(_PREFIXES)]
        if not mine or self.backend is None:
            return 0
        self._bad.difference_update(name for name, _ in mine)
        try:
            self._made.set_many(mine)
        except Exception as exc:
            self._fail("write", exc)
            return 0
        self.count("remote.stores", len(mine))
        return len(mine)

    def usage(self) -> dict:
        """{"entries", "bytes"} in the tier now, or {"error": ...}; for `nkicc cache stats`."""
        backend = self.backend
        if self.off is not None:
            return {"error": self.off}
        usage = getattr(backend, "usage", None)
        if usage is None:
            return {}
        try:
            entries, size = usage(NAMESPACE)
        except Exception as exc:
            self._fail("stats", exc)
            return {"error": self.off}
        return {"entries": int(entries), "bytes": int(size)}

    def close(self) -> None:
        close = getattr(self._made, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass


def open_tier(url: str, factory, warn, count) -> RemoteTier | None:
    """The tier for `url`, its backend from `factory(url)` (the hook); None,
    with one warning, when its secret is configured but cannot be read."""
    shown = redact(url)
    secret, problem = load_secret()
    if problem is not None:
        warn(f"remote-secret:{shown}", f"{problem}; not using the remote cache {shown}", code="W502")
        return None
    return RemoteTier(factory, url, secret, count, warn)
