"""The hooks nkicc calls. Built-in passes and targets are plugins too,
registered through the same entry-point group (`nkicc`) a third-party package
uses."""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("nkicc")


@hookspec
def nkicc_passes():
    """Return a list of `nkicc.pass_api.Pass` this plugin provides."""


@hookspec
def nkicc_targets():
    """Return a list of `nkicc.pass_api.Target` this plugin provides."""


@hookspec(firstresult=True)
def nkicc_cache_backend(directory, size_limit, remote):
    """Return a cache backend object, or None.

    remote=None: the local tier; an object to use instead of the local disk
    cache (`get`, `set`, `delete`, ...; docs/cache.md).
    remote=URL: the shared tier behind the local one, from NKICC_REMOTE_CACHE
    or --remote-cache (`get(name)`, `set_many(items)`, optionally
    `usage(prefix)` and `close()`; nkicc.cache.remote). Only implementations
    that take `remote` are asked; nkicc's `redis-cache` plugin answers
    redis:// and rediss://, a plugin can answer other schemes."""


@hookspec(firstresult=True)
def nkicc_run_pass(pass_, ir, ctx):
    """Run one pass. nkicc's own implementation runs it; wrap it (a
    `wrapper=True` hookimpl) to instrument every pass run."""


@hookspec
def nkicc_compile_finished(report):
    """Called with the compile report (a dict) when a compile completes."""
