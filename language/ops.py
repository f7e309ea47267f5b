"""nl operations: each returns a new tile (SBUF unless noted) and is built
from the instructions in nkicc.isa."""
from __future__ import annotations

import functools

import numpy as np

from ..ir import Access, NkiccError
from .. import isa
from . import dtypes
from .creation import new_tensor
from ..ir.ops.alu import BINARY, UNARY, Named
from ..ir.ops.checks import normalize_axes
from .allocation import concrete_shape
from .emit import emit_internal
from .tensor import Tensor, broadcast_view
from .tracing import user_loc


def _tile(x, what: str, loc) -> Tensor:
    if not isinstance(x, Tensor):
        raise NkiccError("E103", f"{what} must be a tensor, got {type(x).__name__}", loc)
    return x


def _out_dtype(dtype, *tiles: Tensor) -> str:
    if dtype is not None:
        return dtypes.dtype_name(dtype)
    names = {t.decl.dtype for t in tiles}
    if len(names) == 1:
        return names.pop()
    return "float32" if any(dtypes.is_float(n) for n in names) else "int32"


def _axes(axis, ndim: int, loc) -> tuple[int, ...]:
    try:
        return normalize_axes(axis, ndim)
    except NkiccError as e:
        e.loc = e.loc or loc
        raise


def _broadcast_shape(a: Tensor, b: Tensor, loc) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise NkiccError("E140", f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast", loc) from None


# --- memory ---------------------------------------------------------------------

def load(src, dtype=None, mask=None, name="", **_hints) -> Tensor:
    """A new SBUF tile holding `src` (an HBM tensor or a slice of one), cast to `dtype` if given."""
    loc = user_loc(2)
    src = _tile(src, "nl.load source", loc)
    out = new_tensor(src.shape, dtype or src.dtype, "sbuf", name, loc)
    isa.dma_copy(out, src)
    return out


def store(dst, value, mask=None, **_hints) -> None:
    """Write the tile `value` into `dst` (an HBM tensor or a slice of one of the same shape)."""
    loc = user_loc(2)
    dst, value = _tile(dst, "nl.store dst", loc), _tile(value, "nl.store value", loc)
    isa.dma_copy(dst, value)


def load_transpose2d(src, dtype=None, mask=None, name="", **_hints) -> Tensor:
    """nl.load of the transpose of a 2-d HBM slice: a new SBUF tile [cols, rows]."""
    loc = user_loc(2)
    src = _tile(src, "nl.load_transpose2d source", loc)
    if len(src.shape) != 2:
        raise NkiccError("E140", f"load_transpose2d needs a 2-d source, got {list(src.shape)}", loc)
    a = src.access
    if a.vector is not None:
        raise NkiccError("E160", "load_transpose2d of a vector_offset or indirect view is not supported", loc)
    transposed = Tensor(src.builder, src.decl, Access(a.tensor, a.offset, (a.pattern[1], a.pattern[0]),
                                                      a.scalar, a.scalar_scale, a.dtype, a.vector))
    out = new_tensor(transposed.shape, dtype or src.dtype, "sbuf", name, loc)
    isa.dma_copy(out, transposed)
    return out


def copy(x, dtype=None, name="", **_hints) -> Tensor:
    """A new SBUF tile with the values of tile `x`, cast to `dtype` if given."""
    loc = user_loc(2)
    x = _tile(x, "nl.copy source", loc)
    out = new_tensor(x.shape, dtype or x.dtype, "sbuf", name, loc)
    isa.tensor_copy(out, x)
    return out


# --- element-wise -----------------------------------------------------------------

COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})


def _compared(out: Tensor, op: str) -> Tensor:
    """A comparison's result tile is marked: its truth in an `if` is a mistake (NkiTensor.__bool__)."""
    if op in COMPARISONS:
        out.builder.compared.add(out.decl.name)
    return out


