"""Can a loop body be traced once for all its iterations?

Rolling runs the Python body once. That is only the same as unrolling when
the body carries no Python state from one iteration to the next: no name read
before the body assigns it on every path (branches and inner loops that may
not run do not count), no mutation of objects from outside the body (directly,
through a body name bound to one, or by advancing an outer iterator), no
`break`/`return`, no `global`/`nonlocal`, and the same for the helpers it
calls (functions, lambdas, partials, callable objects). An `if` on
compile-time constants only counts its taken branch. This module answers from
the AST (and the objects the names resolve to in the frame); whatever it
cannot prove clean is traced concretely.
"""
from __future__ import annotations

import ast
import builtins
import collections.abc
import functools
import sys
import types

from ..ir.origin import is_nkicc
from .sources import source_file

MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard",
    "setdefault", "sort", "reverse", "popitem", "__setitem__", "__delitem__", "__iadd__",
})
PURE_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset",
    "getattr", "hasattr", "int", "isinstance", "issubclass", "len", "list", "map", "max", "min", "print",
    "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip",
})
_PURE_MODULE_ROOTS = ("math", "operator", "functools", "itertools")
# builtins that change the state of their first argument (checked like a mutating method on it)
STATEFUL_BUILTINS = frozenset({"next", "anext", "setattr", "delattr"})
# methods of built-in objects that only read; any other C method on an object from
# outside the body may change it (deque.appendleft, ndarray.fill, ...)
READ_ONLY_METHODS = frozenset({
    "get", "keys", "values", "items", "index", "count", "copy", "__getitem__", "__len__", "__contains__",
    "issubset", "issuperset", "isdisjoint", "union", "intersection", "difference", "symmetric_difference",
    "tolist", "item", "astype", "reshape", "sum", "mean", "max", "min", "any", "all", "transpose", "view",
})
_IMMUTABLE = (str, bytes, int, float, complex, bool, tuple, frozenset, range, type(None))


