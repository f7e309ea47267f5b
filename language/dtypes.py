"""NKI dtypes as kernels name them (`nl.float32`, `nl.bfloat16`, ...).
Tensors record a dtype by canonical name; see nkicc.ir.dtypes for storage.

`nl.float32` and `t.dtype` are numpy dtype objects (`np.dtype("float32")`,
ml_dtypes' for bf16/fp8/fp4), like a numpy array's `.dtype`: they compare
equal to the scalar types (`nl.float32 == np.float32`) and str() gives the
plain name ("float32", "bfloat16", "float8_e4m3"), which kernels compare
(`str(t.dtype) == str(nl.bfloat16)`, `getattr(nl, str(t.dtype))`). The
types numpy lacks (`*_x4`, tfloat32) are names with the same str()."""
from __future__ import annotations

import functools

import numpy as np

from ..ir import NkiccError
from ..ir.dtypes import ML_NAMES, NAMES, is_float, itemsize, ml_dtype, name_of_numpy, storage  # noqa: F401


class _NamedDtype:
    """A dtype numpy has no type for (tfloat32, the packed MX types `*_x4`):
    a name; nkicc.ir.dtypes says how it is stored."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __str__(self) -> str:
        return self.name


bool_ = np.dtype(np.bool_)
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
float16, float32 = np.dtype(np.float16), np.dtype(np.float32)
tfloat32 = _NamedDtype("tfloat32")
float8_e4m3fn_x4 = _NamedDtype("float8_e4m3fn_x4")
float8_e5m2_x4 = _NamedDtype("float8_e5m2_x4")
float4_e2m1fn_x4 = _NamedDtype("float4_e2m1fn_x4")
LAZY = ML_NAMES  # bf16, fp8, fp4, e8m0: ml_dtypes types, imported on first use


def __getattr__(name: str):
    if name in LAZY:
        return np.dtype(ml_dtype(name))
    if name == "bool":  # nl.bool as well as nl.bool_ (a module attribute named bool would shadow the builtin)
        return bool_
    raise AttributeError(name)


_ALIASES = {"bool_": "bool", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
            "fp8_e4m3": "float8_e4m3", "fp8_e5m2": "float8_e5m2", "fp8_e4m3fn": "float8_e4m3fn",
            "float8e4": "float8_e4m3", "float8e5": "float8_e5m2", "float": "float32", "int": "int32"}
_NUMPY_PUBLIC = {"bool": bool_, "int8": int8, "int16": int16, "int32": int32, "uint8": uint8, "uint16": uint16,
                 "uint32": uint32, "float16": float16, "float32": float32, "tfloat32": tfloat32,
                 "float8_e4m3fn_x4": float8_e4m3fn_x4, "float8_e5m2_x4": float8_e5m2_x4,
                 "float4_e2m1fn_x4": float4_e2m1fn_x4}


def dtype_name(dtype) -> str:
    """Canonical name of anything that denotes a dtype."""
    if isinstance(dtype, _NamedDtype):
        return dtype.name
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in NAMES:
            return name
        raise NkiccError("E160", f"unknown dtype {dtype!r}", hint=f"use one of {', '.join(NAMES)}")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise NkiccError("E160", f"not a dtype: {dtype!r}", hint="use nl.float32, nl.bfloat16, ...") from None
    name = name_of_numpy(np_dtype)
    if name is not None:
        return name
    if np_dtype == np.dtype(np.float64):
        return "float32"
    if np_dtype == np.dtype(np.int64):
        return "int32"
    raise NkiccError("E160", f"dtype {np_dtype} is not an NKI dtype", hint="use nl.float32, nl.bfloat16, ...")


@functools.lru_cache(maxsize=None)  # (asked for every view a kernel reads `.dtype` of: 245 k times a compile)
def public(name: str):
    """The object `t.dtype` returns for a tensor of this dtype."""
    return _NUMPY_PUBLIC[name] if name in _NUMPY_PUBLIC else np.dtype(ml_dtype(name))
