"""Debugging instructions: the op behind nl.device_print (no outputs; both
simulators show `print_text` when they execute it), and the op behind
nl.shared_constant (data the program carries)."""
from __future__ import annotations

import base64

import numpy as np

from .. import dtypes
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


# --- constants embedded in the kernel (nl.shared_constant) -------------------------

def constant_values(op: Op) -> np.ndarray:
    """The array a `shared_constant` op carries (its bytes in the op's attributes)."""
    raw = base64.b64decode(op.attr("data"))
    return np.frombuffer(raw, dtype=dtypes.storage(op.attr("dtype"))).reshape(op.attr("shape"))


def _constant(op: Op, read):
    return [(0, constant_values(op))]


def _loaded_with_the_program(op: Op, ctx) -> float:
    return 0.0  # in HBM before the kernel starts (loaded with the compiled program)


@instruction(family="debug", compute=_constant, engine="pool", cost=_loaded_with_the_program, free_limited=False,
             public=False)
def shared_constant(dst, values):
    """dst (a shared HBM tensor) holds `values` from the start: the data of
    nl.shared_constant, carried in the program (base64 of its bytes)."""
    arr = np.ascontiguousarray(values)
    return Emit([dst], [], {"dtype": dst.decl.dtype, "shape": tuple(int(d) for d in arr.shape),
                            "data": base64.b64encode(arr.tobytes()).decode("ascii")})
