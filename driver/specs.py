"""Argument specs: `float32[4096,32768]` on the command line, numpy arrays at
call time, or string annotations on the kernel's parameters."""
from __future__ import annotations

import inspect

import numpy as np

from .ir import NkiccError
from .language.argspec import SPEC, TensorSpec
from .language.typing import TensorType
from .language.userframes import caller_loc


def parameters(fn) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())


def bind_call(fn, args: tuple, kwargs: dict, allow_specs: bool = False
              ) -> tuple[dict[str, TensorSpec], dict, dict[str, np.ndarray]]:
    """Split a call into tensor specs, compile-time constants and the arrays.
    With allow_specs, TensorSpecs and "dtype[shape]" strings stand for tensors."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise NkiccError("E002", f"calling kernel {fn.__name__}: {exc}", caller_loc(),
                         f"its signature is {fn.__name__}{inspect.signature(fn)}") from None
    bound.apply_defaults()
    specs: dict[str, TensorSpec] = {}
    constants: dict = {}
    arrays: dict[str, np.ndarray] = {}
    for name, value in bound.arguments.items():
        if isinstance(value, np.ndarray):
            if value.ndim == 0:
                constants[name] = value.item()
                continue
            specs[name] = TensorSpec.of_array(value)
            arrays[name] = value
        elif allow_specs and isinstance(value, TensorSpec):
            specs[name] = value
        elif allow_specs and isinstance(value, str) and SPEC.match(value):
            specs[name] = TensorSpec.parse(value)
        else:
            constants[name] = value
    return specs, constants, arrays


def annotated_specs(fn) -> dict[str, TensorSpec]:
    """Default tensor specs from annotations: strings (`def k(a: "float32[128,512]")`)
    and nki.typing (`def k(a: nt.tensor[[128, 512], nl.float32])`, also when
    `from __future__ import annotations` made it a string)."""
    out = {}
    for p in parameters(fn):
        ann = p.annotation
        if isinstance(ann, str) and SPEC.match(ann):
            out[p.name] = TensorSpec.parse(ann)
            continue
        if isinstance(ann, str) and "tensor" in ann:
            try:  # a postponed annotation: evaluate it as Python would
                ann = eval(ann, getattr(fn, "__globals__", {}))  # noqa: S307 - the kernel's own source
            except Exception:
                continue
        if isinstance(ann, TensorType) and ann.spec is not None:
            out[p.name] = TensorSpec(*ann.spec)
    return out


def constant_key(value) -> object:
    """A hashable, printable form of a compile-time constant."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(constant_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), constant_key(v)) for k, v in value.items())))
    return ("repr", repr(value))
