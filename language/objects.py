"""`nl.NKIObject`: the base class of kernel-side helper objects.

Kernels subclass it for configuration dataclasses, loggers and tile
descriptors that exist only while the kernel is traced (they hold Python
values, never device data). Under nkicc tracing is plain Python, so the class
only has to be a well-behaved base for `@dataclass` (frozen or not) and for
classes with their own `__init__`. A kernel argument that is an NKIObject is a
compile-time constant like any other non-array value: its repr (a dataclass's
field values) picks the compiled variant.

One NKI habit needs help: a `@dataclass` subclass whose attributes carry
defaults but no annotations (`section_idx = None`) has no dataclass fields,
yet kernels construct it with those names as keyword arguments. Such keywords
are set on the new object after the dataclass `__init__` ran with the rest.
"""
from __future__ import annotations

import dataclasses
import functools


class _NKIObjectType(type):
    def __call__(cls, *args, **kwargs):
        if not kwargs:
            return super().__call__(*args)
        fields = _field_names(cls)
        if fields is None or all(k in fields for k in kwargs):
            return super().__call__(*args, **kwargs)
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in fields and _class_attribute(cls, k)}
        obj = super().__call__(*args, **kwargs)
        for name, value in extra.items():
            object.__setattr__(obj, name, value)  # also on frozen dataclasses, as their own __init__ does
        return obj


@functools.lru_cache(maxsize=1024)
def _field_names(cls) -> frozenset | None:
    """A dataclass's field names (None for other classes). A class is a dataclass once its
    decorator has run, before its first instance (the library makes 600 k TensorViews a trace:
    dataclasses.fields on each was a tenth of the trace)."""
    return frozenset(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


# Frames that only pass a kernel's call on: an exception raised at one of them
# (Dims(a=1) missing `b` fails binding the arguments, in __call__) is the caller's
# mistake, not nkicc's (userframes._innermost_is_nkicc).
FORWARDING_CODE = frozenset({_NKIObjectType.__call__.__code__})


def _class_attribute(cls, name: str) -> bool:
    return any(name in vars(base) for base in cls.__mro__ if base is not object)


class NKIObject(metaclass=_NKIObjectType):
    """Base class of kernel dataclasses and configuration objects.
    `NKIObject(a=1, b=2)` sets the keyword arguments as attributes."""

    def __init__(self, **kwargs) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)
