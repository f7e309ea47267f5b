"""`nki.builtin` (the suite's simulation mode also puts it in `builtins.builtin`).
No kernel of the NKI Library uses a name of it; one that does gets nkicc's
one-line E160 at its line."""
from nkicc.language.tensor import unsupported_name as _unsupported_name


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'nki.builtin' has no attribute {name!r}")
    raise _unsupported_name("nki.builtin", name)
