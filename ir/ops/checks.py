"""Trace-time rules shared by instruction definitions. Each raises a
NkiccError without a location; the tracer adds the kernel's line."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Const
from .core import TensorOperand

PMAX = 128
# distinct elements per partition one compute instruction may read or write: the reference bounds
# an operand's elements per partition by the physical size of the partition (PSUM: 16 KiB, 4 Ki
# float32), so a broadcast (step-0) dimension, which re-reads the same elements, does not count
FREE_MAX = {"sbuf": 64 * 1024, "psum": 4 * 1024}


def tensor(x, what: str) -> TensorOperand:
    if not isinstance(x, TensorOperand):
        raise NkiccError("E103", f"{what} must be a tensor, got {type(x).__name__}")
    return x


def free(t) -> int:
    n = 1
    for d in t.shape[1:]:
        n *= d
    return n


def distinct_free(t) -> int:
    """The distinct elements per partition the view `t` touches: its free size with the
    broadcast (step-0) dimensions left out."""
    n = 1
    for step, num in t.access.pattern[1:]:
        if step != 0:
            n *= num
    return n


def on_chip(t: TensorOperand, what: str) -> None:
    if not t.decl.on_chip:
        raise NkiccError("E120", f"{what} must be on SBUF or PSUM, but {t.shown} is in {t.buffer}", None,
                         "nl.load it into SBUF first")
    if t.shape and t.shape[0] > PMAX:
        raise NkiccError("E110", f"{what} spans {t.shape[0]} partitions; at most {PMAX}", None,
                         "tile the partition dimension by 128")


def on_chip_tensors(named: dict[str, object], opcode: str) -> list[TensorOperand]:
    """Every named argument a tensor on SBUF/PSUM; returned in order."""
    out = []
    for what, x in named.items():
        t = tensor(x, f"{opcode} {what}")
        on_chip(t, f"{opcode} {what}")
        out.append(t)
    return out


def same_layout(dst, src, what: str) -> None:
    """Element-wise instructions map partition to partition, free to free."""
    if (dst.shape[:1], free(dst)) != (src.shape[:1], free(src)):
        raise NkiccError("E140", f"{what}: shapes {list(dst.shape)} and {list(src.shape)} do not match", None,
                         "give both the same partition count and the same number of free elements")


def not_both_psum(a, b, what: str) -> None:
    if a.buffer == "psum" and b.buffer == "psum":
        raise NkiccError("E120", f"{what} cannot read both inputs from PSUM", None, "copy one of them to SBUF first")


def scalar(value, what: str):
    """A compile-time number (a loop index asked for its value makes that loop concrete)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "__index__") and not isinstance(value, TensorOperand):
        return int(value)
    raise NkiccError("E103", f"{what} must be a number, got {type(value).__name__}")


def per_partition(value, dst, what: str):
    """A number, or a [P, 1] tile with one value per partition of dst."""
    if isinstance(value, TensorOperand):
        on_chip(value, what)
        if value.shape[0] != dst.shape[0] or free(value) != 1:
            raise NkiccError("E140", f"{what} tile must be [{dst.shape[0]}, 1], got {list(value.shape)}", None,
                             "use one value per partition")
        return value
    return Const(scalar(value, what))


def affine_pattern(pattern, offset, channel_multiplier, dst, what: str) -> dict:
    """The attributes of an affine value per element (iota, affine_select):
    offset + p * channel_multiplier + sum(i_k * step_k) over dst's free elements."""
    try:
        pairs = tuple((int(s), int(n)) for s, n in pattern)
        offset, channel_multiplier = int(offset), int(channel_multiplier)
    except (TypeError, ValueError):
        raise NkiccError("E103", f"{what} takes a pattern of [step, num] pairs and integer offset and "
                                 "channel_multiplier") from None
    count = 1
    for _, n in pairs:
        count *= n
    if count != free(dst):
        raise NkiccError("E140", f"{what} pattern covers {count} free elements, dst has {free(dst)}")
    return {"pattern": pairs, "offset": offset, "channel_multiplier": channel_multiplier}


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    try:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
    except TypeError:
        raise NkiccError("E103", f"axis must be an int or a list of ints, got {axis!r}") from None
    out = []
    for a in axes:
        if not isinstance(a, int):
            raise NkiccError("E103", f"axis must be an int or a list of ints, got {axis!r}")
        a = a + ndim if a < 0 else a
        if not 1 <= a < ndim:
            raise NkiccError("E103", f"axis {a} is not a free axis of a {ndim}-d tile", None,
                             "reduce over free axes (1 .. ndim-1); the partition axis 0 cannot be reduced here")
        out.append(a)
    return tuple(sorted(set(out)))