def _binary(op: str):
    def fn(x, y, dtype=None, mask=None, name="", **_hints) -> Tensor:
        loc = user_loc(2)
        xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
        if xt and yt:
            shape = _broadcast_shape(x, y, loc)
            out = new_tensor(shape, _out_dtype(dtype, x, y), "sbuf", name, loc)
            isa.tensor_tensor(out, broadcast_view(x, shape, loc), broadcast_view(y, shape, loc), op)
            return _compared(out, op)
        if not (xt or yt):
            raise NkiccError("E103", f"nl.{op} needs at least one tile operand", loc)
        tile, scalar = (x, y) if xt else (y, x)
        out = new_tensor(tile.shape, _out_dtype(dtype, tile), "sbuf", name, loc)
        isa.tensor_scalar(out, tile, op, scalar, reverse0=not xt)
        return _compared(out, op)
    fn.__name__ = op
    fn.__doc__ = (f"Element-wise {op} of x and y into a new SBUF tile: two tiles (broadcast against "
                  f"each other), or a tile and a number.")
    fn._nki_op = op
    return fn


def _unary(op: str):
    def fn(x, dtype=None, mask=None, name="", **_hints) -> Tensor:
        loc = user_loc(2)
        x = _tile(x, f"nl.{op} operand", loc)
        out = new_tensor(x.shape, _out_dtype(dtype, x), "sbuf", name, loc)
        isa.activation(out, op, x)
        return out
    fn.__name__ = op
    fn.__doc__ = f"Element-wise {op} of tile x into a new SBUF tile (an activation instruction)."
    fn._nki_op = op
    return fn


for _op in BINARY:
    globals()[_op] = _binary(_op)
for _op in UNARY:
    if _op not in ("copy", "prelu"):
        globals()[_op] = _unary(_op)

# operators named as arguments only: nl.prelu is an activation `op` (its slope is
# activate2's relu_param), nl.average a partition reduction (tensor_partition_reduce)
prelu = Named("prelu")
average = Named("average")

_invert = _unary("invert")


def invert(x, dtype=None, mask=None, name="", **_hints) -> Tensor:
    """~x, bitwise, on a signed integer tile (computed as -x - 1)."""
    loc = user_loc(2)
    x = _tile(x, "nl.invert operand", loc)
    if dtypes.is_float(x.decl.dtype) or x.decl.dtype == "bool":
        raise NkiccError("E103", f"nl.invert needs an integer tile, {x.name} is {x.decl.dtype}", loc,
                         "use nl.logical_not for a 0/1 mask")
    if x.decl.dtype.startswith("uint"):
        raise NkiccError("E160", f"nl.invert of an unsigned tile ({x.decl.dtype}) is not supported yet", loc,
                         "use a signed integer tile")
    return _invert(x, dtype=dtype, name=name)


invert._nki_op = "invert"


def where(condition, x, y, dtype=None, name="", **_hints) -> Tensor:
    """x where condition is non-zero, else y, into a new SBUF tile; x and y are tiles or numbers."""
    loc = user_loc(2)
    condition = _tile(condition, "nl.where condition", loc)
    tiles = [t for t in (condition, x, y) if isinstance(t, Tensor)]
    shape = condition.shape
    for t in tiles:
        shape = tuple(np.broadcast_shapes(shape, t.shape))
    out = new_tensor(shape, _out_dtype(dtype, *[t for t in (x, y) if isinstance(t, Tensor)] or [condition]),
                     "sbuf", name, loc)
    views = [broadcast_view(t, shape, loc) if isinstance(t, Tensor) else t for t in (condition, x, y)]
    isa.select(out, *views)
    return out


# --- reductions -----------------------------------------------------------------

