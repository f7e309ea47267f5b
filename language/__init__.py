"""nkicc.language (`nl`): tensors, buffers, dtypes, loop iterators, operations.

How rolling works is in this folder too, in the order a trace meets it:
ranges.py (the loop iterators a kernel writes), kernel_trace.py (runs the
kernel's Python in attempts and retries with what each attempt learned),
tracing.py (the IR builder: one symbolic index per rolled loop, and the
questions that force a loop to split or go concrete) and loop_effects.py (the
proof, from the AST, that a loop body carries no Python state from one
iteration to the next, without which tracing it once would be wrong).
"""
from .creation import (
    MemoryRegion, empty_like, full, hbm, is_hbm, is_on_chip, is_psum, is_sbuf, ndarray, ones, ones_like, par_dim,
    private_hbm, psum, sbuf, shared_hbm, tile_size, zeros, zeros_like,
)
from .dtypes import (
    bool_, float4_e2m1fn_x4, float8_e4m3fn_x4, float8_e5m2_x4, float16, float32, int8, int16, int32, tfloat32,
    uint8, uint16, uint32,
)
from .ops import (  # noqa: F401 - the op functions are generated in ops
    abs, abs_max, abs_min, add, all, arctan, average, bitwise_and, bitwise_or, bitwise_xor, broadcast_to, bypass, ceil, copy,
    cos, device_print, divide, equal, erf, erf_dx, exp, expand_dims, floor, fmod, gelu, gelu_apprx_sigmoid,
    gather_flattened, gelu_apprx_sigmoid_dx, gelu_apprx_tanh, gelu_dx, greater, greater_equal, identity, invert, left_shift, less,
    less_equal, load, load_transpose2d, log, logical_and, logical_not, logical_or, logical_xor, matmul, max, maximum,
    mean, min, minimum, mish, mod, multiply, negative, not_equal, power, prelu, prod, reciprocal, relu, right_shift,
    rms_norm, rsqrt, shared_constant, shared_identity_matrix, sigmoid, sign, silu, silu_dx, sin, softmax, softplus, sqrt, square,
    store, subtract, sum, tan, tanh, transpose, trunc, var, where,
)
from . import dtypes, operators  # noqa: F401 - operators: NkiTensor's Python operators (a + b)
from .control import fori_loop, while_loop
from .objects import NKIObject
from .rng import dropout, rand, random_seed
from .ranges import affine_range, dynamic_range, no_reorder, sequential_range, static_range
from .ranges import range as _static_range  # nl.range (see __getattr__)
from .spmd import num_programs, program_id, program_ndim
from .tensor import DynSlice, NkiTensor, Tensor, ds
from .tensor import unsupported_name as _unsupported_name


def __dir__():
    # the bf16/fp8 dtypes exist although they are made on first use
    return sorted(set(globals()) | set(dtypes.LAZY))


def __getattr__(name: str):
    # bf16/fp8/fp4/e8m0 dtypes import ml_dtypes, which is slow: only when a kernel asks
    if name in dtypes.LAZY:
        return dtypes.__getattr__(name)  # (a numpy dtype object)
    if name == "bool":
        return bool_
    if name == "range":  # the NKI Library writes nl.range: a static loop. Not a public global, so that
        return _static_range  # `from nl import *` keeps Python's own range
    if name.startswith("_"):
        raise AttributeError(f"module 'nkicc.language' has no attribute {name!r}")
    raise _unsupported_name("nl", name)
