"""Debugging instructions: the op behind nl.device_print. It has no outputs;
both simulators show `print_text` when they execute it."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Op
from .checks import tensor as as_tensor
from .core import Emit, instruction


def print_text(op: Op, read) -> str:
    """The prefix and the tensor's value at that point of the run."""
    return f"{op.attr('prefix')} {np.array2string(np.asarray(read(op.ins[0])))}"


def _no_outputs(op: Op, read):
    return []


@instruction(family="debug", compute=_no_outputs, engine="pool", free_limited=False)
def device_print(print_prefix, tensor):
    """Print `print_prefix` and the value of `tensor` (SBUF or HBM) when the run reaches it (nl.device_print)."""
    if not isinstance(print_prefix, str):
        raise NkiccError("E103", f"device_print prefix must be a string, got {type(print_prefix).__name__}", None,
                         'the prefix is fixed at trace time: nl.device_print("x =", t)')
    t = as_tensor(tensor, "device_print tensor")
    if t.buffer == "psum":
        raise NkiccError("E120", "device_print prints SBUF or HBM tensors, not PSUM", None,
                         "copy the PSUM tile to SBUF with nisa.tensor_copy first")
    return Emit([], [t], {"prefix": print_prefix})
