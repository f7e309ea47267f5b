"""The source level: a key on what the trace reads, so that a warm hit skips
the trace (as Triton and JAX key their caches on the function and what it
closes over).

`fingerprint(fn)` walks the kernel function and everything it can reach:

- its code (bytecode, constants, names, line numbers; never the file's path,
  so the same code in a restarted notebook, whose cell files are named
  `ipykernel_<PID>/...`, has the same fingerprint) and its source lines (the
  tracer reads the loops' source);
- its defaults, closure cells and every global or builtin its code (or a
  nested comprehension's or lambda's code) names, by value;
- every user function, module and `nkicc.jit` kernel reached that way,
  recursively: a helper in another module enters with its own code, source
  and globals, and a module with the value of every attribute any walked code
  names (`helpers.SCALE`, `helpers.tile`).

nkicc's own modules, functions and classes are tokens (the compiler's source
hash is in every key), as are the functions and classes of installed
libraries and the standard library (with their distribution's version).
Plain values (numbers, strings, tuples, lists, dicts, sets, numpy arrays,
scalars and dtypes) enter by value. Anything else (an arbitrary object, a
user class, a helper whose source is unavailable, state that changes by
itself such as `os.environ`, `time.time` or `random`) cannot be shown to
stay the same, and raises `Incomplete`: that compile uses the traced-IR key
only. The file paths of the walked functions are returned separately (in
walk order), so a hit can point the stored locations at the current files.
"""
from __future__ import annotations

import builtins
import dataclasses
import functools
import hashlib
import linecache
import sys
import types

import numpy as np

from nkicc.ir import Loc
from nkicc.ir.origin import LIBRARY, NKICC, USER, origin

from . import keys

# state that changes without the kernel's code changing (the clock, randomness, the
# environment, files): never keyed on
IMPURE_MODULES = frozenset({"os", "sys", "time", "random", "secrets", "uuid", "datetime", "socket", "subprocess",
                            "threading", "multiprocessing", "numpy.random", "importlib", "inspect", "gc",
                            "pathlib", "io", "shutil", "glob", "tempfile", "pickle", "csv", "sqlite3", "urllib",
                            "http", "linecache", "fileinput", "mmap", "h5py", "requests"})
IMPURE_FUNCTIONS = frozenset({"numpy.load", "numpy.loadtxt", "numpy.fromfile", "numpy.genfromtxt", "numpy.memmap",
                              "numpy.save", "json.load"})
IMPURE_BUILTINS = frozenset({"open", "input", "__import__", "eval", "exec", "compile", "globals", "locals", "vars",
                             "id", "hash", "breakpoint", "memoryview", "object"})
# names with which code reaches a module's attributes without naming them
DYNAMIC_ACCESS = frozenset({"getattr", "__dict__", "__getattribute__", "__getattr__"})
OWN_ROOTS = ("nkicc", "nki")
_KIND = {NKICC: "own", LIBRARY: "library", USER: "user"}  # ir.origin's answer, as keys spell it


class Incomplete(Exception):
    """What the trace reads cannot be shown complete (the message says why)."""


def _root_version(module_name: str) -> str | None:
    root = sys.modules.get(module_name.partition(".")[0])
    v = getattr(root, "__version__", None)
    return v if isinstance(v, str) else None


def _module_kind(m: types.ModuleType) -> str:
    """own (nkicc), library (installed or standard library) or user."""
    name = m.__name__ or ""
    path = getattr(m, "__file__", None)
    if path is None:  # built in (math, builtins) or a namespace package
        if name in sys.builtin_module_names:
            return "library"
        return "own" if name.partition(".")[0] in OWN_ROOTS else "user"
    return _KIND[origin(path)]


def _object_kind(obj) -> str:
    mod = getattr(obj, "__module__", None)
    m = sys.modules.get(mod) if isinstance(mod, str) else None
    if m is None:
        if isinstance(mod, str) and mod.partition(".")[0] in OWN_ROOTS:
            return "own"
        if mod == "builtins":
            return "library"
        return "user"
    return _module_kind(m)


def _by_name(obj) -> bool:
    """Whether `obj` is what its module and qualified name lead to. Functions a
    factory makes (`_binary.<locals>.fn` is nl.add, nl.subtract, ...) share a
    name, so a name alone does not tell them apart."""
    x = sys.modules.get(getattr(obj, "__module__", None) or "")
    for part in (getattr(obj, "__qualname__", None) or "<none>").split("."):
        x = getattr(x, "__dict__", {}).get(part) if x is not None else None
        if x is None:
            return False
    return x is obj


