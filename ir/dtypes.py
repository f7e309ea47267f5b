"""Every dtype the IR names: its size on the device and how a simulator holds it.

One table (`DTYPES`) says, per NKI dtype name, its kind, its itemsize on the
device, and its storage: a numpy type, an ml_dtypes type (bf16, fp8, fp4,
e8m0: imported only when a kernel uses one, because importing ml_dtypes
costs most of a second), or, for the packed MX types (`*_x4`, four values in
one element), the unsigned integer of the element's width; nkicc.simulator.
numerics packs and unpacks them. tfloat32 is held as float32, as the
vendor's simulator does.

`storage(name, precise=False)` is NKI_PRECISE_FP=0: every float dtype held
as float32, so a kernel's precision loss can be told from a logic bug.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    kind: str              # "float", "int", "uint", "bool" or "packed"
    itemsize: int          # bytes of one element on the device
    numpy: str = ""        # numpy storage type name, or
    ml: str = ""           # the ml_dtypes attribute holding it
    element: str = ""      # packed: the dtype of each of the `lanes` values
    lanes: int = 1


_TABLE = (
    DType("bool", "bool", 1, numpy="bool"),
    DType("int8", "int", 1, numpy="int8"), DType("int16", "int", 2, numpy="int16"),
    DType("int32", "int", 4, numpy="int32"),
    DType("uint8", "uint", 1, numpy="uint8"), DType("uint16", "uint", 2, numpy="uint16"),
    DType("uint32", "uint", 4, numpy="uint32"),
    DType("float16", "float", 2, numpy="float16"), DType("float32", "float", 4, numpy="float32"),
    DType("tfloat32", "float", 4, numpy="float32"),
    DType("bfloat16", "float", 2, ml="bfloat16"),
    # NKI's float8_e4m3 is the IEEE-style format with infinities (max 240), ml_dtypes.float8_e4m3;
    # float8_e4m3fn is OCP FP8 (no inf, max 448). See docs/numerics.md.
    DType("float8_e4m3", "float", 1, ml="float8_e4m3"),
    DType("float8_e4m3fn", "float", 1, ml="float8_e4m3fn"),
    DType("float8_e5m2", "float", 1, ml="float8_e5m2"),
    DType("float8_e8m0fnu", "float", 1, ml="float8_e8m0fnu"),
    DType("float4_e2m1fn", "float", 1, ml="float4_e2m1fn"),  # one fp4 value per byte, as ml_dtypes holds it
    # packed MX types: four values per element; fp8 x4 is 32 bits, fp4 x4 16 bits (4 nibbles)
    DType("float8_e4m3fn_x4", "packed", 4, numpy="uint32", element="float8_e4m3fn", lanes=4),
    DType("float8_e5m2_x4", "packed", 4, numpy="uint32", element="float8_e5m2", lanes=4),
    DType("float4_e2m1fn_x4", "packed", 2, numpy="uint16", element="float4_e2m1fn", lanes=4),
)
DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}
NAMES = tuple(DTYPES)
ML_NAMES = tuple(d.name for d in _TABLE if d.ml)          # need ml_dtypes (lazily imported)
PACKED_NAMES = tuple(d.name for d in _TABLE if d.kind == "packed")


def ml_dtype(name: str):
    """The ml_dtypes scalar type of bfloat16 / float8_* / float4_* (imports ml_dtypes)."""
    import ml_dtypes
    return getattr(ml_dtypes, DTYPES[name].ml)


def storage(name: str, precise: bool = True) -> np.dtype:
    """The numpy dtype a simulator holds `name` in; precise=False holds every
    float dtype as float32 (NKI_PRECISE_FP=0)."""
    d = DTYPES[name]
    if not precise and d.kind == "float":
        return np.dtype(np.float32)
    if d.ml:
        return np.dtype(ml_dtype(name))
    return np.dtype(d.numpy)


def itemsize(name: str) -> int:
    return DTYPES[name].itemsize


def is_float(name: str) -> bool:
    return DTYPES[name].kind == "float"


def name_of_numpy(dt: np.dtype) -> str | None:
    """The IR name of a numpy dtype, or None (uint32 is uint32, never a packed type)."""
    return _name_of_dtype(dt) if isinstance(dt, np.dtype) else _scan(dt)


def _scan(dt) -> str | None:
    for d in _TABLE:
        if d.numpy and d.kind != "packed" and d.name != "tfloat32" and np.dtype(d.numpy) == dt:
            return d.name
    if "ml_dtypes" in sys.modules:  # an ml_dtypes array exists only if it was imported
        for name in ML_NAMES:
            if np.dtype(ml_dtype(name)) == dt:
                return name
    return None


# (a tracer asks once per operand: the scan was 3% of tracing the library's attention block; an
# ml_dtypes dtype reaches here only once ml_dtypes is imported, so a cached answer stays right)
_name_of_dtype = functools.lru_cache(maxsize=256)(_scan)
