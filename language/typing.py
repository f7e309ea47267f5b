"""`nki.typing` (`import nki.typing as nt`): annotations for kernel parameters.

    @nki.jit
    def add(a: nt.tensor[[128, 512], nl.float32], b: nt.tensor[(128, 512), "bfloat16"], scale: nt.scalar = 1.0):

The annotations never change how a kernel runs: arguments are bound from the
call as always. An annotation with a shape and a dtype also serves as the
default spec for `nkicc compile` / `nkicc simulate` (like a
`"float32[128,512]"` string annotation), so `--arg` can be left out. Accepted
forms: `nt.tensor[shape, dtype]`, `nt.tensor[dtype, shape]`,
`nt.tensor[d0, d1, ..., dtype]`, `nt.tensor["float32[128,512]"]`, and the
bare `nt.tensor`, `nt.mutable_tensor` (same forms) and `nt.scalar`.
"""
from __future__ import annotations

import operator

from ..ir import NkiccError
from . import dtypes
from .argspec import SPEC

class TensorType:
    """`nt.tensor` / `nt.mutable_tensor`, subscripted or bare."""

    def __init__(self, shape: tuple[int, ...] | None = None, dtype: str | None = None, mutable: bool = False,
                 base: str = "tensor") -> None:
        self.shape = shape
        self.dtype = dtype
        self.mutable = mutable
        self._base = base

    def __getitem__(self, key) -> "TensorType":
        shape, dtype = _parse(key)
        return TensorType(shape, dtype, self.mutable, self._base)

    @property
    def spec(self) -> tuple[tuple[int, ...], str] | None:
        """(shape, dtype name) when both are given, else None."""
        if self.shape is None or self.dtype is None:
            return None
        return self.shape, self.dtype

    def __eq__(self, other) -> bool:
        return (isinstance(other, TensorType) and (self.shape, self.dtype, self.mutable) ==
                (other.shape, other.dtype, other.mutable))

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.mutable))

    def __repr__(self) -> str:
        if self.shape is None and self.dtype is None:
            return f"nt.{self._base}"
        shape = "?" if self.shape is None else list(self.shape)
        return f"nt.{self._base}[{shape}, {self.dtype or '?'}]"


class ScalarType:
    """`nt.scalar`: a compile-time constant parameter (ints, floats, ...)."""

    def __getitem__(self, _key) -> "ScalarType":
        return self

    def __repr__(self) -> str:
        return "nt.scalar"


tensor = TensorType()
mutable_tensor = TensorType(mutable=True, base="mutable_tensor")
scalar = ScalarType()


def _bad(key, why: str) -> NkiccError:
    return NkiccError("E201", f"cannot read the annotation nt.tensor[{key!r}]: {why}", None,
                      "write nt.tensor[[128, 512], nl.float32]")


def _is_int(x) -> bool:
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)
        return True
    except TypeError:
        return False


def _parse(key) -> tuple[tuple[int, ...] | None, str | None]:
    if isinstance(key, str):
        m = SPEC.match(key)
        if m:
            dims = [d for d in m.group(2).replace(" ", "").split(",") if d]
            return _shape(tuple(int(d) for d in dims), key), dtypes.dtype_name(m.group(1))
    items = key if isinstance(key, tuple) else (key,)
    shape, dtype, ints = None, None, []
    for item in items:
        if isinstance(item, (list, tuple)):
            if shape is not None or ints:
                raise _bad(key, "two shapes")
            if not all(_is_int(d) for d in item):
                raise _bad(key, f"shape entries must be ints, got {list(item)}")
            shape = _shape(tuple(operator.index(d) for d in item), key)
        elif _is_int(item):
            if shape is not None:
                raise _bad(key, "two shapes")
            ints.append(operator.index(item))
        else:
            if dtype is not None:
                raise _bad(key, "two dtypes")
            dtype = dtypes.dtype_name(item)
    if ints:
        shape = _shape(tuple(ints), key)
    return shape, dtype


def _shape(dims: tuple[int, ...], key) -> tuple[int, ...]:
    if not dims or any(d <= 0 for d in dims):
        raise _bad(key, "the shape needs positive dimensions")
    return dims