def _reduce_shape(x: Tensor, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _reduce(op: str, nl_name: str):
    def fn(x, axis, dtype=None, keepdims=False, mask=None, name="", **_hints) -> Tensor:
        loc = user_loc(2)
        x = _tile(x, f"nl.{nl_name} operand", loc)
        axes = _axes(axis, len(x.shape), loc)
        out = new_tensor(_reduce_shape(x, axes, keepdims), _out_dtype(dtype, x), "sbuf", name, loc)
        isa.tensor_reduce(out, op, x, axes)
        return out
    fn.__name__ = nl_name
    fn.__doc__ = (f"The {nl_name} of tile x along `axis` (a free axis or a tuple of them) into a new SBUF "
                  f"tile; keepdims keeps the reduced axes with size 1.")
    return fn


sum = _reduce("add", "sum")  # noqa: A001
max = _reduce("maximum", "max")  # noqa: A001
min = _reduce("minimum", "min")  # noqa: A001
prod = _reduce("multiply", "prod")


def all(x, axis, dtype=None, mask=None, name="", **_hints) -> Tensor:  # noqa: A001
    """1 where every element along `axis` is nonzero, else 0."""
    loc = user_loc(2)
    x = _tile(x, "nl.all operand", loc)
    axes = _axes(axis, len(x.shape), loc)
    nonzero = new_tensor(x.shape, "float32", "sbuf", "", loc)
    isa.tensor_scalar(nonzero, x, "not_equal", 0.0)
    out = new_tensor(_reduce_shape(x, axes, False), _out_dtype(dtype, x), "sbuf", name, loc)
    isa.tensor_reduce(out, "minimum", nonzero, axes)
    return out


def mean(x, axis, dtype=None, keepdims=False, mask=None, name="", **_hints) -> Tensor:
    """The mean of tile x along `axis` into a new SBUF tile."""
    loc = user_loc(2)
    x = _tile(x, "nl.mean operand", loc)
    axes = _axes(axis, len(x.shape), loc)
    count = functools.reduce(lambda a, b: a * b, (x.shape[a] for a in axes), 1)
    out = new_tensor(_reduce_shape(x, axes, keepdims), _out_dtype(dtype, x), "sbuf", name, loc)
    isa.tensor_reduce(out, "add", x, axes)
    isa.tensor_scalar(out, out, "multiply", 1.0 / count)
    return out


def var(x, axis, dtype=None, keepdims=False, mask=None, name="", **_hints) -> Tensor:
    """The (population) variance of tile x along `axis` into a new SBUF tile, computed in fp32."""
    loc = user_loc(2)
    x = _tile(x, "nl.var operand", loc)
    m = mean(x, axis, dtype="float32", keepdims=True)
    d = subtract(x, m, dtype="float32")
    sq = multiply(d, d)
    return mean(sq, axis, dtype=dtype or x.dtype, keepdims=keepdims, name=name)


def softmax(x, axis=-1, dtype=None, name="", **_hints) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` into a new SBUF tile, computed in fp32."""
    loc = user_loc(2)
    x = _tile(x, "nl.softmax operand", loc)
    m = max(x, axis, dtype="float32", keepdims=True)
    e = exp(subtract(x, m, dtype="float32"))
    s = sum(e, axis, keepdims=True)
    return divide(e, s, dtype=dtype or x.dtype, name=name)


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None, name="", **_hints) -> Tensor:
    """x / sqrt(sum(x**2 along axis) / n + epsilon) * w."""
    loc = user_loc(2)
    x, w = _tile(x, "nl.rms_norm x", loc), _tile(w, "nl.rms_norm w", loc)
    work = dtypes.dtype_name(compute_dtype) if compute_dtype is not None else "float32"
    axes = _axes(axis, len(x.shape), loc)
    if not isinstance(n, (int, float)) or isinstance(n, bool) or n <= 0:
        raise NkiccError("E103", f"nl.rms_norm n must be a positive number, got {n!r}", loc)
    sq = new_tensor(x.shape, work, "sbuf", "", loc)
    isa.tensor_tensor(sq, x, x, "multiply")
    ms = new_tensor(_reduce_shape(x, axes, True), work, "sbuf", "", loc)
    isa.tensor_reduce(ms, "add", sq, axes)
    isa.tensor_scalar(ms, ms, "multiply", 1.0 / n, op1="add", operand1=float(epsilon))
    isa.activation(ms, "rsqrt", ms)
    shape = x.shape
    scaled = new_tensor(shape, work, "sbuf", "", loc)
    isa.tensor_tensor(scaled, x, broadcast_view(ms, shape, loc), "multiply")
    out = new_tensor(shape, dtype or x.dtype, "sbuf", name, loc)
    isa.tensor_tensor(out, scaled, broadcast_view(w, shape, loc), "multiply")
    return out


# --- debugging -------------------------------------------------------------------

def device_print(print_prefix, tensor) -> None:
    """Print `print_prefix` and the tensor's value (SBUF or HBM) when the simulation
    reaches this line (every iteration, in a loop): to stdout, and into the
    machine simulator's SimReport.prints. The op is nisa.device_print (ir/ops/debug.py)."""
    isa.device_print(print_prefix, tensor)


# --- constants -------------------------------------------------------------------

def shared_identity_matrix(n, dtype=np.uint8, dst=None, **_hints) -> Tensor:
    """An n x n identity matrix in SBUF (or written into `dst`), built on chip:
    iota gives j - p, and (j - p) == 0 is the identity."""
    loc = user_loc(2)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 128:
        raise NkiccError("E103", f"nl.shared_identity_matrix n must be an int in 1..128, got {n!r}", loc,
                         "the rows are partitions: at most 128")
    if dst is not None:
        dst = _tile(dst, "nl.shared_identity_matrix dst", loc)
        if tuple(dst.shape) != (n, n):
            raise NkiccError("E140", f"nl.shared_identity_matrix dst must be [{n}, {n}], got {list(dst.shape)}", loc)
    out = dst if dst is not None else new_tensor((n, n), dtype, "sbuf", "identity", loc)
    diff = new_tensor((n, n), "int32", "sbuf", "", loc)
    isa.iota(diff, [[1, n]], offset=0, channel_multiplier=-1)
    isa.tensor_scalar(out, diff, "equal", 0)
    return out


# dtypes nl.shared_constant embeds (the reference's list; packed fp4/fp8x4 and tfloat32 are not)
_CONSTANT_DTYPES = ("float32", "float16", "bfloat16", "int32", "int16", "int8", "uint32", "uint16", "uint8",
                    "float8_e4m3fn", "float8_e4m3", "float8_e5m2", "float8_e8m0fnu")


def shared_constant(constant, **_hints) -> Tensor:
    """A new shared-HBM tensor holding `constant` (a numpy array, or the path
    of a .npy file) from the start: the data travels in the compiled program,
    so it costs no instruction time. Its dtype is the array's (float64 and
    int64 arrays are refused: say float32 or int32)."""
    loc = user_loc(2)
    if isinstance(constant, (str, bytes)) or hasattr(constant, "__fspath__"):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise NkiccError("E103", f"nl.shared_constant cannot read {constant!r}: {e}", loc,
                             "pass a numpy array or the path of a .npy file") from None
    if isinstance(constant, Tensor) or not hasattr(constant, "dtype") and not isinstance(constant, (list, tuple)):
        raise NkiccError("E103", f"nl.shared_constant takes a numpy array or a .npy path, got "
                                 f"{type(constant).__name__}", loc)
    arr = np.asarray(constant)
    if arr.dtype in (np.float64, np.int64) or arr.dtype.kind not in "iuf" and arr.dtype.type.__module__ != "ml_dtypes":
        raise NkiccError("E132", f"nl.shared_constant of a {arr.dtype} array; it embeds "
                                 f"{', '.join(_CONSTANT_DTYPES)}", loc, "convert it first, e.g. .astype(np.float32)")
    dt = dtypes.dtype_name(arr.dtype)
    if dt not in _CONSTANT_DTYPES:
        raise NkiccError("E132", f"nl.shared_constant of {dt}; it embeds {', '.join(_CONSTANT_DTYPES)}", loc)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    out = new_tensor(arr.shape, dt, "shared_hbm", "constant", loc)
    emit_internal("shared_constant", out, arr, loc=loc)
    return out


def gather_flattened(data, indices, axis=0, dtype=None, **_hints) -> Tensor:
    """A new SBUF tile shaped like `indices`: out[p, j] = data[p, indices[p, j]]
    with data's free axes flattened (a gather inside each partition,
    nisa.nc_n_gather on the GpSimd Engine), cast to `dtype` when given.
    indices are integers in [0, data's elements per partition); int32
    indices are converted to uint32 first. axis: 0 (the only one)."""
    loc = user_loc(2)
    data, indices = _tile(data, "nl.gather_flattened data", loc), _tile(indices, "nl.gather_flattened indices", loc)
    if axis not in (0, -len(data.shape)):
        raise NkiccError("E103", f"nl.gather_flattened gathers within each partition (axis=0), got axis={axis!r}",
                         loc, "leave axis=0")
    if dtypes.is_float(indices.decl.dtype):
        raise NkiccError("E132", f"nl.gather_flattened indices are {indices.decl.dtype}; they must be integers",
                         loc, "give the indices as int32 or uint32")
    if indices.decl.dtype != "uint32":
        idx = new_tensor(indices.shape, "uint32", "sbuf", "", loc)
        isa.tensor_copy(idx, indices)
        indices = idx
    out = new_tensor(indices.shape, data.decl.dtype, "sbuf", "", loc)
    isa.nc_n_gather(out, data, indices)
    if dtype is None or dtypes.dtype_name(dtype) == data.decl.dtype:
        return out
    cast = new_tensor(indices.shape, dtype, "sbuf", "", loc)
    isa.tensor_copy(cast, out)
    return cast


# --- matmul and layout ------------------------------------------------------------

def matmul(x, y, transpose_x=False, mask=None, name="", **_hints) -> Tensor:
    """x @ y as a PSUM tile [M, N] (fp32). With transpose_x, x is already [K, M]."""
    loc = user_loc(2)
    x, y = _tile(x, "nl.matmul x", loc), _tile(y, "nl.matmul y", loc)
    if not transpose_x and len(x.shape) == 2 and x.shape[1] > 128:
        raise NkiccError("E130", f"nl.matmul contracts over K={x.shape[1]}; at most 128 per matmul", loc,
                         "tile K by 128 and accumulate the partial products in PSUM")
    stationary = x if transpose_x else transpose(x)
    m = 1
    for d in stationary.shape[1:]:
        m *= d
    n = 1
    for d in y.shape[1:]:
        n *= d
    out = new_tensor((m, n), "float32", "psum", name, loc)
    isa.nc_matmul(out, stationary, y)
    return out


def transpose(x, dtype=None, name="", **_hints) -> Tensor:
    """2-d transpose through the Tensor Engine; the result is an SBUF tile."""
    loc = user_loc(2)
    x = _tile(x, "nl.transpose operand", loc)
    if len(x.shape) != 2:
        raise NkiccError("E140", f"nl.transpose needs a 2-d tile, got {list(x.shape)}", loc)
    p, f = x.shape
    staged = new_tensor((f, p), "float32", "psum", "", loc)
    isa.nc_transpose(staged, x)
    out = new_tensor((f, p), dtype or x.dtype, "sbuf", name, loc)
    isa.tensor_copy(out, staged)
    return out


def broadcast_to(x, shape, dtype=None, **_hints) -> Tensor:
    """A zero-copy view with size-1 dimensions repeated; a new tile when `dtype` differs."""
    loc = user_loc(2)
    x = _tile(x, "nl.broadcast_to operand", loc)
    view = broadcast_view(x, concrete_shape(shape, loc), loc)
    if dtype is None or dtypes.dtype_name(dtype) == x.decl.dtype:
        return view
    out = new_tensor(view.shape, dtype, "sbuf", "", loc)
    isa.tensor_copy(out, view)
    return out


def expand_dims(x, axis, **_hints) -> Tensor:
    """A view of tile x with a new size-1 dimension at `axis` (no copy)."""
    loc = user_loc(2)
    x = _tile(x, "nl.expand_dims operand", loc)
    pattern = list(x.access.pattern)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise NkiccError("E103", f"expand_dims axis must be an int, got {axis!r}", loc)
    axis = axis + len(pattern) + 1 if axis < 0 else axis
    if not 0 <= axis <= len(pattern):
        raise NkiccError("E103", f"expand_dims axis {axis} out of range for {list(x.shape)}", loc)
    pattern.insert(axis, (0, 1))
    a = x.access
    if a.vector_group:
        raise NkiccError("E160", "expand_dims of an indirect view is not supported", loc)
    return Tensor(x.builder, x.decl, Access(a.tensor, a.offset, tuple(pattern), a.scalar, a.scalar_scale, a.dtype, a.vector))
