"""Storage of each dtype the IR names. bf16 and fp8 come from ml_dtypes,
imported only when a kernel uses one (importing it costs most of a second);
tfloat32 is stored as float32."""
from __future__ import annotations

import sys

import numpy as np

_NUMPY = {
    "bool": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32), "float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
    "tfloat32": np.dtype(np.float32),
}
_ML_DTYPES = {"bfloat16": ("bfloat16",), "float8_e4m3": ("float8_e4m3", "float8_e4m3fn"),
              "float8_e5m2": ("float8_e5m2",)}
NAMES = tuple(_NUMPY) + tuple(_ML_DTYPES)
FLOAT_NAMES = ("float16", "float32", "bfloat16", "tfloat32", "float8_e4m3", "float8_e5m2")
_SIZES = {"bfloat16": 2, "float8_e4m3": 1, "float8_e5m2": 1}


def ml_dtype(name: str):
    """The ml_dtypes scalar type for bfloat16 / float8_* (imports ml_dtypes)."""
    import ml_dtypes
    for attr in _ML_DTYPES[name]:
        if hasattr(ml_dtypes, attr):
            return getattr(ml_dtypes, attr)
    raise AttributeError(name)


def storage(name: str) -> np.dtype:
    if name in _NUMPY:
        return _NUMPY[name]
    return np.dtype(ml_dtype(name))


def itemsize(name: str) -> int:
    return _SIZES[name] if name in _SIZES else _NUMPY[name].itemsize


def is_float(name: str) -> bool:
    return name in FLOAT_NAMES


def name_of_numpy(dt: np.dtype) -> str | None:
    """The IR name of a numpy dtype, or None."""
    for name, d in _NUMPY.items():
        if d == dt and name != "tfloat32":
            return name
    if "ml_dtypes" in sys.modules:  # an ml_dtypes array exists only if it was imported
        for name in _ML_DTYPES:
            if np.dtype(ml_dtype(name)) == dt:
                return name
    return None
