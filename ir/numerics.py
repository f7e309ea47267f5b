"""Conversions between dtypes, rounded and saturated as the hardware does.

Every value a simulator writes into memory of another dtype goes through
`converter(dst)` (semantics.store), so both simulators round alike. The rules,
with their sources, are in docs/numerics.md; in short:

- to an integer: round to nearest, ties to even; saturate to the range; NaN -> 0.
  Integer sources saturate exactly (no detour through float32).
- to bool (a byte on the device): as to uint8, then nonzero -> True.
- to float32 / float16 / bfloat16 / float8_e4m3 / float8_e5m2: round to nearest
  even; beyond the largest finite value -> +-inf (IEEE 754).
- to float8_e4m3fn (OCP FP8, no inf): round to nearest even; finite values and
  infinities beyond +-448 saturate to +-448; NaN stays NaN.
- to float4_e2m1fn (no inf, no NaN): round to nearest even; saturate to +-6; NaN -> 0.
- to float8_e8m0fnu (a power of two, no sign, no zero): the nearest power of
  two (a mantissa of exactly 1.5 rounds up); below 2^-127 -> 2^-127; zero,
  negatives, NaN, inf and values that round past 2^127 -> NaN (0xFF).
- tfloat32 is held as float32: no rounding (as the vendor's simulator).
- float64 results (iota's indices) convert to integers directly, and to the
  narrow float types through float32, as the engines' fp32 datapath does.

Packed MX types (`float8_e4m3fn_x4`, `float8_e5m2_x4`: four fp8 bytes in a
uint32; `float4_e2m1fn_x4`: four fp4 nibbles in a uint16; lane 0 in the
lowest bits) are packed and unpacked by `pack` / `unpack`.

`precise_from_env()` reads NKI_PRECISE_FP; each simulator reads it once, when
it is created, and holds float dtypes as float32 when it is off.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from .dtypes import DTYPES, name_of_numpy, storage
from .errors import NkiccError

_F32 = np.dtype(np.float32)
_OFF = ("0", "false", "off", "no")
_ON = ("", "1", "true", "on", "yes")
E4M3FN_MAX = 448.0


def precise_from_env() -> bool:
    """NKI_PRECISE_FP: on (the default) holds low-precision floats in their own
    dtype (ml_dtypes); 0 holds every float tensor as float32."""
    raw = os.environ.get("NKI_PRECISE_FP", "1")
    value = raw.strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise NkiccError("E201", f"NKI_PRECISE_FP={raw!r} is neither on nor off", None,
                     "set NKI_PRECISE_FP=1 (the default: low-precision dtypes as on the hardware) or 0 (all floats "
                     "held as float32)")


def convert(values, dst) -> np.ndarray:
    """`values` (any numeric array or scalar, ml_dtypes included) as dtype
    `dst`: an NKI dtype name ("bfloat16", "float8_e4m3fn_x4", ...) or a numpy
    dtype. A packed dst takes the unpacked values (last axis 4x as long)."""
    if isinstance(dst, str):
        d = DTYPES[dst]
        if d.kind == "packed":
            return pack(convert(values, d.element), dst)
        dst = storage(dst)
    with np.errstate(over="ignore", invalid="ignore"):
        return converter(np.dtype(dst))(np.asarray(values))


@functools.lru_cache(maxsize=None)
def converter(dst: np.dtype):
    """The function that converts an array into numpy dtype `dst` (no errstate
    of its own: simulators run under np.errstate(all="ignore"))."""
    if dst == np.bool_:
        to_byte = converter(np.dtype(np.uint8))
        return lambda v: v if v.dtype == dst else to_byte(v) != 0
    if dst.kind in "iu":
        return functools.partial(_to_int, dst=dst, lo=int(np.iinfo(dst).min), hi=int(np.iinfo(dst).max))
    name = name_of_numpy(dst)
    if name is None:
        raise TypeError(f"no conversion into {dst}")
    special = _FLOAT_RULES.get(name)
    if special is not None:
        return functools.partial(special, dst=dst)
    return functools.partial(_to_float, dst=dst)


# elements converted at a time: the float64 and int64 temporaries of a whole array were 4-8 times
# its size (the NKI Library suite's masks, 335 M elements, ran out of memory in the conversion)
_INT_CHUNK = 1 << 22


def _to_int(v: np.ndarray, dst: np.dtype, lo: int, hi: int) -> np.ndarray:
    if v.dtype == dst:
        return v
    if v.size > _INT_CHUNK:
        out = np.empty(v.shape, dtype=dst)
        src, flat = v.reshape(-1), out.reshape(-1)
        for start in range(0, v.size, _INT_CHUNK):
            flat[start:start + _INT_CHUNK] = _to_int(src[start:start + _INT_CHUNK], dst, lo, hi)
        return out
    if v.dtype.kind in "biu":
        return np.clip(v.astype(np.int64), lo, hi).astype(dst)
    x = v.astype(np.float64) if v.dtype != np.float64 else v  # exact for every narrower float
    x = np.rint(x)                                             # ties to even
    x = np.where(np.isnan(x), 0.0, np.clip(x, lo, hi))         # clip also takes +-inf to the range ends
    return x.astype(dst)


def as_f32(v: np.ndarray) -> np.ndarray:
    """The fp32 value an engine holds: exact from narrower floats and small
    ints, rounded to nearest even from float64 and wide ints (an fp32 array is
    returned as it is, not copied)."""
    if v.dtype == _F32:
        return v
    return bf16_to_f32(v) if v.dtype.name == "bfloat16" else v.astype(_F32)


def _to_float(v: np.ndarray, dst: np.dtype) -> np.ndarray:
    if v.dtype == dst:
        return v
    return f32_to_bf16(as_f32(v), dst) if dst.name == "bfloat16" else as_f32(v).astype(dst)


# bfloat16 is the top half of float32: widening is a shift, and narrowing rounds to nearest even
# on the integer bits. ml_dtypes converts element by element: widening is 3x slower, narrowing
# 1.5x, and the library's attention kernels spent a sixth of their simulation there (matmul
# operands, stores). Both equal ml_dtypes bit for bit, NaN included (every float32 pattern:
# docs/numerics.md, "bfloat16 conversions").

def bf16_to_f32(v: np.ndarray) -> np.ndarray:
    """A bfloat16 array (ml_dtypes) as float32, exactly."""
    wide = np.asarray(v).view(np.uint16).astype(np.uint32)
    wide <<= 16
    return wide.view(_F32)


def f32_to_bf16(f: np.ndarray, dst: np.dtype) -> np.ndarray:
    """A float32 array rounded to bfloat16 (`dst`, ml_dtypes' dtype) to nearest even; NaN becomes
    the quiet NaN of its sign, as ml_dtypes makes it."""
    f = np.asarray(f)
    if not f.flags.c_contiguous:  # (a strided view: ml_dtypes' loop is the faster one, bench/conversions.py)
        return f.astype(dst)
    bits = f.view(np.uint32)
    rounded = bits >> 16  # (one temporary, updated in place: fresh pages fault slowly)
    rounded &= 1
    rounded += bits
    rounded += 0x7FFF
    rounded >>= 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = (bits[nan] >> 16 & 0x8000) | 0x7FC0
    return out.view(dst)


def _to_e4m3fn(v: np.ndarray, dst: np.dtype) -> np.ndarray:
    if v.dtype == dst:
        return v
    return np.clip(as_f32(v), -E4M3FN_MAX, E4M3FN_MAX).astype(dst)  # NaN passes clip unchanged


def _to_e2m1fn(v: np.ndarray, dst: np.dtype) -> np.ndarray:
    if v.dtype == dst:
        return v
    x = as_f32(v)
    return np.where(np.isnan(x), np.float32(0.0), x).astype(dst)  # ml_dtypes saturates to +-6 itself


_FLOAT_RULES = {"float8_e4m3fn": _to_e4m3fn, "float4_e2m1fn": _to_e2m1fn}


# --- packed MX types -------------------------------------------------------------------------

def pack(elements: np.ndarray, name: str) -> np.ndarray:
    """Values of a packed type's element dtype, last axis 4*n long, packed into
    n elements of its storage (uint32 for fp8 x4, uint16 for fp4 x4)."""
    d = DTYPES[name]
    elements = np.ascontiguousarray(convert(elements, d.element))
    shape = elements.shape
    if not shape or shape[-1] % d.lanes:
        raise ValueError(f"{name} packs {d.lanes} values per element: the last axis ({shape}) must be a multiple")
    codes = elements.view(np.uint8).reshape(shape[:-1] + (shape[-1] // d.lanes, d.lanes))
    if d.itemsize == d.lanes:  # a byte per value: lane i is byte i of a little-endian word
        return np.ascontiguousarray(codes).view("<u%d" % d.itemsize).reshape(codes.shape[:-1]).astype(storage(name))
    bits = 8 * d.itemsize // d.lanes  # fp4: a nibble per value
    out = np.zeros(codes.shape[:-1], dtype=np.uint64)
    for lane in range(d.lanes):
        out |= (codes[..., lane].astype(np.uint64) & ((1 << bits) - 1)) << np.uint64(lane * bits)
    return out.astype(storage(name))


def unpack(packed: np.ndarray, name: str) -> np.ndarray:
    """The element values of a packed array (last axis 4x as long), as its
    element dtype (ml_dtypes)."""
    d = DTYPES[name]
    packed = np.asarray(packed).astype(storage(name))
    bits = 8 * d.itemsize // d.lanes
    lanes = [(packed.astype(np.uint64) >> np.uint64(lane * bits)) & np.uint64((1 << bits) - 1)
             for lane in range(d.lanes)]
    codes = np.stack(lanes, axis=-1).astype(np.uint8)
    return codes.reshape(packed.shape[:-1] + (packed.shape[-1] * d.lanes,) if packed.ndim else (d.lanes,)
                         ).view(storage(d.element))


# --- random inputs -----------------------------------------------------------------------------

def random_values(rng: np.random.Generator, name: str, shape, int_high: int = 16) -> np.ndarray:
    """Random test data of NKI dtype `name` in its storage: integers in
    [0, int_high), standard normal floats rounded into the dtype, powers of
    two for e8m0 scales, packed normal values for the `*_x4` types."""
    d = DTYPES[name]
    shape = tuple(shape)
    if d.kind in ("int", "uint"):
        return rng.integers(0, int_high, size=shape).astype(storage(name))
    if d.kind == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if d.kind == "packed":
        return pack(rng.standard_normal(shape[:-1] + (shape[-1] * d.lanes,), dtype=np.float32), name)
    if name == "float8_e8m0fnu":
        return convert(2.0 ** rng.integers(-4, 5, size=shape), name)
    return convert(rng.standard_normal(shape, dtype=np.float32), name)
