"""redis-cache: nkicc's own shared cache tier for redis:// and rediss://
URLs (NKICC_REMOTE_CACHE, --remote-cache), through the `nkicc_cache_backend`
hook like any plugin's tier. This module is the client (redis-py); signing,
counting and failing soft are nkicc.cache.remote's, as for any plugin's tier.

URLs: redis://[[user]:password@]host[:port][/db], rediss://... for TLS
(redis-py's query options work too: ?ssl_ca_certs=/path/ca.pem,
?ssl_cert_reqs=none, ?socket_timeout=0.5, ...).

Bounded waits: connecting gives up after CONNECT_TIMEOUT_S and any reply
after SOCKET_TIMEOUT_S (unless the URL says otherwise), with no retries, so
a dead or hung server costs a compile at most a few seconds once; the tier
then turns itself off for the process.
"""
from __future__ import annotations

from nkicc.pass_api import hookimpl

CONNECT_TIMEOUT_S = 1.0
SOCKET_TIMEOUT_S = 2.0
SCHEMES = ("redis", "rediss")
_SCAN_BATCH = 1000


class RedisBackend:
    def __init__(self, url: str) -> None:
        import redis  # redis-py only when a redis tier is opened: importing it costs every process
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.client = redis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=SOCKET_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0), retry_on_timeout=False, health_check_interval=0)

    def get(self, name: str) -> bytes | None:
        return self.client.get(name)

    def set_many(self, items: list[tuple[str, bytes]]) -> None:
        """One round trip; each SET is atomic, so a reader sees a whole value or none."""
        pipe = self.client.pipeline(transaction=False)
        for name, value in items:
            pipe.set(name, value)
        pipe.execute()

    def usage(self, prefix: str) -> tuple[int, int]:
        """(entries, bytes of their values) under `prefix`."""
        entries = size = 0
        batch: list[bytes] = []

        def measure() -> int:
            pipe = self.client.pipeline(transaction=False)
            for name in batch:
                pipe.strlen(name)
            return sum(pipe.execute())

        for name in self.client.scan_iter(match=prefix.replace("*", r"\*") + "*", count=_SCAN_BATCH):
            batch.append(name)
            if len(batch) == _SCAN_BATCH:
                entries, size, batch = entries + len(batch), size + measure(), []
        if batch:
            entries, size = entries + len(batch), size + measure()
        return entries, size

    def close(self) -> None:
        self.client.close()


def open_backend(url: str) -> RedisBackend | None:
    """A backend for redis:// and rediss:// URLs, None for other schemes."""
    scheme = url.split(":", 1)[0].lower()
    return RedisBackend(url) if scheme in SCHEMES else None


@hookimpl
def nkicc_cache_backend(remote):
    if remote is None:
        return None  # the local tier stays nkicc's disk cache
    return open_backend(remote)
