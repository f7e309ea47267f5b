"""Virtual registers and the loops they drive (NKI 0.6): `nisa.register_alloc`,
`nl.fori_loop`, `nl.while_loop`, and `nl.dynamic_range` over registers.

A register's value exists only on the device: the kernel can hand it to
instructions (`register_move/load/store`, `.ap(scalar_offset=reg)`, loop
bounds) but not to Python (`if reg`, `int(reg)`), which is E150."""
from __future__ import annotations

from ..ir import NkiccError
from ..ir.ops.control import register_or_int
from .allocation import require_builder
from .emit import emit_internal, function
from .tensor import Tensor
from .tracing import Builder, user_loc


class VirtualRegister(Tensor):
    """A register on an engine sequencer: `nisa.register_alloc(x)`, or
    `VirtualRegister(state=None, frozen=False)` inside a kernel, which is the
    same with `state` as the initial value. A frozen register keeps that value:
    register_move/register_load into it is an error (E103)."""
    __slots__ = ("frozen",)

    def __init__(self, state=None, frozen=False, *internal):
        if isinstance(state, Builder):  # nkicc's own form: VirtualRegister(builder, decl)
            super().__init__(state, frozen, *internal)
            self.frozen = False
            return
        if frozen and state is None:
            raise NkiccError("E103", "a frozen VirtualRegister needs its value: VirtualRegister(state=N, frozen=True)",
                             user_loc(2), "give the value it keeps as state")
        b = require_builder("nisa.VirtualRegister")
        super().__init__(b, b.new_register(user_loc(2)))
        self.frozen = False
        if state is not None:
            function("register_move")(self, state)
        self.frozen = bool(frozen)

    def _runtime_only(self, what: str):
        raise NkiccError("E150", f"{what} of a register: its value is known only when the kernel runs", user_loc(3),
                         "branch on it with nl.while_loop, loop on it with nl.fori_loop, or use it as a "
                         "scalar_offset")

    def __bool__(self):
        self._runtime_only("a Python decision on the value")

    def __index__(self):
        self._runtime_only("a Python integer")

    __int__ = __index__

    def __repr__(self) -> str:
        return f"VirtualRegister({self.name})"


def _new_register(what: str) -> VirtualRegister:
    b = require_builder(what)
    return VirtualRegister(b, b.new_register(user_loc(3)))


def register_alloc(x=None) -> VirtualRegister:
    """A new virtual register, set to the integer x when given."""
    reg = _new_register("nisa.register_alloc")
    if x is not None:
        function("register_move")(reg, x)
    return reg


def _bound(value, what: str, loc):
    try:
        return register_or_int(value, what)
    except NkiccError as e:
        e.loc = e.loc or loc
        raise


def counted_loop(b, loc, lower, upper, step, what: str):
    """A runtime loop from lower to upper (ints or registers) by step (a
    positive int): yields, once, the register that holds the index."""
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise NkiccError("E103", f"{what} step must be a positive int, got {step!r}", loc)
    bounds = [_bound(lower, f"{what} lower", loc), _bound(upper, f"{what} upper", loc)]
    index = _new_register(f"nl.{what}")
    for _ in b.runtime_loop(loc, lambda: emit_internal("loop_guard", index, bounds, "fori", step, loc=loc)):
        yield index


def fori_loop(lower, upper, body_fun, step=1):
    """for i in range(lower, upper, step): body_fun(i), on the device: lower
    and upper are ints or registers, step a positive int; body_fun gets i as
    a register. Traced once, whatever the trip count."""
    loc = user_loc(2)
    for index in counted_loop(require_builder("nl.fori_loop"), loc, lower, upper, step, "fori_loop"):
        body_fun(index)


def while_loop(init, body_fun):
    """r = init; while r != 0: r = body_fun(r), on the device: the condition
    is checked before each iteration; body_fun gets the condition's value as
    a register and returns the register that holds the next condition."""
    loc = user_loc(2)
    b = require_builder("nl.while_loop")
    if not isinstance(init, VirtualRegister):
        raise NkiccError("E103", f"while_loop init must be a register, got {type(init).__name__}", loc,
                         "load the condition into one with nisa.register_load(reg, tile)")
    cond = _new_register("nl.while_loop")
    function("register_move")(cond, init)
    value = _new_register("nl.while_loop")
    for _ in b.runtime_loop(loc, lambda: emit_internal("loop_guard", value, [cond], "while", 1, loc=loc)):
        nxt = body_fun(value)
        if not isinstance(nxt, VirtualRegister):
            raise NkiccError("E103", f"the while_loop body must return the register of the next condition, "
                                     f"got {type(nxt).__name__}", loc)
        function("register_move")(cond, nxt)