class _Walk:
    def __init__(self) -> None:
        self.files: list[str] = []        # co_filename of each walked user function, in walk order
        self.functions: dict[int, int] = {}  # id -> index in self.parts (cycles)
        self.parts: list = []
        self.modules: dict[str, types.ModuleType] = {}
        self.names: set[str] = set()      # every name any walked code uses (for module attributes)
        self.dynamic = False              # walked code reads attributes by computed names (getattr)
        self.keep: list = []              # objects walked (their ids must stay theirs)

    # --- values -----------------------------------------------------------------------

    def value(self, v, depth: int = 0):
        if depth > 50:
            raise Incomplete("a value nested too deeply")
        t = type(v)
        if v is None or v is Ellipsis or t in (bool, int, float, complex, str, bytes):  # (`t[...]`: Ellipsis)
            return [t.__name__, repr(v)]
        if t in (tuple, list):
            return [t.__name__, [self.value(x, depth + 1) for x in v]]
        if t is dict:
            items = [[self.value(k, depth + 1), self.value(x, depth + 1)] for k, x in v.items()]
            return ["dict", sorted(items, key=keys.canonical_json)]
        if t in (set, frozenset):
            return [t.__name__, sorted((self.value(x, depth + 1) for x in v), key=keys.canonical_json)]
        if t is slice or t is range:
            return [t.__name__, self.value((v.start, v.stop, v.step), depth + 1)]
        if isinstance(v, np.ndarray):
            if type(v) is not np.ndarray or v.dtype.hasobject:  # (a subclass may carry more: a mask)
                raise Incomplete(f"a {type(v).__qualname__} of {v.dtype}")
            data = np.ascontiguousarray(v)
            return ["ndarray", v.dtype.str, list(v.shape), hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest()]
        if isinstance(v, np.generic):
            return ["npscalar", v.dtype.str, repr(v.item())]
        if isinstance(v, np.dtype):
            return ["dtype", v.str]
        if isinstance(v, types.ModuleType):
            return self.module(v)
        if isinstance(v, types.FunctionType):
            return self.function(v)
        if isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            owner = getattr(v, "__self__", None)
            if owner is not None and not isinstance(owner, types.ModuleType):
                raise Incomplete(f"a bound builtin method {v.__qualname__}")
            mod = getattr(v, "__module__", None) or getattr(owner, "__name__", "") or ""
            if mod in IMPURE_MODULES or mod.partition(".")[0] in IMPURE_MODULES:
                raise Incomplete(f"{mod}.{v.__name__} (state that changes by itself)")
            if not (mod == "builtins" or getattr(sys.modules.get(mod), v.__name__, None) is v):
                raise Incomplete(f"the builtin {mod}.{v.__qualname__}, which its name does not identify")
            return ["builtin", mod, v.__qualname__]
        if isinstance(v, type):
            kind = _object_kind(v)
            if kind == "user" or not _by_name(v):
                raise Incomplete(f"the class {v.__module__}.{v.__qualname__}")
            return ["class", kind, v.__module__, v.__qualname__, _root_version(v.__module__)]
        if isinstance(v, np.ufunc):
            if getattr(np, v.__name__, None) is not v:
                raise Incomplete(f"the numpy ufunc {v.__name__}, which its name does not identify")
            return ["ufunc", v.__name__]
        if isinstance(v, functools.partial):
            return ["partial", self.value(v.func, depth + 1), self.value(v.args, depth + 1),
                    self.value(v.keywords, depth + 1)]
        if _object_kind(t) == "own":
            fn = getattr(v, "fn", None)
            if isinstance(fn, types.FunctionType):  # an nkicc.jit kernel
                return ["jit", self.function(fn), self.value(getattr(v, "grid", None), depth + 1)]
            # a value of nkicc's own (a dtype, a buffer): by its printed form
            text = repr(v)
            if " at 0x" in text:
                raise Incomplete(f"an nkicc {t.__qualname__} without a stable form")
            return ["own", t.__qualname__, text]
        raise Incomplete(f"a {t.__module__}.{t.__qualname__} object")

    def module(self, m: types.ModuleType):
        kind = _module_kind(m)
        name = m.__name__
        if kind != "own":
            self.modules.setdefault(name, m)  # its attributes that walked code names are keyed below
        return ["module", kind, name, _root_version(name) if kind == "library" else None]

    # --- functions --------------------------------------------------------------------

    def function(self, f: types.FunctionType, root: bool = False):
        kind = "user" if root else _object_kind(f)
        if kind != "user":
            mod = f.__module__ or ""
            if (mod in IMPURE_MODULES or mod.partition(".")[0] in IMPURE_MODULES
                    or f"{mod.partition('.')[0]}.{f.__name__}" in IMPURE_FUNCTIONS):
                raise Incomplete(f"{mod}.{f.__qualname__} (state that changes by itself)")
            if _by_name(f):
                return ["function", kind, mod, f.__qualname__, _root_version(mod) if kind == "library" else None]
            if kind == "library":
                raise Incomplete(f"the function {mod}.{f.__qualname__}, which its name does not identify")
            # one of nkicc's, made by a factory (nl.add): walked like the user's own, closure included
        seen = self.functions.get(id(f))
        if seen is not None:
            return ["ref", seen]
        index = len(self.parts)
        self.functions[id(f)] = index
        self.keep.append(f)
        self.parts.append(None)  # filled below; recursion sees the reference
        code = f.__code__
        self.files.append(code.co_filename)
        names: set[str] = set()
        part = {
            "code": self.code(code, names),
            "source": self.source(code),
            "defaults": self.value(f.__defaults__),
            "kwdefaults": self.value(f.__kwdefaults__),
            "closure": [[n, self.cell(c)] for n, c in zip(code.co_freevars, f.__closure__ or ())],
            "attributes": self.value(dict(f.__dict__)),  # helper.scale = 3; functools.wraps's __wrapped__
        }
        self.names |= names
        g = f.__globals__
        b = g.get("__builtins__", builtins)
        b = b.__dict__ if isinstance(b, types.ModuleType) else b
        reads = []
        for n in sorted(names):
            if n in g:
                reads.append([n, "global", self.value(g[n])])
            elif n in b:
                if n in IMPURE_BUILTINS:
                    raise Incomplete(f"the builtin {n}()")
                v = b[n]
                reads.append([n, "builtin", self.value(v)])
        part["reads"] = reads
        self.parts[index] = part
        return ["fn", index]

    def cell(self, c):
        try:
            return self.value(c.cell_contents)
        except ValueError:  # an empty cell
            return ["empty"]

    def code(self, code: types.CodeType, names: set[str]):
        names.update(code.co_names)
        names.update(c for c in code.co_consts if type(c) is str and c.isidentifier())  # getattr(h, "scale")
        if DYNAMIC_ACCESS & set(code.co_names):
            self.dynamic = True
        consts = []
        for c in code.co_consts:
            consts.append(self.code(c, names) if isinstance(c, types.CodeType) else self.value(c))
        return [code.co_name, getattr(code, "co_qualname", code.co_name), code.co_argcount,
                code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags, code.co_firstlineno,
                code.co_code.hex(), list(code.co_names), list(code.co_varnames), list(code.co_freevars),
                list(code.co_cellvars), consts,
                sorted({line for _, _, line in code.co_lines() if line is not None}),
                getattr(code, "co_exceptiontable", b"").hex()]

    def source(self, code: types.CodeType) -> str:
        """The function's source lines (the tracer reads its loops' source)."""
        lines = linecache.getlines(code.co_filename)
        if not lines:
            raise Incomplete(f"the source of {code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} "
                             "is not available")
        last = code.co_firstlineno
        stack = [code]
        while stack:
            c = stack.pop()
            for _, _, line in c.co_lines():
                if line is not None and line > last:
                    last = line
            stack.extend(x for x in c.co_consts if isinstance(x, types.CodeType))
        text = "".join(lines[code.co_firstlineno - 1:last])
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def module_attributes(self) -> list:
        """The value of every attribute of a walked user or library module that
        any walked code names (until nothing new is reached)."""
        out = []
        done: set[tuple[str, str]] = set()
        while True:
            todo = [(mn, n) for mn in sorted(self.modules) for n in sorted(self.names) if (mn, n) not in done]
            if self.dynamic:  # attributes by computed names: every attribute of the user's modules
                todo += [(mn, n) for mn, m in sorted(self.modules.items()) if _module_kind(m) == "user"
                         for n in sorted(m.__dict__) if not n.startswith("__") and (mn, n) not in done
                         and (mn, n) not in todo]
            if not todo:
                return out
            for mn, n in todo:
                done.add((mn, n))
                m = self.modules[mn]
                if n not in m.__dict__:
                    continue
                if (mn in IMPURE_MODULES or mn.partition(".")[0] in IMPURE_MODULES
                        or f"{mn.partition('.')[0]}.{n}" in IMPURE_FUNCTIONS):
                    raise Incomplete(f"{mn}.{n} (state that changes by itself)")
                out.append([mn, n, self.value(m.__dict__[n])])


