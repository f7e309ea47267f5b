"""SPMD launches: `kernel[grid](...)` runs the kernel once per program id.

nkicc traces a launch grid as an outer static loop per grid axis (axis 0
outermost) whose index is the program id: `nl.program_id(axis)` returns that
symbolic index, so a grid of 1000 programs compiles like one, and a kernel
that branches on its program id is split or traced per program exactly like
any other loop. `nl.shared_hbm` tensors are shared by all programs: the n-th
one a program allocates is the same tensor in every program.
"""
from __future__ import annotations

import operator

from ..ir import NkiccError
from .tracing import current_builder, user_loc


def normalize_grid(grid) -> tuple[int, ...]:
    """`kernel[4]`, `kernel[2, 3]`, `kernel[(2, 3)]` -> a tuple of positive ints."""
    dims = grid if isinstance(grid, (tuple, list)) else (grid,)
    try:
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise NkiccError("E103", f"a launch grid is a positive int or a tuple of them, got {grid!r}", None,
                         "launch with kernel[4](...) or kernel[2, 3](...)") from None
    if not dims or any(d <= 0 for d in dims):
        raise NkiccError("E103", f"launch grid {grid!r} needs positive sizes", None,
                         "launch with kernel[4](...) or kernel[2, 3](...)")
    return dims


def _grid(what: str):
    b = current_builder()
    if b is None:
        raise NkiccError("E160", f"nl.{what} can only be called inside a kernel that nkicc traces", user_loc(3),
                         "decorate the kernel with @nki.jit and launch it as kernel[grid](...)")
    return b, (b.grid or (1,))


def _axis(axis, grid, what: str) -> int:
    try:
        axis = operator.index(axis)
    except TypeError:
        raise NkiccError("E103", f"nl.{what} axis must be an int, got {axis!r}", user_loc(3)) from None
    if not 0 <= axis < len(grid):
        raise NkiccError("E103", f"nl.{what}({axis}) on a launch grid of {len(grid)} dimension(s) {list(grid)}",
                         user_loc(3), "launch with a grid of that many dimensions: kernel[2, 3](...)")
    return axis


def program_id(axis=0):
    """The index of this program along `axis` of the launch grid (a symbolic
    index while the grid stays rolled; 0 when the kernel is called without a grid)."""
    b, grid = _grid("program_id")
    axis = _axis(axis, grid, "program_id")
    return b.program_ids[axis] if b.grid else 0


class _WholeGrid(int):
    """The default of num_programs' `axes`: it reads as 0, as the reference's
    signature writes it, but means what the reference documents for a call
    without axes, every axis of the grid."""

    def __repr__(self) -> str:
        return "0"


_WHOLE_GRID = _WholeGrid(0)


def num_programs(axes=_WHOLE_GRID) -> int:
    """Programs along `axes` (an int or a tuple) of the launch grid; all of
    them when not given (or None)."""
    _, grid = _grid("num_programs")
    if axes is None or axes is _WHOLE_GRID:
        axes = range(len(grid))
    elif not isinstance(axes, (tuple, list)):
        axes = (axes,)
    n = 1
    for a in axes:
        n *= grid[_axis(a, grid, "num_programs")]
    return n


def program_ndim() -> int:
    """Dimensions of the launch grid (0 when the kernel is called without one)."""
    b, _ = _grid("program_ndim")
    return len(b.grid)
