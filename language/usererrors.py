"""Exceptions out of a kernel's own Python that have a diagnostic of their own.

Two kinds are mistakes (or gaps) that a kernel author should see as one line
rather than as a Python error: a kernel's own check failing (`assert cond, msg`
or a helper such as `kernel_assert` built on it) is E003 at the line that made
the check; importing a name nkicc does not provide (`from nki.isa import X`,
`import nki.isa.X`) is E160 at the import. Anything else stays E001.
"""
from __future__ import annotations

import linecache
import re
import sys
import traceback

from ..ir import Loc, NkiccError
from ..ir.origin import USER, is_nkicc, origin
from .userframes import _user_frame

# the roots under which nkicc serves NKI (the `nki` and `neuronxcc` aliases, and nkicc itself)
_SERVED_ROOTS = ("nki", "neuronxcc", "nkicc")
_CANNOT_IMPORT = re.compile(r"cannot import name '([^']+)'")
_FROM_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\b")


def user_error(exc: BaseException) -> NkiccError | None:
    """The diagnostic for `exc`, raised by the kernel's own code, or None when
    it is an ordinary Python error (E001)."""
    if isinstance(exc, AssertionError):
        return _assertion(exc)
    if isinstance(exc, ImportError):
        return _missing_import(exc)
    return None


def _assertion(exc: AssertionError) -> NkiccError:
    message = " ".join(str(exc).split()) or "(no message)"
    return NkiccError("E003", f"assertion failed: {message}", _asserting_frame(exc.__traceback__),
                      "the kernel's own check rejected these arguments; see its documented shapes and options")


def _asserting_frame(tb) -> Loc | None:
    """The line that made the check: the innermost frame of user code, but
    above helpers whose whole job is asserting (`kernel_assert`, `assert_shape`),
    whose own `assert` line says nothing about which check failed."""
    frames = [(frame, line) for frame, line in traceback.walk_tb(tb)
              if origin(frame.f_code.co_filename) == USER]
    while len(frames) > 1 and "assert" in frames[-1][0].f_code.co_name.lower():
        frames.pop()
    if not frames:
        return _user_frame(tb)
    frame, line = frames[-1]
    return Loc(frame.f_code.co_filename, line)


def _missing_import(exc: ImportError) -> NkiccError | None:
    module = exc.name or ""
    if module.split(".")[0] not in _SERVED_ROOTS or not _served_by_nkicc(module):
        return None  # a package of the user's, or one nkicc does not stand in for
    loc = _user_frame(exc.__traceback__)
    missing = _CANNOT_IMPORT.search(str(exc))
    if missing:  # `from nki.isa import X`: the module exists, X does not
        written = _written_module(loc) or module
        what = f"{written}.{missing.group(1)}"
    else:        # `import nki.isa.X` / `from nki.X import Y`: no such module
        what = module
    return NkiccError("E160", f"{what} is not supported by nkicc (or is not NKI)", loc,
                      "docs/api.md lists the operations nkicc provides")


def _served_by_nkicc(module: str) -> bool:
    """True when the module, or the nearest loaded package above it, is nkicc's
    (the alias, or nkicc itself), not a real nki/neuronxcc installation."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        loaded = sys.modules.get(".".join(parts[:n]))
        if loaded is not None:
            file = getattr(loaded, "__file__", None)
            return bool(file) and is_nkicc(file)
    return False


def _written_module(loc: Loc | None) -> str | None:
    """The module as the import statement spells it (`nki.isa`, not
    `nkicc.isa`); a parenthesised import names X a few lines below its `from`."""
    if loc is None:
        return None
    for line in range(loc.line, max(loc.line - 30, 0), -1):
        m = _FROM_IMPORT.match(linecache.getline(loc.file, line))
        if m:
            return m.group(1)
    return None
