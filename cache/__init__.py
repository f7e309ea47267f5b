"""nkicc.cache: the content-addressed compile cache.

- keys:    what a cache key is made of (nkicc.cache.keys)
- format:  the bytes of an entry: versioned header, blake2b checksum, zlib'd
           JSON; never a pickle (nkicc.cache.format)
- store:   diskcache.Cache at $NKICC_CACHE_DIR (default: the user cache
           folder), size-limited, least-recently-used eviction; degrades to no
           cache with one warning (nkicc.cache.store)
- remote:  the shared tier behind the store (signing, namespace, failing
           soft; its Redis client is the redis-cache plugin) (nkicc.cache.remote)
- regions: the region level, used by the pass manager (nkicc.cache.regions)
- stats:   counters shared by every process using the folder (nkicc.cache.stats)
- env:     every environment variable nkicc reads, key or neutral (nkicc.cache.env)

This package imports nkicc.ir and never the driver; the driver's
nkicc.cached wires it into compiles. See docs/cache.md.
"""
from .env import ENV, KEY, NEUTRAL
from .format import CorruptEntry, pack, unpack
from .keys import make_key
from .regions import RegionSession, run_region
from .stats import Counters
from .store import (
    DEFAULT_SIZE, Store, default_directory, enabled_by_env, forget_stores, open_store, parse_size,
)

__all__ = [
    "ENV", "KEY", "NEUTRAL", "CorruptEntry", "pack", "unpack", "make_key", "RegionSession", "run_region",
    "Counters", "DEFAULT_SIZE", "Store", "default_directory", "enabled_by_env", "forget_stores", "open_store",
    "parse_size",
]
