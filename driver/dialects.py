"""Which NKI dialect nkicc traces a kernel in, and the one line that says so.

The import path decides where it can: `neuronxcc.nki` is NKI 0.1 (the Neuron
compiler 2.x before 2.27, and the legacy namespace of 2.27-2.29). `import nki`
is ambiguous (0.2 in SDK 2.27/2.28, 0.3 in 2.29, ... 0.6 in 2.32): there an
explicit choice applies (`nkicc.compile(..., dialect=)`, `@nki.jit(dialect=)`,
`nkicc run --dialect`, the NKICC_DIALECT environment variable), else 0.6.
nkicc's front end serves 0.1 and 0.6; 0.2 to 0.5 are traced by the 0.6 front
end, which accepts what they wrote except the rules docs/dialects.md lists.
"""
from __future__ import annotations

import functools
import os
import sys

from .ir import NkiccError
from .language import dialect as front
from .language.userframes import caller_loc

ENV = "NKICC_DIALECT"


def chosen(explicit: str | None, option: str | None, fn) -> str | None:
    """The dialect to trace `fn` in (None: the one its imports say, 0.1 or 0.6)."""
    by_import = front.dialect_of(fn)
    asked = front.check(explicit, "dialect=") or front.check(option, "dialect=")
    if asked is not None:
        if by_import is not None and asked != by_import:
            raise NkiccError("E201", f"dialect={asked!r}, but {getattr(fn, '__name__', 'the kernel')} imports "
                                     f"the NKI {by_import} namespace (neuronxcc.nki)", caller_loc(),
                             "leave dialect= out: the import path says the version")
        return asked
    if by_import is not None:
        announce(by_import, "its nl / nisa are neuronxcc.nki's")
        return None
    from_env = front.check(os.environ.get("NKICC_DIALECT") or None, f"{ENV}=")
    if from_env is not None:
        announce(from_env, f"from --dialect or {ENV}")
        return from_env
    return None


@functools.cache
def announce(version: str, why: str) -> None:
    """The one line (stderr, once per process and dialect) saying which dialect nkicc assumed."""
    how = ("its own front end" if version in (front.LEGACY, front.CURRENT) else
           "the 0.6 front end with 0.2's nisa signatures" if version == "0.2" else "the 0.6 front end")
    print(f"nkicc: NKI {version} kernels ({why}), traced by {how}", file=sys.stderr)
