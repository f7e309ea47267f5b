"""The source and syntax tree of the user's files, parsed once per file.

The tracer reads a kernel's source in several places: the names of its
tensors (naming), the loops it may roll (loop_effects), the helpers a loop
body calls, the kernel's return line. `inspect.getsource` re-reads and
re-parses a function for each of them and finds its module by walking
sys.modules, which took 13 ms of a 32 ms trace in a fresh process. Here a file
is parsed once and every question is answered from that tree, by the
positions code objects carry: lines from 1 and columns in UTF-8 bytes, the
file's own, so nothing is dedented or shifted.

A file is read through linecache (notebook cells registered there count),
checked against the disk first, as inspect does, and parsed again whenever its
text changes (an edited and reloaded module).
"""
from __future__ import annotations

import ast
import linecache
import types

_KEEP = 64  # files whose trees are kept (oldest dropped first)


class SourceFile:
    """One file's text and tree, with indexes built on first use."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.text = "".join(lines)
        try:
            self.tree: ast.Module | None = ast.parse(self.text)
        except (SyntaxError, ValueError):
            self.tree = None
        self._functions: dict | None = None
        self._targets: dict | None = None
        self._loops: dict | None = None

    def function(self, code: types.CodeType) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The `def` statement that compiled to `code` (matched by name and first
        line, which is the first decorator's for a decorated function)."""
        if self._functions is None:
            self._functions = {}
            for n in self._walk():
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([d.lineno for d in n.decorator_list] + [n.lineno])
                    self._functions.setdefault((n.name, first), n)
        return self._functions.get((code.co_name, code.co_firstlineno))

    def lambdas_at(self, line: int) -> list[ast.Lambda]:
        """Every lambda that starts on `line` (a lambda's code names only its line)."""
        return [n for n in self._walk() if isinstance(n, ast.Lambda) and n.lineno == line]

    def assigned_at(self, positions: tuple):
        """The target of the assignment whose value (or one element of a tuple of
        values) spans exactly `positions` (line, end_line, col, end_col): the ast
        target node, "" where the tuple does not pair up, None where no assignment
        has that value. Without columns (Python 3.10: col None), a single call
        value starting on the line."""
        if self._targets is None:
            self._targets = {}
            for stmt in self._walk():
                if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                    continue
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
                for k, value in enumerate(values):
                    t = target
                    if len(values) > 1:
                        pairs = isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(values)
                        t = target.elts[k] if pairs else ""
                    self._targets.setdefault(_span(value), t)
                    if len(values) == 1 and isinstance(value, ast.Call):
                        self._targets.setdefault(value.lineno, t)
        return self._targets.get(positions if positions[2] is not None else positions[0])

    def loop_at(self, positions: tuple) -> ast.For | bool | None:
        """The `for` statement whose iterable sits at `positions` (line, end_line,
        col, end_col); False when that iterable belongs to a comprehension."""
        if self._loops is None:
            self._loops = {}
            # CPython reports GET_ITER at the whole statement or comprehension
            # (3.11) or at the iterable (later versions): index both.
            for n in self._walk():
                if isinstance(n, ast.For):
                    self._loops[_span(n)] = self._loops[_span(n.iter)] = n
                elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                    self._loops[_span(n)] = False
                    for gen in n.generators:
                        self._loops[_span(gen.iter)] = False
        return self._loops.get(positions)

    def _walk(self):
        return ast.walk(self.tree) if self.tree is not None else iter(())


def _span(node: ast.AST) -> tuple:
    return (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)


_files: dict[str, SourceFile] = {}


def source_file(filename: str, module_globals: dict | None = None) -> SourceFile | None:
    """The file as it is now, or None where its source cannot be read."""
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, module_globals)
    if not lines:
        return None
    known = _files.get(filename)
    if known is not None and (known.lines is lines or known.text == "".join(lines)):
        return known
    if len(_files) >= _KEEP:
        _files.pop(next(iter(_files)))
    _files[filename] = found = SourceFile(lines)
    return found


def function_node(fn: types.FunctionType) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    f = source_file(fn.__code__.co_filename, fn.__globals__)
    return None if f is None else f.function(fn.__code__)
