"""`nl.NKIObject`: the base class of kernel-side helper objects.

Kernels subclass it for configuration dataclasses, loggers and tile
descriptors that exist only while the kernel is traced (they hold Python
values, never device data). Under nkicc tracing is plain Python, so the class
needs no machinery; it only has to be a well-behaved base for `@dataclass`
(frozen or not) and for classes with their own `__init__`. A kernel argument
that is an NKIObject is a compile-time constant like any other non-array
value: its repr (a dataclass's field values) picks the compiled variant.
"""
from __future__ import annotations


class NKIObject:
    """Base class of kernel dataclasses and configuration objects.
    `NKIObject(a=1, b=2)` sets the keyword arguments as attributes."""

    def __init__(self, **kwargs) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)
