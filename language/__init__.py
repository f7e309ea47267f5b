"""nkicc.language (`nl`): tensors, buffers, dtypes, loop iterators, operations."""
from .creation import (
    empty_like, full, hbm, ndarray, ones, ones_like, par_dim, private_hbm, psum, sbuf, shared_hbm, tile_size,
    zeros, zeros_like,
)
from .dtypes import bool_, float16, float32, int8, int16, int32, tfloat32, uint8, uint16, uint32
from .ops import (  # noqa: F401 - the op functions are generated in ops
    abs, add, bitwise_and, bitwise_or, bitwise_xor, broadcast_to, bypass, ceil, copy, cos, divide, equal, exp,
    expand_dims, floor, gelu, gelu_apprx_tanh, greater, greater_equal, identity, less, less_equal, load,
    load_transpose2d, log, logical_and, logical_or, logical_xor, matmul, max, maximum, mean, min, minimum, multiply,
    negative, not_equal, power, prod, reciprocal, relu, rsqrt, sigmoid, sign, silu, sin, softmax, sqrt,
    square, store, subtract, sum, tanh, transpose, var, where,
)
from . import dtypes
from .control import fori_loop, while_loop
from .ranges import affine_range, dynamic_range, sequential_range, static_range
from .spmd import num_programs, program_id, program_ndim
from .tensor import DynSlice, Tensor, ds, unsupported_name


def __getattr__(name: str):
    # bf16/fp8 dtypes import ml_dtypes, which is slow: only when a kernel asks
    if name in dtypes.LAZY:
        return dtypes.ml_dtype(name)
    if name.startswith("_"):
        raise AttributeError(f"module 'nkicc.language' has no attribute {name!r}")
    raise unsupported_name("nl", name)
