"""Where in the user's code a mistake is: the innermost frame of a traceback,
or of the calling stack, that is the user's (`ir.origin`: neither nkicc's nor
a library's).

Below kernel_trace.py and usererrors.py, which both point errors there, and
the driver's argument binding (specs.py, api.py)."""
from __future__ import annotations

import sys
import traceback

from ..ir import Loc
from ..ir.origin import LIBRARY, USER, is_nkicc, origin
from .objects import FORWARDING_CODE


def _user_frame(tb) -> Loc | None:
    """The innermost frame of the user's own code: not nkicc, and not a library
    the kernel called (numpy, the standard library) unless nothing else is left."""
    loc = fallback = None
    for frame, line in traceback.walk_tb(tb):
        kind = origin(frame.f_code.co_filename)
        if kind == LIBRARY:
            fallback = Loc(frame.f_code.co_filename, line)
        elif kind == USER:
            loc = Loc(frame.f_code.co_filename, line)
    return loc or fallback


def caller_loc(default: Loc | None = None) -> Loc | None:
    """The innermost calling frame of the user's own code (not nkicc, not a
    library such as click or the standard library), else `default`."""
    f = sys._getframe(1)
    while f is not None:
        if origin(f.f_code.co_filename) == USER:
            return Loc(f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return default


def _innermost_is_nkicc(tb) -> bool:
    frames = [frame for frame, _ in traceback.walk_tb(tb)]
    while frames and frames[-1].f_code in FORWARDING_CODE:
        frames.pop()
    return bool(frames) and is_nkicc(frames[-1].f_code.co_filename)
