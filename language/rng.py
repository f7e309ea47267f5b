"""nl's random numbers (nl.rand, nl.random_seed, nl.dropout), built on the
Vector Engine's generator instructions (nisa.rand2, set_rng_seed, dropout;
the generator is described in ir/ops/rng.py and docs/numerics.md)."""
from __future__ import annotations

from .. import isa
from ..ir import NkiccError
from . import dtypes
from .creation import new_tensor, sbuf
from .tensor import Tensor
from .tracing import user_loc


def rand(shape, dtype, buffer=sbuf, name="", **_hints) -> Tensor:
    """A new on-chip tile of uniform pseudo-random values in [0, 1)
    (nisa.rand2 with min 0 and max 1: the same seed, the same values)."""
    loc = user_loc(2)
    t = new_tensor(shape, dtype, buffer, name, loc)
    if t.buffer not in ("sbuf", "psum"):
        raise NkiccError("E120", f"nl.rand on {t.buffer} is not supported", loc,
                         "fill an SBUF tile with nl.rand and store it")
    isa.rand2(t, 0.0, 1.0)
    return t


def random_seed(seed) -> None:
    """Seed the generator nl.rand and nl.dropout draw from: `seed` is a [1, 1]
    int32/uint32 tile in SBUF or PSUM (or a Python int, put in one)."""
    loc = user_loc(2)
    if not isinstance(seed, Tensor):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise NkiccError("E103", f"nl.random_seed takes a [1, 1] int32 tile or an int, got "
                                     f"{type(seed).__name__}", loc, "nl.full((1, 1), 42, dtype=nl.int32)")
        value = seed
        seed = new_tensor((1, 1), "int32", "sbuf", "seed", loc)
        isa.memset(seed, value)
    isa.set_rng_seed(seed)


def dropout(x, rate, dtype=None, **_hints) -> Tensor:
    """A new SBUF tile: x with each element zeroed with probability `rate` (a
    number, or a [P, 1] tile of per-partition rates), not rescaled; cast to
    `dtype` when given (nisa.dropout, then nisa.tensor_copy)."""
    loc = user_loc(2)
    if not isinstance(x, Tensor):
        raise NkiccError("E103", f"nl.dropout x must be a tile, got {type(x).__name__}", loc)
    out = new_tensor(x.shape, x.decl.dtype, "sbuf", "", loc)
    isa.dropout(out, x, rate)
    if dtype is None or dtypes.dtype_name(dtype) == x.decl.dtype:
        return out
    cast = new_tensor(x.shape, dtype, "sbuf", "", loc)
    isa.tensor_copy(cast, out)
    return cast
