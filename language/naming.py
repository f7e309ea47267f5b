"""The name a kernel's author gives a tensor: the variable an allocation is
assigned to (`out = nl.ndarray(...)`, `p = nl.zeros(..., buffer=nl.psum)`,
`t = nl.load(...)`), found from the calling frame's source.

Only a call (or operator) that is the whole value of an assignment names its result:
`x = nl.exp(nl.load(a))` names the exp's result `x`, not the load's. Targets:
a name (`t`), an attribute (`self.acc` -> `acc`), a subscript (`tiles[i]` ->
`tiles`), one element of a tuple assigned from a tuple of calls. Anything else
(no source, `exec`, a nested call) has no name, and the tracer falls back to
its own.
"""
from __future__ import annotations

import ast
import functools
import sys

from .sources import source_file

_POSITIONS = sys.version_info >= (3, 11)  # code.co_positions(): the column of the running call


def assigned_name(frame) -> str:
    """The assignment target of the call `frame` is making, or ""."""
    if frame is None:
        return ""
    code = frame.f_code
    if _POSITIONS:
        pos = _positions(code)
        i = frame.f_lasti // 2
        where = pos[i] if 0 <= i < len(pos) else None
        if where is None or where[0] is None or where[2] is None:
            return ""
        return _target(code, where)
    return _target(code, (frame.f_lineno, None, None, None))


@functools.lru_cache(maxsize=512)
def _positions(code) -> tuple:
    return tuple(code.co_positions())


@functools.lru_cache(maxsize=4096)
def _target(code, positions: tuple) -> str:
    """positions: (line, end_line, col, end_col) as code.co_positions gives them."""
    f = source_file(code.co_filename)
    target = None if f is None else f.assigned_at(positions)
    return _name_of(target) if target else ""


def _name_of(target) -> str:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, (ast.Subscript, ast.Starred)):
        return _name_of(target.value)
    return ""