def fingerprint(fn: types.FunctionType, constants: dict) -> tuple[dict, list[str]]:
    """({what the trace of `fn` with these compile-time constants reads},
    [file of each walked function, in walk order]); or Incomplete."""
    w = _Walk()
    try:
        w.function(fn, root=True)
        consts = [[k, w.value(v)] for k, v in constants.items()]
        attributes = w.module_attributes()
    except RecursionError:
        raise Incomplete("values nested too deeply") from None
    return {"functions": w.parts, "constants": consts, "attributes": attributes, "numpy": np.__version__}, w.files


def relocate(node, files: dict[str, str]):
    """`node` (IR, or a tuple/list of it) with every Loc whose file is a key
    of `files` pointing at the mapped file instead: a hit on code that now
    lives elsewhere (a restarted notebook's cell) reports the current file."""
    memo: dict[int, object] = {}

    def walk(x):
        if isinstance(x, Loc):
            return Loc(files[x.file], x.line) if x.file in files else x
        if isinstance(x, tuple):
            out = tuple(walk(y) for y in x)
            return x if all(a is b for a, b in zip(out, x)) else out
        if isinstance(x, list):
            return [walk(y) for y in x]
        if not dataclasses.is_dataclass(x) or isinstance(x, type):
            return x
        done = memo.get(id(x))
        if done is not None:
            return done
        changes = {}
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            w = walk(v)
            if w is not v:
                changes[f.name] = w
        out = dataclasses.replace(x, **changes) if changes else x
        memo[id(x)] = out
        return out

    return walk(node)
