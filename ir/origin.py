"""Whose code a file is: nkicc's own, an installed library's, or the user's.

One answer for everyone who asks: the tracer's locations (`language/tracing.py`
skips nkicc's frames, `language/kernel_trace.py` also libraries' frames), the
loop-effects proof (it trusts nkicc's helpers and reads everyone else's) and
the source-level cache key (`cache/source.py` walks the user's code by value
and names nkicc's and libraries' code by version). Were they to disagree, a
helper the tracer treats as the user's could be keyed by name only, and an
edit to it would hit a stale entry.

Paths are compared resolved (`os.path.realpath`) on both sides, so a file
reached through a symlink (a site-packages that is a link, a link placed on
sys.path) is classified by where its bytes are. Where the two spellings
differ, the resolved one is the safe one for the cache: a package installed
as a link to the user's working copy (`flit install --symlink`) is the
user's code, hashed by value, not a library keyed by version.

The install roots are the interpreter's install scheme, `scripts` included:
that folder holds the launchers pip writes (the `nkicc` command itself), not
the user's source, so a location never points at a launcher's line. Code
without a file is the user's (`<stdin>`, `<string>` of `python -c` or exec),
except the interpreter's frozen modules (`<frozen importlib._bootstrap>`).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig

NKICC = "nkicc"
LIBRARY = "library"
USER = "user"

# nkicc's packages (each maps to its own folder in a source checkout)
PACKAGES = ("nkicc", "nkicc.language", "nkicc.isa", "nkicc.ir", "nkicc.plugins", "nkicc.simulator", "nkicc.cache")
# the install scheme's folders whose files are installed code, not the user's
INSTALL_PATHS = ("stdlib", "platstdlib", "purelib", "platlib", "scripts")


@functools.lru_cache(maxsize=1)
def package_dirs() -> tuple[tuple[str, str], ...]:
    """(package, folder) of each of nkicc's packages, as the import system finds them."""
    out = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        out.extend((name, d) for d in spec.submodule_search_locations)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def nkicc_roots() -> tuple[str, ...]:
    return tuple(sorted({os.path.realpath(d) + os.sep for _, d in package_dirs()}))


@functools.lru_cache(maxsize=1)
def library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({os.path.realpath(paths[k]) + os.sep for k in INSTALL_PATHS if paths.get(k)}))


@functools.lru_cache(maxsize=8192)
def origin(filename: str) -> str:
    """NKICC, LIBRARY or USER for a code object's file name (or a module's __file__)."""
    if filename.startswith("<"):
        return LIBRARY if filename.startswith("<frozen ") else USER
    real = os.path.realpath(filename)
    # nkicc first: an installed nkicc lies inside site-packages too
    if real.startswith(nkicc_roots()):
        return NKICC
    if real.startswith(library_roots()):
        return LIBRARY
    return USER


def is_nkicc(filename: str) -> bool:
    return origin(filename) == NKICC


def is_user(filename: str) -> bool:
    return origin(filename) == USER
