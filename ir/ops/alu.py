"""The arithmetic an instruction can apply (its `op=` argument): each name
once, with its numpy meaning. Kernels pass functions (`nl.add`, `np.add`) or
strings; the IR records the name. Arithmetic is fp32: operands arrive widened."""
from __future__ import annotations

import math

import numpy as np

from ..errors import NkiccError

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


def _gelu_dx(x):
    # d/dx x*Phi(x) = Phi(x) + x*phi(x)
    return 0.5 * _erfc(-x / math.sqrt(2.0)) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


_GELU_SIGMOID = 1.702  # gelu(x) ~ x * sigmoid(1.702 x)


def _gelu_sigmoid_dx(x):
    s = _sigmoid(_GELU_SIGMOID * x)
    return s + _GELU_SIGMOID * x * s * (1.0 - s)


def _silu_dx(x):
    s = _sigmoid(x)
    return s + x * s * (1.0 - s)


def _softplus(x):
    return np.logaddexp(0.0, x)  # log(1 + e^x) without overflow


def _abs_pick(bigger: bool):
    # the operand with the larger (smaller) magnitude, sign kept; y on ties
    def f(a, b):
        a, b = np.broadcast_arrays(a, b)
        pick = np.abs(a) > np.abs(b) if bigger else np.abs(a) < np.abs(b)
        return np.where(pick, a, b)
    return f


def _as_int(f):
    def g(a, b):
        return f(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)).astype(_F32)
    return g


def _flag(f):
    return lambda a, b: f(a, b).astype(_F32)


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "equal": _flag(np.equal), "not_equal": _flag(np.not_equal),
    "less": _flag(np.less), "less_equal": _flag(np.less_equal),
    "greater": _flag(np.greater), "greater_equal": _flag(np.greater_equal),
    "logical_and": _flag(np.logical_and), "logical_or": _flag(np.logical_or),
    "logical_xor": _flag(np.logical_xor),
    "bitwise_and": _as_int(np.bitwise_and), "bitwise_or": _as_int(np.bitwise_or),
    "bitwise_xor": _as_int(np.bitwise_xor),
    "abs_max": _abs_pick(True), "abs_min": _abs_pick(False),
    "left_shift": _as_int(np.left_shift), "right_shift": _as_int(np.right_shift),
    "fmod": np.fmod, "mod": np.mod,
    "bypass": lambda a, b: a,
    # the ALU's unary arithmetic, usable as an `op` of tensor_scalar-like instructions: the
    # operand is ignored (nki.api.shared, "Supported Math Operators", Arithmetic Unary)
    "abs": lambda a, b: np.abs(a), "square": lambda a, b: np.square(a),  # the stage does nothing (activate2's op1, tensor_scalar)
}

# operators the reference documents as NeuronCore-v4 (trn3) and newer; the rest are everywhere
SINCE = {"abs_max": 4, "abs_min": 4}

UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0), "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "square": np.square, "abs": np.abs, "negative": np.negative, "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "sign": np.sign,
    "copy": lambda x: x, "identity": lambda x: x,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(_GELU_SIGMOID * x), "gelu_dx": _gelu_dx,
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx, "silu_dx": _silu_dx, "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)), "erf": lambda x: 1.0 - _erfc(x),
    "erf_dx": lambda x: (2.0 / math.sqrt(math.pi)) * np.exp(-x * x), "tan": np.tan, "arctan": np.arctan,
    "trunc": np.trunc, "logical_not": lambda x: (x == 0).astype(_F32),
    "invert": lambda x: (-np.asarray(x).astype(np.int64) - 1).astype(_F32),  # ~x on two's complement integers
    # parametric ReLU: the activation instructions apply relu_param as its slope below 0 (0 when none)
    "prelu": lambda x: np.maximum(x, 0),
}

REDUCE = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod}
# the value an accumulator starts from for each reduction
IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
# how an accumulator combines a new partial result: (accumulated, new) -> accumulated
COMBINE = {"add": np.add, "subtract": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}

class Named:
    """An operator named where the reference's default is an nl function
    (`reduce_op=maximum`): what a kernel would pass, without importing nl."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
        self._nki_op = name

    def __repr__(self) -> str:
        return self.__name__


_ALIASES = {"true_divide": "divide", "max": "maximum", "min": "minimum", "sum": "add",
            "prod": "multiply", "mul": "multiply", "sub": "subtract", "bypass": "copy"}


def op_name(op, allowed, what: str) -> str:
    """The name of the arithmetic `op` (a function or a string), which must be in `allowed`."""
    name = getattr(op, "_nki_op", None) or getattr(op, "__name__", None) or (op if isinstance(op, str) else None)
    if name is not None and name not in allowed:
        name = _ALIASES.get(name, name)
    if name not in allowed:
        raise NkiccError("E160", f"{what} does not support the operation {getattr(op, '__name__', op)!r}", None,
                         f"use one of: {', '.join(allowed)}")
    return name


def apply(name: str, x, operand, reverse: bool = False):
    f = BINARY[name]
    return f(operand, x) if reverse else f(x, operand)
