"""Names of the arithmetic an instruction can apply. Kernels pass functions
(`nl.add`, `np.add`) or strings; the IR records the name."""
from __future__ import annotations

from ..ir import NkiccError

BINARY = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "abs_max", "abs_min", "left_shift", "right_shift", "fmod", "mod",
)
UNARY = (
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_tanh", "silu", "square",
    "abs", "negative", "reciprocal", "sin", "cos", "floor", "ceil", "sign", "copy",
    "identity", "gelu_apprx_sigmoid", "gelu_dx", "gelu_apprx_sigmoid_dx", "silu_dx", "softplus", "mish",
    "erf", "erf_dx", "tan", "arctan", "trunc", "logical_not", "invert",
)
REDUCE = ("add", "maximum", "minimum", "multiply")

_NUMPY_ALIASES = {"true_divide": "divide", "max": "maximum", "min": "minimum", "sum": "add",
                  "prod": "multiply", "mul": "multiply", "sub": "subtract", "bypass": "copy"}


def op_name(op, allowed: tuple[str, ...], what: str, loc=None) -> str:
    name = getattr(op, "_nki_op", None) or getattr(op, "__name__", None) or (op if isinstance(op, str) else None)
    if name is not None:
        name = _NUMPY_ALIASES.get(name, name)
    if name not in allowed:
        raise NkiccError("E160", f"{what} does not support the operation {getattr(op, '__name__', op)!r}", loc,
                         f"use one of: {', '.join(allowed)}")
    return name
