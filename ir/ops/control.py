"""Registers and loops whose trip count is known only at run time.

A virtual register is a one-element int32 tensor in the `reg` buffer (an
engine sequencer's register). `nl.fori_loop` and `nl.while_loop` trace their
body once into a dynamic loop whose first statement is a `loop_guard`: the
simulators read its inputs (fori: lower and upper bound, at loop entry;
while: the condition register, before every iteration), decide whether to
run the iteration, and write the induction value (fori) or the condition
value (while) into the register the body was handed. Everything else (alloc,
schedule, hazards, the cache's canonical forms) sees ordinary operands."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Const, Op
from .checks import scalar, tensor
from .core import CostContext, Emit, TensorOperand, instruction

REG_DTYPE = "int32"


def is_register(x) -> bool:
    return isinstance(x, TensorOperand) and x.buffer == "reg"


def register(x, what: str):
    if not is_register(x):
        raise NkiccError("E103", f"{what} must be a register from nisa.register_alloc(), got {type(x).__name__}",
                         None, "allocate one with nisa.register_alloc()")
    return x


def writable_register(x, what: str):
    """A register an instruction writes: not a frozen one (VirtualRegister(frozen=True))."""
    x = register(x, what)
    if getattr(x, "frozen", False):
        raise NkiccError("E103", f"{what} is a frozen register: its value cannot change", None,
                         "allocate a register that is not frozen")
    return x


def register_or_int(x, what: str):
    """A loop bound or moved value: a register, or a compile-time integer."""
    if is_register(x):
        return x
    if isinstance(x, TensorOperand):
        raise NkiccError("E103", f"{what} must be an int or a register, got a tensor", None,
                         "load it into a register with nisa.register_load(reg, tile)")
    value = scalar(x, what)
    if isinstance(value, float) and not value.is_integer():
        raise NkiccError("E103", f"{what} must be an integer, got {value}")
    return Const(int(value))


def _register_cost(op: Op, ctx: CostContext) -> float:
    # a sequencer register instruction: the fixed dispatch cost only (estimate)
    return ctx.ns(ctx.table.fixed_cycles)


def _value(op: Op, read, i: int) -> np.ndarray:
    x = op.ins[i]
    if isinstance(x, Const):
        return np.array([[x.value]], dtype=np.float64)
    return np.asarray(read(x), dtype=np.float64).reshape(1, 1)


def _move(op: Op, read):
    return [(0, _value(op, read, 0))]


@instruction(family="control", compute=_move, engine="pool", cost=_register_cost)
def register_move(dst, src):
    """dst (a register) = src, a compile-time integer or another register."""
    dst = writable_register(dst, "register_move dst")
    return Emit([dst], [register_or_int(src, "register_move src")])


def _one_element(t, what: str) -> None:
    if t.access.count != 1:
        raise NkiccError("E140", f"{what} must hold exactly one element, got shape {list(t.shape)}", None,
                         "use a [1] or [1, 1] tensor")


@instruction(family="control", compute=_move, engine="pool", cost=_register_cost)
def register_load(dst, src):
    """dst (a register) = the one value of src, a [1] or [1, 1] tensor in SBUF or HBM."""
    dst = writable_register(dst, "register_load dst")
    src = tensor(src, "register_load src")
    _one_element(src, "register_load src")
    if src.buffer == "psum":
        raise NkiccError("E120", "register_load reads SBUF or HBM, not PSUM", None, "copy it to SBUF first")
    return Emit([dst], [src])


@instruction(family="control", compute=_move, engine="pool", cost=_register_cost)
def register_store(dst, src):
    """dst, a [1] or [1, 1] tensor in SBUF or HBM, = the value of register src."""
    dst = tensor(dst, "register_store dst")
    _one_element(dst, "register_store dst")
    if dst.buffer == "psum":
        raise NkiccError("E120", "register_store writes SBUF or HBM, not PSUM", None, "store to SBUF")
    return Emit([dst], [register(src, "register_store src")])


def _guard(op: Op, read):
    raise AssertionError("loop_guard is executed by the simulators' loop logic, not as an op")


@instruction(family="control", compute=_guard, engine="pool", cost=_register_cost, public=False, control=True)
def loop_guard(value, inputs, mode, step=1):
    """The head of a runtime loop (fori: inputs are lower and upper, value
    receives the induction value; while: inputs is the condition register,
    value receives its value). Emitted by nl.fori_loop / nl.while_loop."""
    return Emit([value], list(inputs), {"mode": mode, "step": int(step)})
