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
import inspect
import sys
import textwrap

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
        return _target(code, where[0], where[2], where[1], where[3])
    return _target(code, frame.f_lineno, None, None, None)


@functools.lru_cache(maxsize=512)
def _positions(code) -> tuple:
    return tuple(code.co_positions())


@functools.lru_cache(maxsize=256)
def _assignments(code):
    """(assignment statements of the source that holds `code`, first line - 1,
    columns removed by dedent), or None without source."""
    try:
        lines, start = inspect.getsourcelines(code)
    except (OSError, TypeError, IndexError):
        return None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(text.splitlines()[0]) - len(dedented.splitlines()[0]) if text.strip() else 0
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        return None
    stmts = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
    return stmts, max(start, 1) - 1, indent


@functools.lru_cache(maxsize=4096)
def _target(code, line: int, col: int | None, end_line: int | None, end_col: int | None) -> str:
    found = _assignments(code)
    if found is None:
        return ""
    stmts, line0, indent = found
    line -= line0
    if col is not None:
        col -= indent
        end_line -= line0
        end_col -= indent
    for stmt in stmts:
        values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
        for k, value in enumerate(values):
            if col is None:
                hit = isinstance(value, ast.Call) and value.lineno == line and len(values) == 1
            else:
                hit = (value.lineno, value.col_offset, value.end_lineno, value.end_col_offset) == \
                      (line, col, end_line, end_col)
            if hit:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                if len(values) > 1:
                    if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) != len(values):
                        return ""
                    target = target.elts[k]
                return _name_of(target)
    return ""


def _name_of(target) -> str:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, (ast.Subscript, ast.Starred)):
        return _name_of(target.value)
    return ""
