"""`import neuron_dtypes`, the dtype package the NKI Library's test suite
uses for its inputs and goldens (it ships inside the vendor's compiler wheels),
served by nkicc where it is not installed: this folder comes last on sys.path,
so an installed `neuron_dtypes` is found first and never shadowed.

What the suite calls, written from what it documents and how it uses it:

- the dtypes by name (`bfloat16`, `float8_e4m3`, ...): ml_dtypes' numpy dtypes,
  the same objects as `nl.bfloat16` (nkicc.ir.dtypes says which format each is);
- `static_cast(array, dtype)`: the array's values as `dtype`, rounded to nearest
  even and saturated as nkicc's simulators convert (nkicc.ir.numerics,
  docs/numerics.md): ml_dtypes' `astype` for the float formats, except that
  float8_e4m3fn saturates to +-448 and integers round and saturate;
- the packed MX types (`float8_e4m3fn_x4`, `float8_e5m2_x4`,
  `float4_e2m1fn_x4`): a cast to one packs four values of the last axis into
  one element (uint32 for fp8, uint16 for fp4), a cast from one unpacks them.
  A packed array's dtype is its storage dtype tagged with the type's name
  (numpy dtype metadata), which is how a later cast knows it is packed. The
  lane order inside an element is not public; nkicc's is lane 0 in the lowest
  bits (nkicc.ir.numerics.pack), the one its simulators read;
- `sizeinbytes(dtype)`, `finfo(dtype)`, `is_float_type(dtype)`.
"""
import ml_dtypes
import numpy as np

from nkicc.ir import dtypes as _ir
from nkicc.ir import numerics as _numerics
from nkicc.language.dtypes import dtype_name as _dtype_name

_TAG = "nki_dtype"


def _packed(name: str) -> np.dtype:
    return np.dtype(_ir.storage(name), metadata={_TAG: name})


float8_e4m3fn_x4 = _packed("float8_e4m3fn_x4")
float8_e5m2_x4 = _packed("float8_e5m2_x4")
float4_e2m1fn_x4 = _packed("float4_e2m1fn_x4")


def name(dtype) -> str:
    """The NKI name of anything that denotes a dtype (a tagged packed dtype included)."""
    if isinstance(dtype, np.dtype) and dtype.metadata and _TAG in dtype.metadata:
        return dtype.metadata[_TAG]
    return _dtype_name(dtype)


def dtype(name_or_dtype) -> np.dtype:
    """The numpy dtype arrays of this NKI dtype have (a packed type's tagged storage)."""
    n = name(name_or_dtype)
    return _packed(n) if n in _ir.PACKED_NAMES else _ir.storage(n)


def static_cast(array, dtype):
    """`array` as `dtype` (see the module docstring)."""
    dst = name(dtype)
    a = np.asarray(array)
    src = name(a.dtype) if a.dtype.metadata else None
    if src in _ir.PACKED_NAMES:
        if dst == src:
            return a
        a = _numerics.unpack(a, src)
    if dst in _ir.PACKED_NAMES:
        return np.ascontiguousarray(_numerics.convert(a, dst)).view(_packed(dst))
    return _numerics.convert(a, _ir.storage(dst))


def sizeinbytes(dtype) -> int:
    """Bytes of one element (4 for the fp8 x4 types, 2 for fp4 x4)."""
    return _ir.itemsize(name(dtype))


def is_float_type(dtype) -> bool:
    """Whether the dtype is a floating-point format (the packed MX types included)."""
    d = _ir.DTYPES[name(dtype)]
    return d.kind == "float" or d.kind == "packed"


def finfo(dtype):
    """numpy/ml_dtypes finfo of a float format (a packed type's element format)."""
    d = _ir.DTYPES[name(dtype)]
    return ml_dtypes.finfo(_ir.storage(d.element if d.kind == "packed" else d.name))


def __getattr__(attr: str):
    # the scalar dtypes by their NKI names (bfloat16, float8_e4m3, int32, ...): nl's objects
    if attr in _ir.DTYPES and attr not in _ir.PACKED_NAMES:
        return _ir.storage(attr)
    raise AttributeError(f"module 'neuron_dtypes' has no attribute {attr!r}")
