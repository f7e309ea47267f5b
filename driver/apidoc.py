"""docs/api.md, generated from the definitions themselves: `python -m nkicc.apidoc > docs/api.md`
(or `nkicc apidoc`).

Every public name of the modules `nki` exposes (nkicc.language as `nl`,
nkicc.isa as `nisa`, nkicc.language.typing as `nt`, ...), and the options of
`nki.jit` / `nkicc.jit`, with
its signature (inspect.signature) and the first paragraph of its docstring.
Nothing is listed by hand: a module's public names are what dir() shows
(its `__all__` when it has one, for the callables), so a new operation appears
here as soon as it is defined, and tests/stories/test_newcomer.py fails while the
committed page differs from what this prints.
"""
from __future__ import annotations

import importlib
import inspect
import sys
import types

import numpy as np

import nkicc
from nkicc.api import JitKernel
from nkicc.language.dtypes import dtype_name

# how kernels conventionally import the modules of `nki` (import nki.language as nl, ...)
SHORT = {"language": "nl", "isa": "nisa", "typing": "nt"}


def modules() -> list[tuple[str, str, str]]:
    """(module name, how kernels spell it, what it holds) for every module the
    `nki` that nkicc serves exposes: found there, not listed here."""
    alias = _nki_alias()
    out = []
    for name in getattr(alias, "__all__", ()):
        mod = getattr(alias, name, None)
        if isinstance(mod, types.ModuleType):
            what = " ".join((inspect.getdoc(mod) or name).split("\n\n")[0].split())
            out.append((mod.__name__, SHORT.get(name, f"nki.{name}"), what))
    return out


HEADER = """# API reference

Generated from the definitions in nkicc by `python -m nkicc.apidoc > docs/api.md`
(do not edit by hand; `tests/stories/test_newcomer.py` fails when this page and the
code differ). Kernels written for NKI import these as `nki.language`,
`nki.isa` and `nki.typing`; under nkicc they are `nkicc.language`, `nkicc.isa`
and `nkicc.language.typing`. Keyword arguments shown as `**hints` are accepted
for compatibility with NKI and ignored (hardware hints such as `engine=` that
nkicc's passes decide themselves). Error codes: `nkicc explain CODE` and
`docs/errors.md`.
"""


def first_paragraph(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    if type(obj).__doc__ == doc and not isinstance(obj, type) and not callable(obj):
        return ""  # an instance only inherits its class's docstring
    return " ".join(doc.split("\n\n")[0].split())


def signature(obj) -> str:
    """The signature without annotations (they are strings under postponed
    evaluation and say less than the docstring)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = []
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.name.startswith("_"):  # **_hints: accepted and ignored
            p = p.replace(name=p.name.lstrip("_"))
        params.append(p.replace(annotation=inspect.Parameter.empty))
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def _defined_in(obj, package: str) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return mod == package or mod.startswith(package + ".")


def _is_dtype(v) -> bool:
    if isinstance(v, type) and issubclass(v, np.generic):
        return True
    return type(v).__name__.endswith("Dtype") or isinstance(v, np.dtype)


def public_names(module: types.ModuleType) -> tuple[list, list, list]:
    """(functions, classes, constants) as (name, object) lists, sorted."""
    exported = getattr(module, "__all__", None)
    funcs, classes, consts = [], [], []
    for name in sorted(set(dir(module))):
        if name.startswith("_"):
            continue
        try:
            v = getattr(module, name)
        except AttributeError:
            continue
        if isinstance(v, types.ModuleType) or getattr(v, "__module__", None) == "__future__":
            continue
        if _is_dtype(v):
            consts.append((name, v))
        elif callable(v) and not _is_constant_instance(v):
            if exported is not None and name not in exported:
                continue
            if exported is None and not _defined_in(v, module.__name__):
                continue  # imported helpers (numpy, nkicc.ir): not part of this module's API
            (classes if isinstance(v, type) else funcs).append((name, v))
        elif name.islower() and (v is None or isinstance(v, (str, int, float, bool)) or _defined_in(type(v), "nkicc")):
            consts.append((name, v))  # buffers, engine hints, annotation objects (UPPER_CASE: internal limits)
    return funcs, classes, consts


def _is_constant_instance(v) -> bool:
    """An instance of an nkicc class that happens to be callable or subscriptable (nt.tensor)."""
    return not isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                              types.LambdaType)) and _defined_in(type(v), "nkicc")


def _value(v) -> str:
    if _is_dtype(v):  # nkicc's name for it, not numpy's or ml_dtypes' (their text varies by version)
        return dtype_name(v)
    return repr(v)


def _members(cls) -> list[str]:
    """Public methods and properties of a class, one line each."""
    out = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out.append(f"  - `.{name}`: {first_paragraph(member.fget)}".rstrip(": "))
        elif inspect.isfunction(member):
            out.append(f"  - `.{name}{signature(member)}`: {first_paragraph(member)}".rstrip(": "))
        elif isinstance(member, (classmethod, staticmethod)):
            out.append(f"  - `.{name}{signature(member.__func__)}`: {first_paragraph(member.__func__)}".rstrip(": "))
        elif isinstance(member, (int, float, str)):
            out.append(f"  - `.{name}` = {member!r}")
    return out


def _entry(text: str, doc: str) -> str:
    return f"- `{text}`" + (f": {doc}" if doc else "")


def module_section(modname: str, short: str, what: str) -> list[str]:
    module = importlib.import_module(modname)
    funcs, classes, consts = public_names(module)
    lines = [f"## `{short}`: {modname}", "", what.rstrip(".") + ".", ""]
    if funcs:
        lines += ["### Functions", ""]
        lines += [_entry(f"{short}.{n}{signature(v)}", first_paragraph(v)) for n, v in funcs]
        lines.append("")
    if classes:
        lines += ["### Classes", ""]
        for n, v in classes:
            lines.append(_entry(f"{short}.{n}{signature(v)}", first_paragraph(v)))
            lines += _members(v)
        lines.append("")
    if consts:
        lines += ["### Constants and dtypes", ""]
        lines += [_entry(f"{short}.{n}", f"dtype `{_value(v)}`" if _is_dtype(v) else f"`{_value(v)}`")
                  for n, v in consts]
        lines.append("")
    return lines


def jit_section() -> list[str]:
    lines = ["## `nki.jit` / `nkicc.jit`: kernel options", "",
             _entry(f"nkicc.jit{signature(nkicc.jit)}", first_paragraph(nkicc.jit)), "",
             "Options (keyword arguments of `@nkicc.jit(...)`):", ""]
    sig = inspect.signature(JitKernel.__init__)
    for p in sig.parameters.values():
        if p.name in ("self", "fn"):
            continue
        lines.append(f"- `{p.name}={p.default!r}`")
    doc = first_paragraph(JitKernel)
    if doc:
        lines += ["", doc]
    alias = _nki_alias()
    if alias is not None:
        lines += ["", f"`nki.jit{signature(alias.jit)}`: {first_paragraph(alias.jit)} "
                      "Accepted and ignored (they mean nothing to a simulator): "
                      + ", ".join(f"`{n}`" for n in getattr(alias, "_VENDOR_OPTIONS", ())) + "."]
    return lines + [""]


def _nki_alias():
    """nkicc's own `nki` module (the one `nkicc run` puts behind `import nki`)."""
    try:
        return importlib.import_module("nkicc._nki_alias.nki")
    except ImportError:
        return None


def render() -> str:
    lines = HEADER.splitlines() + [""]
    for modname, short, what in modules():
        lines += module_section(modname, short, what)
    lines += jit_section()
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
