"""`nki.tensor`: the vendor's simulator's tensor module. nkicc's tensors are
`nl` tensors (`nki.language`); a name of this module that a kernel uses gets
nkicc's one-line E160 at its line."""
from nkicc.language.tensor import unsupported_name as _unsupported_name


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'nki.tensor' has no attribute {name!r}")
    raise _unsupported_name("nki.tensor", name)
