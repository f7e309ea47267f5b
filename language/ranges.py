"""Loop iterators. Under a `for` statement in a traced kernel they yield a
symbolic index per loop piece (or ints, where the driver says the loop must be
traced concretely); anywhere else (list(), comprehensions, outside a trace)
they behave exactly like `range`."""
from __future__ import annotations

import builtins
import contextlib
import operator
import sys

from ..ir import Loc, NkiccError
from .control import VirtualRegister, counted_loop
from .tracing import current_builder, user_loc


class LoopRange:
    kind = "static"

    def __init__(self, start, stop=None, step=1) -> None:
        if stop is None:
            start, stop = 0, start
        loc = user_loc(2)  # the frame that made the range (the walk skips nkicc frames)
        try:
            start, stop, step = operator.index(start), operator.index(stop), operator.index(step)
        except TypeError:
            raise NkiccError("E103", f"{type(self).__name__} bounds must be ints", loc) from None
        if step == 0:
            raise NkiccError("E103", "loop step must not be zero", loc)
        self._range = builtins.range(start, stop, step)

    @property
    def start(self) -> int:
        return self._range.start

    @property
    def stop(self) -> int:
        return self._range.stop

    @property
    def step(self) -> int:
        return self._range.step

    def __iter__(self):
        b = current_builder()
        if b is None:
            return iter(self._range)
        site = b.policy.site(sys._getframe(1))
        if site is None:
            return iter(self._range)
        return b.static_loop(self.start, self.step, len(self._range), site,
                             independent=isinstance(self, affine_range))

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, i):
        return self._range[i]

    def __contains__(self, x) -> bool:
        return x in self._range

    def __reversed__(self):
        return reversed(self._range)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.start}, {self.stop}, {self.step})"


class static_range(LoopRange):
    """A loop NKI unrolls; nkicc keeps it rolled wherever the body allows."""


class affine_range(LoopRange):
    """A loop whose iterations are independent (checked: E190); kept rolled."""


class sequential_range(LoopRange):
    """A loop whose iterations may depend on each other (a running sum); kept rolled."""


class range(LoopRange):  # noqa: A001 - replaces the builtin inside traced kernels
    """Python's range inside a traced kernel: a static loop."""


class dynamic_range(LoopRange):
    """A hardware loop: never unrolled; its index is a register. Deprecated by
    NKI 0.6 in favour of nl.fori_loop (a warning, W150). Bounds may be
    registers (then the trip count is known only at run time)."""
    kind = "dynamic"

    def __init__(self, start, stop=None, step=1) -> None:
        if stop is None:
            start, stop = 0, start
        self._registers = isinstance(start, VirtualRegister) or isinstance(stop, VirtualRegister)
        if self._registers:
            self._bounds, self._step = (start, stop), step
            return
        super().__init__(start, stop, step)

    def __iter__(self):
        b = current_builder()
        if b is None:
            if self._registers:
                raise NkiccError("E150", "dynamic_range over registers runs only inside a traced kernel", user_loc(2))
            return iter(self._range)
        f = sys._getframe(1)
        loc = Loc(f.f_code.co_filename, f.f_lineno)
        b.warn("W150", "nl.dynamic_range is deprecated since NKI 0.6", loc)
        if self._registers:
            return counted_loop(b, loc, *self._bounds, self._step, "dynamic_range")
        if self.step <= 0:
            raise NkiccError("E103", "dynamic_range step must be a positive int", user_loc(2))
        return b.dynamic_loop(self.start, self.step, len(self._range), loc)


@contextlib.contextmanager
def no_reorder():
    """`with nl.no_reorder():` asks that the block's instructions run in program
    order. nkicc's scheduler keeps every data dependence, so results are the same
    either way; it does not pin the order of independent instructions (timing may
    differ from hardware). Dynamic loops are refused inside, as the vendor does."""
    b = current_builder()
    if b is None:
        raise NkiccError("E160", "nl.no_reorder can only be used inside a kernel that nkicc traces", user_loc(3))
    before = b.loop_stats["dynamic"]
    yield
    if b.loop_stats["dynamic"] != before:
        raise NkiccError("E103", "a dynamic loop inside nl.no_reorder", user_loc(3),
                         "use a static loop (nl.affine_range / sequential_range) inside no_reorder")
