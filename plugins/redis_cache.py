"""redis-cache: nkicc's own shared cache tier for redis:// and rediss://
URLs (NKICC_REMOTE_CACHE, --remote-cache), through the `nkicc_cache_backend`
hook like any plugin's tier. The client is nkicc.cache.redis_tier; signing,
counting and failing soft are nkicc.cache.remote's."""
from nkicc.pass_api import hookimpl


@hookimpl
def nkicc_cache_backend(remote):
    if remote is None:
        return None  # the local tier stays nkicc's disk cache
    from nkicc.cache.redis_tier import open_backend
    return open_backend(remote)
