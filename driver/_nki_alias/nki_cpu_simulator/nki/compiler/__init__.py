"""`nki.compiler`: the compiler package the suite imports. Its trace-only
path (`nki.compiler.frontend`) compiles with nkicc; other names get nkicc's
one-line E160 at the line that uses them."""
from nkicc.language.tensor import unsupported_name as _unsupported_name


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'nki.compiler' has no attribute {name!r}")
    raise _unsupported_name("nki.compiler", name)
