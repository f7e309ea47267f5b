"""Where in the user's code a mistake is: the innermost frame of a traceback,
or of the calling stack, that is neither nkicc's nor a library's.

Below kernel_trace.py and usererrors.py, which both point errors there, and
the driver's argument binding (specs.py, api.py)."""
from __future__ import annotations

import functools
import os
import sys
import traceback

from ..ir import Loc
from .objects import FORWARDING_CODE
from .tracing import is_nkicc_file


def _user_frame(tb) -> Loc | None:
    """The innermost frame of the user's own code: not nkicc, and not a library
    the kernel called (numpy, the standard library) unless nothing else is left."""
    loc = fallback = None
    for frame, line in traceback.walk_tb(tb):
        path = os.path.abspath(frame.f_code.co_filename)
        if is_nkicc_file(path):
            continue
        if _is_library(path):
            fallback = Loc(frame.f_code.co_filename, line)
        else:
            loc = Loc(frame.f_code.co_filename, line)
    return loc or fallback


def caller_loc(default: Loc | None = None) -> Loc | None:
    """The innermost calling frame of the user's own code (not nkicc, not a
    library such as click or the standard library), else `default`."""
    f = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not is_nkicc_file(path) and not _is_library(path):
            return Loc(f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return default


def _is_library(path: str) -> bool:
    return path.startswith("<") or path.startswith(_library_roots())


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import sysconfig
    paths = sysconfig.get_paths()
    return tuple({os.path.abspath(paths[k]) + os.sep
                  for k in ("stdlib", "platstdlib", "purelib", "platlib", "scripts") if paths.get(k)})


def _innermost_is_nkicc(tb) -> bool:
    frames = [frame for frame, _ in traceback.walk_tb(tb)]
    while frames and frames[-1].f_code in FORWARDING_CODE:
        frames.pop()
    return bool(frames) and is_nkicc_file(os.path.abspath(frames[-1].f_code.co_filename))