class _Scan(ast.NodeVisitor):
    """Walks statements in program order, tracking which names the body has
    bound so far; records the first reason the body is not clean."""

    def __init__(self, bound_by_loop: set[str], assigned: set[str], resolve, depth: int, env=None,
                 in_helper: bool = False, static_used: dict | None = None) -> None:
        self.env = env
        # names whose values decided an `if` before tracing (None: never decide one)
        self.static_used = static_used
        self.in_helper = in_helper  # scanning a called function: its `return` leaves the helper, not the loop
        self.bound = set(bound_by_loop)
        # names the body bound to objects that may come from outside it
        # (`seen = state["seen"]`): mutating them mutates the outer object
        self.aliases: set[str] = set()
        self.assigned = assigned
        self.resolve = resolve
        self.depth = depth
        self.reason: str | None = None
        self.loop_depth = 0

    def fail(self, node: ast.AST, why: str) -> None:
        if self.reason is None:
            self.reason = f"line {getattr(node, 'lineno', '?')}: {why}"

    # statements that change control flow or scope
    def visit_Break(self, node):
        if self.loop_depth == 0:
            self.fail(node, "`break` leaves the loop early")

    def visit_Return(self, node):
        if self.in_helper:
            self.generic_visit(node)
        else:
            self.fail(node, "`return` inside the loop")

    def visit_Global(self, node):
        self.fail(node, "`global` statement")

    def visit_Nonlocal(self, node):
        self.fail(node, "`nonlocal` statement")

    def visit_Yield(self, node):
        self.fail(node, "`yield` inside the loop")

    visit_YieldFrom = visit_Yield

    def visit_Delete(self, node):
        for t in node.targets:
            if isinstance(t, ast.Name) and t.id not in self.bound:
                self.fail(node, f"deletes outer name {t.id}")

    def _inner_loop(self, node):
        self.visit(node.iter if isinstance(node, ast.For) else node.test)
        if isinstance(node, ast.For):
            self._check_iterable(node.iter)
            self._bind(node.target, alias=True)
        self.loop_depth += 1
        for s in node.body + node.orelse:
            self.visit(s)
        self.loop_depth -= 1

    def visit_For(self, node):
        # the body may run zero times: what it binds is not bound after the loop
        before = set(self.bound)
        self._inner_loop(node)
        self.bound = before

    visit_While = visit_For

    def _check_iterable(self, it: ast.expr) -> None:
        """Iterating an iterator that outlives the body advances it for good."""
        base = _base_name(it)
        if base is None or self.env is None or base in self.bound:
            return
        obj = self.env.lookup(it)
        if isinstance(obj, collections.abc.Iterator):
            self.fail(it, f"iterates `{ast.unparse(it)}`, an iterator from outside the loop body")

    # Branches: a name counts as bound after an if/try only when every branch
    # that falls through binds it (else `if i == 0: acc = t / else: acc = f(acc)`
    # would read the previous iteration's acc unnoticed).
    def _branch(self, stmts, start: set[str]) -> set[str] | None:
        self.bound = set(start)
        for s in stmts:
            self.visit(s)
        if stmts and isinstance(stmts[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise)):
            return None  # does not fall through
        return self.bound

    @staticmethod
    def _merge(outcomes, fallback: set[str]) -> set[str]:
        live = [o for o in outcomes if o is not None]
        if not live:
            return fallback
        out = set(live[0])
        for o in live[1:]:
            out &= o
        return out

    def _static_test(self, test):
        if self.env is None or self.static_used is None:
            return _UNRESOLVED
        return _static_value(test, self.env, self.bound | self.assigned, self.static_used)

    def visit_If(self, node):
        static = self._static_test(node.test)
        if static is not _UNRESOLVED:  # only the branch taken is ever run
            for s in node.body if static else node.orelse:
                self.visit(s)
            return
        self.visit(node.test)
        before = set(self.bound)
        body = self._branch(node.body, before)
        orelse = self._branch(node.orelse, before)
        self.bound = self._merge([body, orelse], before)

    def visit_Try(self, node):
        before = set(self.bound)
        body = self._branch(node.body + node.orelse, before)
        handlers = []
        for h in node.handlers:
            self.bound = set(before)
            self.visit(h)
            handlers.append(None if h.body and isinstance(h.body[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise))
                            else self.bound)
        self.bound = self._merge([body] + handlers, before)
        for s in node.finalbody:
            self.visit(s)

    visit_TryStar = visit_Try

    def visit_FunctionDef(self, node):
        self.bound.add(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node):
        pass

    def _comprehension(self, node):
        # its targets are local to the comprehension; only the iterables and
        # conditions read the enclosing scope
        inner = set()
        for gen in node.generators:
            self.visit(gen.iter)
            self._check_iterable(gen.iter)
            inner |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        saved, saved_aliases = set(self.bound), set(self.aliases)
        self.bound |= inner
        self.aliases |= inner
        for gen in node.generators:
            for cond in gen.ifs:
                self.visit(cond)
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                self.visit(getattr(node, part))
        self.bound, self.aliases = saved, saved_aliases

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    # assignments: value first, then targets
    def visit_Assign(self, node):
        self.visit(node.value)
        for t in node.targets:
            self._store(t, node.value)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
            self._store(node.target, node.value)

    def visit_AugAssign(self, node):
        self.visit(node.value)
        t = node.target
        if isinstance(t, ast.Name):
            if t.id not in self.bound:
                self.fail(node, f"`{t.id} {type(node.op).__name__}=` carries a value from one iteration to the next")
            elif t.id in self.aliases:
                self.fail(node, f"`{t.id} {type(node.op).__name__}=` may change an object from outside the loop body")
        else:
            self._store(t)

    def visit_NamedExpr(self, node):
        self.visit(node.value)
        self._store(node.target, node.value)

    def visit_With(self, node):
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._store(item.optional_vars, None)
        for s in node.body:
            self.visit(s)

    def visit_Import(self, node):
        for a in node.names:
            self.bound.add((a.asname or a.name).split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node):
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.bound.add(node.name)
        for s in node.body:
            self.visit(s)

    def _bind(self, target, alias: bool = False):
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                self.bound.add(n.id)
                (self.aliases.add if alias else self.aliases.discard)(n.id)

    def _mine(self, base: str | None) -> bool:
        """The object named `base` was made by this iteration of the body."""
        return base is not None and base in self.bound and base not in self.aliases

    def _fresh(self, value) -> bool:
        """`value` evaluates to a new object, or to one that cannot be changed."""
        if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp,
                              ast.GeneratorExp, ast.Constant, ast.JoinedStr, ast.BinOp, ast.UnaryOp,
                              ast.Compare, ast.Lambda)):
            return True
        if isinstance(value, ast.Call):
            f = value.func
            if isinstance(f, ast.Attribute):
                return f.attr not in ("get", "setdefault", "__getitem__")
            return not (isinstance(f, ast.Name) and f.id in ("getattr", "next", "iter", "vars", "globals", "locals"))
        if isinstance(value, (ast.Name, ast.Attribute)):
            base = _base_name(value)
            if base in self.bound:
                return isinstance(value, ast.Name) and base not in self.aliases
            obj = self.env.lookup(value) if self.env is not None else _UNRESOLVED
            return isinstance(obj, _IMMUTABLE)
        return False

    def _store(self, target, value=None):
        if isinstance(target, ast.Name):
            self.bound.add(target.id)
            (self.aliases.discard if self._fresh(value) else self.aliases.add)(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            pairs = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            for n, e in enumerate(target.elts):
                self._store(e, value.elts[n] if pairs else None)
        elif isinstance(target, ast.Starred):
            self._store(target.value, None)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            base = _base_name(target)
            self.visit(target.value)
            if isinstance(target, ast.Subscript):
                self.visit(target.slice)
            if not self._mine(base) and not self._device_store(target):
                self.fail(target, f"stores into `{ast.unparse(target)}`, which outlives one iteration")

    def _device_store(self, target) -> bool:
        """`t[k] = v` into a tensor (NKI 0.1) emits an instruction; no Python object changes."""
        if not isinstance(target, ast.Subscript) or self.env is None:
            return False
        return getattr(type(self.env.lookup(target.value)), "_device_store", False)

    # reads
    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.assigned and node.id not in self.bound:
            self.fail(node, f"`{node.id}` is read before the body assigns it: its value carries "
                            "from one iteration to the next")

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in MUTATING_METHODS:
            base = _base_name(f.value)
            if not self._mine(base):
                owner = self.env.lookup(f.value) if self.env is not None else _UNRESOLVED
                if not isinstance(owner, types.ModuleType):
                    self.fail(node, f"`{ast.unparse(f)}(...)` mutates an object from outside the loop body")
                    return
        if isinstance(f, ast.Name) and f.id in STATEFUL_BUILTINS and f.id not in self.bound and node.args:
            base = _base_name(node.args[0])
            if not self._mine(base) and self.env is not None \
                    and self.env.lookup(f) is getattr(builtins, f.id):
                self.fail(node, f"`{ast.unparse(node)}` changes an object from outside the loop body")
                return
        if self.reason is None and self.depth < 8:
            why = self.resolve(f, self.bound, self.depth)
            if why:
                self.fail(node, why)


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _assigned_names(body: list[ast.stmt], static=None) -> set[str]:
    """Names the statements bind; with `static`, an `if` whose test it can
    evaluate counts only its taken branch."""
    names: set[str] = set()

    def walk(node):
        if static is not None and isinstance(node, ast.If):
            value = static(node.test)
            if value is not _UNRESOLVED:
                for s in node.body if value else node.orelse:
                    walk(s)
                return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            walk(child)

    for stmt in body:
        walk(stmt)
    return names


def _static_value(test: ast.expr, env: "_Env", excluded: set[str], used: dict | None = None):
    """The value of an `if` test that is the same in every iteration (a
    compile-time switch like `if carry:` or `if mode == "sum":`): built only
    from constants, comparisons and boolean operators over names outside
    `excluded` (names the loop binds) that hold plain immutable values.
    _UNRESOLVED when that cannot be shown. The names read go into `used`."""
    values = {}
    for n in ast.walk(test):
        if isinstance(n, ast.Name):
            if n.id in excluded:
                return _UNRESOLVED
            v = env.lookup(n)
            if type(v) not in (bool, int, float, str, type(None)):
                return _UNRESOLVED
            values[n.id] = v
        elif not isinstance(n, (ast.Constant, ast.Load, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.cmpop,
                                ast.boolop, ast.unaryop)):
            return _UNRESOLVED
    try:
        result = bool(eval(compile(ast.Expression(test), "<if>", "eval"), {"__builtins__": {}}, values))
    except Exception:
        return _UNRESOLVED
    if used is not None:
        used.update(values)
    return result


class EffectChecker:
    """Answers, per `for` statement, why its body cannot be rolled (or None)."""

    def __init__(self) -> None:
        self._helpers: dict[object, str | None] = {}
        # per `for` node: (values of the names that decided its static ifs, reason)
        self._loops: dict[int, list[tuple[dict, str | None]]] = {}

    def loop_reason(self, node: ast.For, frame_globals: dict, frame_locals: dict) -> str | None:
        env = _Env(frame_globals, frame_locals)
        entries = self._loops.setdefault(id(node), [])
        for used, reason in entries:
            if all(_same(env.lookup(ast.Name(name, ast.Load())), v) for name, v in used.items()):
                return reason
        used: dict = {}
        reason = self._loop_reason(node, env, used)
        entries.append((used, reason))
        return reason

    def _loop_reason(self, node: ast.For, env: "_Env", used: dict) -> str | None:
        bound_by_loop = {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        if node.orelse:
            return f"line {node.lineno}: `for ... else`"
        maybe_bound = _assigned_names(node.body) | bound_by_loop
        assigned = _assigned_names(node.body, lambda test: _static_value(test, env, maybe_bound, used))
        scan = _Scan(bound_by_loop, assigned, lambda f, bound, d: self._call_reason(f, bound, env, d), 0, env,
                     static_used=used)
        for s in node.body:
            scan.visit(s)
            if scan.reason:
                break
        return scan.reason

    def _call_reason(self, func: ast.expr, bound: set[str], env: "_Env", depth: int) -> str | None:
        base = _base_name(func)
        if base is None or base in bound:
            return None  # a call on something the body made itself
        obj = env.lookup(func)
        if obj is _UNRESOLVED:
            return None if isinstance(func, ast.Attribute) else f"calls `{ast.unparse(func)}`, which nkicc cannot see"
        return self.callable_reason(obj, depth + 1)

    def callable_reason(self, obj, depth: int) -> str | None:
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        if isinstance(obj, functools.partial):
            return self.callable_reason(obj.func, depth)
        if isinstance(obj, type):
            return None
        if isinstance(obj, types.BuiltinFunctionType):
            owner = getattr(obj, "__self__", None)
            if owner is None or isinstance(owner, (types.ModuleType, _IMMUTABLE)) or obj.__name__ in READ_ONLY_METHODS:
                mod = getattr(obj, "__module__", None) or getattr(owner, "__name__", None) or ""
                return "calls a random number generator" if "random" in mod else None
            if "random" in type(owner).__module__ or "Random" in type(owner).__name__:
                return "calls a random number generator"
            return f"calls {type(owner).__name__}.{obj.__name__}(), which may change an object from outside the loop body"
        module = getattr(obj, "__module__", None) or ""
        if module.split(".")[0] in _PURE_MODULE_ROOTS or module == "builtins" or _nkicc_code(obj, module):
            return None
        if module.startswith("numpy"):
            return "calls numpy.random" if "random" in module else None
        if not isinstance(obj, types.FunctionType):
            call = getattr(type(obj), "__call__", None)  # a callable object: scan its __call__
            if isinstance(call, types.FunctionType):
                return self.callable_reason(call, depth)
            return None
        if obj in self._helpers:
            return self._helpers[obj]
        self._helpers[obj] = None  # recursion guard
        reason = self._function_reason(obj, depth)
        self._helpers[obj] = reason
        return reason

    def _function_reason(self, fn: types.FunctionType, depth: int) -> str | None:
        unreadable = f"calls {fn.__qualname__}, whose source nkicc cannot read"
        f = source_file(fn.__code__.co_filename, fn.__globals__)
        if f is None or f.tree is None:
            return unreadable
        if fn.__name__ == "<lambda>":
            # a lambda's code names only its line: scan every lambda on it
            lambdas = f.lambdas_at(fn.__code__.co_firstlineno)
            if not lambdas:
                return unreadable
            for lam in lambdas:
                why = self._scan_function(fn, lam.args, [ast.Expr(lam.body)], depth)
                if why:
                    return why
            return None
        fdef = f.function(fn.__code__)
        if fdef is None:
            return unreadable
        return self._scan_function(fn, fdef.args, fdef.body, depth)

    def _scan_function(self, fn: types.FunctionType, args: ast.arguments, body: list, depth: int) -> str | None:
        params = {a.arg for a in args.args + args.kwonlyargs + args.posonlyargs}
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                params.add(extra.arg)
        closure = {}
        if fn.__closure__:
            closure = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ if _filled(c))))
        env = _Env(fn.__globals__, closure)
        # Parameters are bound, but mutating them mutates the caller's objects.
        scan = _Scan(set(), set(), lambda f, bound, d: self._call_reason(f, bound, env, d), depth, env,
                     in_helper=True)
        scan.bound = set()
        locals_made = _assigned_names(body) - params
        scan.bound |= locals_made
        for s in body:
            scan.visit(s)
            if scan.reason:
                return f"in {fn.__qualname__}: {scan.reason}"
        return None


def _nkicc_code(obj, module: str) -> bool:
    """Whether `obj` is nkicc's own (trusted: it keeps no Python state between
    calls). Whose code it is is decided by its file, as for the tracer's
    locations and the cache key (ir.origin); a library's helper is read like
    the user's, since it may change what it is given (random.shuffle)."""
    code = getattr(obj, "__code__", None)
    path = code.co_filename if code is not None else getattr(sys.modules.get(module), "__file__", None)
    return isinstance(path, str) and is_nkicc(path)


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


_UNRESOLVED = object()


class _Env:
    def __init__(self, globals_: dict, locals_: dict) -> None:
        self.globals = globals_ or {}
        self.locals = locals_ or {}

    def lookup(self, node: ast.expr):
        if isinstance(node, ast.Name):
            for scope in (self.locals, self.globals, vars(builtins)):
                if node.id in scope:
                    return scope[node.id]
            return _UNRESOLVED
        if isinstance(node, ast.Attribute):
            base = self.lookup(node.value)
            if base is _UNRESOLVED:
                return _UNRESOLVED
            return getattr(base, node.attr, _UNRESOLVED)
        return _UNRESOLVED
