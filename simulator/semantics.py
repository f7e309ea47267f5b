"""What each instruction computes, in numpy. Shared by every simulator so that
the reference interpreter and the machine model cannot disagree on arithmetic.

Arithmetic is fp32 (as on the engines): inputs are widened to float32 and results
cast to the destination dtype. Operands arrive as numpy views already cut out
of memory; writes go through `store`.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Const, Op

_F32 = np.float32


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _erfc(x):
    # Chebyshev fit (Numerical Recipes erfcc), relative error < 1.2e-7 everywhere
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (
        0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    r = t * np.exp(-z * z + poly)
    return np.where(x >= 0, r, 2.0 - r)


def _gelu(x):
    # exact (erf) form, as nl.gelu; the tanh approximation is nl.gelu_apprx_tanh
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _as_int(f):
    def g(a, b):
        return f(a.astype(np.int64), np.asarray(b).astype(np.int64)).astype(_F32)
    return g


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "equal": lambda a, b: (a == b).astype(_F32), "not_equal": lambda a, b: (a != b).astype(_F32),
    "less": lambda a, b: (a < b).astype(_F32), "less_equal": lambda a, b: (a <= b).astype(_F32),
    "greater": lambda a, b: (a > b).astype(_F32), "greater_equal": lambda a, b: (a >= b).astype(_F32),
    "logical_and": lambda a, b: np.logical_and(a, b).astype(_F32),
    "logical_or": lambda a, b: np.logical_or(a, b).astype(_F32),
    "logical_xor": lambda a, b: np.logical_xor(a, b).astype(_F32),
    "bitwise_and": _as_int(np.bitwise_and), "bitwise_or": _as_int(np.bitwise_or),
    "bitwise_xor": _as_int(np.bitwise_xor),
}

UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0), "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "square": np.square, "abs": np.abs, "negative": np.negative, "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "sign": np.sign,
    "copy": lambda x: x, "identity": lambda x: x,
}

REDUCE = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod}


def f32(view: np.ndarray) -> np.ndarray:
    return np.asarray(view, dtype=_F32)


def as_tiles(a: np.ndarray) -> np.ndarray:
    """(partition, free) 2-d form of a tile view."""
    if a.ndim == 0:
        return a.reshape(1, 1)
    return a.reshape(a.shape[0], -1)


def store(dst: np.ndarray, values: np.ndarray) -> None:
    """Write values (any float/int array with dst's element count) into dst."""
    values = np.asarray(values).reshape(dst.shape)
    if values.dtype != dst.dtype:
        if np.issubdtype(dst.dtype, np.integer):
            with np.errstate(invalid="ignore", over="ignore"):
                values = np.nan_to_num(values.astype(np.float64), nan=0.0)
                info = np.iinfo(dst.dtype)
                values = np.clip(np.trunc(values), info.min, info.max).astype(dst.dtype)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                values = values.astype(dst.dtype)
    dst[...] = values


def operand(x, read) -> np.ndarray | float:
    """A Const as a float, a [P, 1] tile as a (P, 1) fp32 array."""
    if isinstance(x, Const):
        return _F32(x.value)
    return as_tiles(f32(read(x)))


def compute(op: Op, read) -> list[tuple[int, np.ndarray]]:
    """Evaluate `op`; returns (output index, values) pairs. `read(access)`
    gives the numpy view of an input (PSUM accumulation is the caller's:
    it knows which elements were written before). Callers run
    it under np.errstate(all="ignore") (once per program, not per op: it
    costs a few microseconds to enter): NaN poison and overflow are values
    here, not errors."""
    code = op.opcode
    ins = op.ins
    if code in ("dma_copy", "tensor_copy"):
        src = read(ins[0])
        if op.attr("cast") == "float32":  # a DMA between dtypes converts through fp32
            src = f32(src)
        return [(0, src)]
    if code == "memset":
        return [(0, _F32(op.attr("value")))]
    if code == "nc_matmul":
        # contiguous copies: BLAS picks its kernel (and so the rounding) from the
        # operands' strides and alignment, which differ between simulators' layouts
        st = np.ascontiguousarray(as_tiles(f32(read(ins[0]))))
        mv = np.ascontiguousarray(as_tiles(f32(read(ins[1]))))
        result = st.T @ mv
        return [(0, result)]
    if code == "nc_transpose":
        return [(0, as_tiles(f32(read(ins[0]))).T)]
    if code == "tensor_tensor":
        a = as_tiles(f32(read(ins[0])))
        b = as_tiles(f32(read(ins[1])))
        return [(0, BINARY[op.attr("op")](a, b))]
    if code == "tensor_scalar":
        x = as_tiles(f32(read(ins[0])))
        x = _apply(op.attr("op0"), x, operand(ins[1], read), op.attr("reverse0"))
        if op.attr("op1") is not None:
            x = _apply(op.attr("op1"), x, operand(ins[2], read), op.attr("reverse1"))
        return [(0, x)]
    if code == "activation":
        x = as_tiles(f32(read(ins[0])))
        x = x * operand(ins[1], read)
        if op.attr("bias"):
            x = x + operand(ins[2], read)
        y = UNARY[op.attr("op")](x)
        out = [(0, y)]
        if op.attr("reduce_op") is not None:
            out.append((1, REDUCE[op.attr("reduce_op")](y, axis=1, keepdims=True)))
        return out
    if code == "tensor_reduce":
        data = f32(read(ins[0]))
        r = REDUCE[op.attr("op")](data, axis=tuple(op.attr("axes")))
        return [(0, -r if op.attr("negate") else r)]
    if code == "iota":
        return [(0, _iota(op, op.outs[0].shape[0]))]
    if code == "tensor_tensor_scan":
        return [(0, _scan(op, as_tiles(f32(read(ins[0]))), as_tiles(f32(read(ins[1]))),
                          operand(ins[2], read)))]
    if code == "select":
        vals = [operand(x, read) if isinstance(x, Const) else as_tiles(f32(read(x))) for x in ins]
        return [(0, np.where(vals[0] != 0, vals[1], vals[2]))]
    raise NotImplementedError(f"no semantics for opcode {code}")


def _apply(name: str, x, operand, reverse: bool):
    f = BINARY[name]
    return f(operand, x) if reverse else f(x, operand)


def _scan(op: Op, d0: np.ndarray, d1: np.ndarray, initial) -> np.ndarray:
    """dst[:, i] = (d0[:, i] op0 dst[:, i-1]) op1 d1[:, i], dst[:, -1] = initial; fp32 state."""
    f0, f1 = BINARY[op.attr("op0")], BINARY[op.attr("op1")]
    r0, r1 = op.attr("reverse0"), op.attr("reverse1")
    out = np.empty(d0.shape, dtype=_F32)
    prev = np.broadcast_to(np.asarray(initial, dtype=_F32).reshape(-1), (d0.shape[0],))
    for i in range(d0.shape[1]):
        x = f0(prev, d0[:, i]) if r0 else f0(d0[:, i], prev)
        prev = np.asarray(f1(d1[:, i], x) if r1 else f1(x, d1[:, i]), dtype=_F32)
        out[:, i] = prev
    return out


def _iota(op: Op, partitions: int) -> np.ndarray:
    free = np.zeros((1,), dtype=np.int64)
    for step, num in op.attr("pattern"):
        free = (free[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    p = np.arange(partitions, dtype=np.int64)[:, None] * op.attr("channel_multiplier")
    return (op.attr("offset") + p + free[None, :]).astype(np.float64)
