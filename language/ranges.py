"""Loop iterators. Under a `for` statement in a traced kernel they yield a
symbolic index per loop piece (or ints, where the driver says the loop must be
traced concretely); anywhere else (list(), comprehensions, outside a trace)
they behave exactly like `range`."""
from __future__ import annotations

import builtins
import operator
import sys

from ..ir import Loc, NkiccError
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
    pass


class affine_range(LoopRange):
    pass


class sequential_range(LoopRange):
    pass


class range(LoopRange):  # noqa: A001 - replaces the builtin inside traced kernels
    pass


class dynamic_range(LoopRange):
    """A hardware loop: never unrolled; its index is a register. Deprecated by
    NKI 0.6 in favour of nl.fori_loop (a warning, W150). Bounds may be
    registers (then the trip count is known only at run time)."""
    kind = "dynamic"

    def __init__(self, start, stop=None, step=1) -> None:
        from .control import VirtualRegister
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
            return self._runtime(b, loc)
        if self.step <= 0:
            raise NkiccError("E103", "dynamic_range step must be a positive int", user_loc(2))
        return b.dynamic_loop(self.start, self.step, len(self._range), loc)

    def _runtime(self, b, loc):
        from .. import isa
        from .control import _bound, _new_register
        if not isinstance(self._step, int) or self._step <= 0:
            raise NkiccError("E103", "dynamic_range step must be a positive int", loc)
        bounds = [_bound(v, "dynamic_range bound", loc) for v in self._bounds]
        index = _new_register("nl.dynamic_range")
        for _ in b.runtime_loop(loc, lambda: isa._emit_internal("loop_guard", index, bounds, "fori", self._step,
                                                                 loc=loc)):
            yield index
