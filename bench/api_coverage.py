"""How much of the NKI API reference nkicc provides.

    python bench/api_coverage.py SDK_DIR   # a checkout (or `git archive`) of aws-neuron-sdk

reads the reference's Python stubs (nki/api/nki/{__init__,language/__init__,
isa/__init__,collectives/__init__}.py) with `ast` (they are never imported),
lists every public name and class member with its signature, writes that list
to bench/api_reference.json (names, parameter kinds and defaults only: no text
of the reference) and compares nkicc with it into docs/api-coverage.md.

Without SDK_DIR (or when it holds no stubs) it says so and exits 0; the test
suite (tests/language/test_api_coverage.py) compares nkicc with the committed list.

What counts as one name: a public module-level function, class or constant;
a public member of a public class (methods, properties, fields, enum values;
`__init__`/`__getitem__`/`__setitem__` are not counted); a field of an
instance of a private class exported under a public name (`nl.tile_size.pmax`).
Names a stub imports from another stub module (nisa's `NkiTensor`, `equal`,
...) are counted once, where they are defined.

"semantics test": a test in tests/ decorated `@pytest.mark.api("nl.erf", ...)`
(or a module with `pytestmark = pytest.mark.api(...)`) that checks the name's
behaviour against numpy; nl/nisa/ncc abbreviate nki.language/isa/collectives.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import pathlib
import sys
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parent.parent
REFERENCE_JSON = REPO / "bench" / "api_reference.json"
REPORT_MD = REPO / "docs" / "api-coverage.md"
STUBS = {  # module -> stub file under SDK_DIR
    "nki": "nki/api/nki/__init__.py",
    "nki.language": "nki/api/nki/language/__init__.py",
    "nki.isa": "nki/api/nki/isa/__init__.py",
    "nki.collectives": "nki/api/nki/collectives/__init__.py",
}
SHORT = {"nl": "nki.language", "nisa": "nki.isa", "ncc": "nki.collectives", "nki": "nki"}
NO_DEFAULT = "<required>"
_COUNTED_DUNDERS: tuple[str, ...] = ()


# --- the reference, from the stubs ------------------------------------------------

def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[dict]:
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, d) in enumerate(zip(positional, defaults)):
        if method and i == 0:
            continue  # self
        kind = "POSITIONAL_ONLY" if arg in a.posonlyargs else "POSITIONAL_OR_KEYWORD"
        out.append({"name": arg.arg, "kind": kind, "default": NO_DEFAULT if d is None else ast.unparse(d)})
    if a.vararg:
        out.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL", "default": NO_DEFAULT})
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append({"name": arg.arg, "kind": "KEYWORD_ONLY", "default": NO_DEFAULT if d is None else ast.unparse(d)})
    if a.kwarg:
        out.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD", "default": NO_DEFAULT})
    return out


def _is_property(fn) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def _is_enum(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(b).split(".")[-1] == "Enum" for b in cls.bases)


def _class_members(cls: ast.ClassDef) -> list[dict]:
    enum = _is_enum(cls)
    out = []
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("_") and node.name not in _COUNTED_DUNDERS:
                continue
            if _is_property(node):
                out.append({"name": node.name, "kind": "property"})
            else:
                out.append({"name": node.name, "kind": "method", "params": _params(node, True)})
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_"):
                    entry = {"name": t.id, "kind": "enum value" if enum else "attribute"}
                    if enum and node.value is not None:
                        try:
                            entry["value"] = ast.literal_eval(node.value)
                        except ValueError:
                            pass
                    out.append(entry)
    return out


def read_stub(module: str, source: str) -> list[dict]:
    """Every public name of one stub module, members of classes included."""
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out = []

    def add(name, kind, **more):
        out.append({"module": module, "name": name, "kind": kind, **more})

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            add(node.name, "function", params=_params(node, False))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            init = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
            kind = "enum" if _is_enum(node) else "class"
            add(node.name, kind, **({"params": _params(init, True)} if init is not None and kind == "class" else {}))
            for m in _class_members(node):
                add(f"{node.name}.{m.pop('name')}", m.pop("kind"), **m)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                continue  # a type alias (`DType = str`), for the stub's annotations
            for t in targets:
                if not isinstance(t, ast.Name) or t.id.startswith("_"):
                    continue
                add(t.id, "constant")
                ann = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else ""
                if ann.startswith("_") and ann in classes:  # an instance of a private class: its fields count
                    for m in _class_members(classes[ann]):
                        add(f"{t.id}.{m.pop('name')}", m.pop("kind"), **m)
    return out


def read_reference(sdk_dir: pathlib.Path) -> list[dict] | None:
    entries = []
    found = False
    for module, rel in STUBS.items():
        path = sdk_dir / rel
        if path.is_file():
            found = True
            entries += read_stub(module, path.read_text())
    return entries if found else None


# --- nkicc ------------------------------------------------------------------------

def nkicc_modules() -> dict[str, object]:
    """nkicc's module for each reference module (None where nkicc has none)."""
    from nkicc._nki_alias import nki as alias
    mods: dict[str, object] = {"nki": alias}
    for ref, ours in (("nki.language", "nkicc.language"), ("nki.isa", "nkicc.isa"),
                      ("nki.collectives", "nkicc.collectives")):
        try:
            mods[ref] = importlib.import_module(ours)
        except ImportError:
            mods[ref] = getattr(alias, ref.split(".")[1], None)
    return mods


ABSENT = object()


def _lookup(obj, dotted: str):
    """obj.a.b, class attributes read without running properties; ABSENT when missing."""
    for part in dotted.split("."):
        try:
            obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
        except Exception:  # noqa: BLE001 - AttributeError, or an nkicc name that raises when read
            return ABSENT
    return obj


_MISSING = object()


def _default_value(text: str, module) -> object:
    """A reference default as a value: a literal, or a name looked up in nkicc's
    module (then in nkicc.language, where the stubs import `equal`, `maximum` from)."""
    if text == "...":
        return _MISSING  # the stub hides the default: any default matches
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    for mod in (module, importlib.import_module("nkicc.language")):
        found = _lookup(mod, text) if mod is not None else ABSENT
        if found is not ABSENT:
            return found
    return ("<unresolved>", text)


def _same_default(ref: str, ours, module) -> bool:
    if ref == NO_DEFAULT:
        return True  # required in the reference: a default in nkicc still accepts every reference call
    if ours is inspect.Parameter.empty:
        return False
    want = _default_value(ref, module)
    if want is _MISSING:
        return True
    if isinstance(want, tuple) and want[:1] == ("<unresolved>",):
        return False
    op = getattr(want, "_nki_op", None)
    if op is not None and op == getattr(ours, "_nki_op", None):
        return True  # the same ALU operator (`nl.maximum` in the reference, a named stand-in in nkicc)
    try:
        return bool(want == ours) or want is ours
    except Exception:  # noqa: BLE001 - arrays and the like compare as different
        return False


def compare_signature(ref_params: list[dict], fn, module) -> str:
    """"" when `fn` accepts the reference's call shapes: every reference
    parameter by name, kind, position and default (nkicc may give a default to
    one the reference requires); nkicc's extra parameters are optional.
    Otherwise what differs, in a few words."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "no signature"
    ours = list(sig.parameters.values())
    by_name = {p.name: p for p in ours}
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    diffs = []
    for i, rp in enumerate(p for p in ref_params if p["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")):
        if i >= len(positional) or positional[i].name != rp["name"]:
            got = positional[i].name if i < len(positional) else "nothing"
            diffs.append(f"position {i} is {got}, not {rp['name']}")
    for rp in ref_params:
        p = by_name.get(rp["name"])
        if rp["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            kind = getattr(inspect.Parameter, rp["kind"])
            if not any(q.kind == kind for q in ours):
                diffs.append(f"no {'*' if kind == inspect.Parameter.VAR_POSITIONAL else '**'}{rp['name']}")
            continue
        if p is None:
            diffs.append(f"no parameter {rp['name']}")
            continue
        if rp["kind"] == "KEYWORD_ONLY" and p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            diffs.append(f"{rp['name']} is not a keyword")
        if not _same_default(rp["default"], p.default, module):
            want = "required" if rp["default"] == NO_DEFAULT else f"={rp['default']}"
            have = "required" if p.default is inspect.Parameter.empty else f"={p.default!r}"
            diffs.append(f"{rp['name']} {have}, reference {want}")
    ref_names = {p["name"] for p in ref_params}
    for p in ours:
        if p.name not in ref_names and p.default is inspect.Parameter.empty and p.kind not in (
                p.VAR_POSITIONAL, p.VAR_KEYWORD):
            diffs.append(f"extra required parameter {p.name}")
    return "; ".join(diffs)


@dataclass
class Row:
    module: str
    name: str
    kind: str
    present: bool
    signature: str  # "yes", "n/a", or what differs
    tested: bool

    @property
    def full(self) -> str:
        return f"{self.module}.{self.name}"


def check(entries: list[dict], tested: set[str], modules: dict | None = None) -> list[Row]:
    modules = modules if modules is not None else nkicc_modules()
    rows = []
    for e in entries:
        module = modules.get(e["module"])
        obj = _lookup(module, e["name"]) if module is not None else ABSENT
        present = obj is not ABSENT
        sig = "n/a"
        if present and "params" in e:
            target = obj
            if isinstance(obj, (staticmethod, classmethod)):
                target = obj.__func__
            if e["kind"] == "class" and inspect.isclass(obj):
                target = obj.__init__
                diff = compare_signature([{"name": "self", "kind": "POSITIONAL_OR_KEYWORD",
                                           "default": NO_DEFAULT}] + e["params"], target, module)
            elif e["kind"] == "method":
                diff = compare_signature([{"name": "self", "kind": "POSITIONAL_OR_KEYWORD",
                                           "default": NO_DEFAULT}] + e["params"], target, module)
            else:
                diff = compare_signature(e["params"], target, module)
            sig = diff or "yes"
        elif present and e["kind"] == "enum value" and "value" in e:
            value = getattr(obj, "value", obj)
            sig = "yes" if value == e["value"] else f"value {value!r}, reference {e['value']!r}"
        elif not present:
            sig = "-"
        rows.append(Row(e["module"], e["name"], e["kind"], present, sig, f"{e['module']}.{e['name']}" in tested))
    return rows


# --- which names have a semantics test ----------------------------------------------

def _expand(name: str) -> str:
    head, _, rest = name.partition(".")
    return f"{SHORT[head]}.{rest}" if head in SHORT and rest else name


def tested_names(tests_dir: pathlib.Path = REPO / "tests") -> set[str]:
    """The string literals given to `pytest.mark.api(...)` (or `api(...)` after
    `api = pytest.mark.api`) in tests/**/*.py."""
    names = set()
    for path in sorted(tests_dir.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.mark.api", "mark.api", "api"):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        names.add(_expand(arg.value))
    return names


# --- the report ----------------------------------------------------------------------

def summary(rows: list[Row]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        s = out.setdefault(r.module, {"names": 0, "present": 0, "signature": 0, "tested": 0})
        s["names"] += 1
        s["present"] += r.present
        s["signature"] += r.signature in ("yes", "n/a") and r.present
        s["tested"] += r.tested
    return out


def render(rows: list[Row], command: str) -> str:
    s = summary(rows)
    total = {k: sum(m[k] for m in s.values()) for k in ("names", "present", "signature", "tested")}
    lines = [
        "# NKI API coverage",
        "",
        "Generated by `" + command + "` from the NKI API reference stubs",
        "(aws-neuron-sdk `nki/api/nki/`); the list of names and signatures is committed as",
        "`bench/api_reference.json`, and `tests/language/test_api_coverage.py` checks nkicc against it.",
        "",
        "- **present**: nkicc has the name (`nkicc.language` is `nki.language`, `nkicc.isa` is `nki.isa`).",
        "- **signature**: every reference parameter is accepted under the same name, kind, position and",
        "  default (a parameter the reference requires may have a default in nkicc); nkicc's own extra",
        "  parameters are optional. `n/a` for constants, attributes, properties.",
        "- **semantics test**: a test marked `@pytest.mark.api(name)` checks its behaviour against numpy.",
        "",
        "What counts as a name: public module-level functions, classes and constants; public members of",
        "public classes (methods, properties, fields, enum values; not `__init__`/`__getitem__`/`__setitem__`);",
        "the fields of `nl.tile_size`. Not counted: names a stub imports from another stub (nisa's",
        "`NkiTensor`, `equal`, `maximum`) and the stubs' type alias `DType = str`.",
        "",
        "| module | names | present | signature matches | semantics test |",
        "|---|---|---|---|---|",
    ]
    for module, m in s.items():
        lines.append(f"| {module} | {m['names']} | {m['present']} | {m['signature']} | {m['tested']} |")
    lines.append(f"| **all** | {total['names']} | {total['present']} | {total['signature']} | {total['tested']} |")
    for module in s:
        lines += ["", f"## {module}", "", "| name | kind | present | signature | semantics test |", "|---|---|---|---|---|"]
        for r in rows:
            if r.module == module:
                lines.append(f"| `{r.name}` | {r.kind} | {'yes' if r.present else '**no**'} | {r.signature} | "
                             f"{'yes' if r.tested else '-'} |")
    return "\n".join(lines) + "\n"


def load_reference() -> list[dict]:
    return json.loads(REFERENCE_JSON.read_text())["names"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2])
        print("skipped: no SDK_DIR given (the suite checks the committed bench/api_reference.json)")
        return 0
    entries = read_reference(pathlib.Path(argv[0]))
    if entries is None:
        print(f"skipped: no NKI API stubs under {argv[0]} (expected {STUBS['nki.language']})")
        return 0
    lines = ",\n".join("  " + json.dumps(e) for e in entries)  # one name a line: small diffs when the SDK moves
    REFERENCE_JSON.write_text('{"source": "aws-neuron-sdk nki/api/nki stubs", "names": [\n' + lines + "\n]}\n")
    rows = check(entries, tested_names())
    REPORT_MD.write_text(render(rows, "python bench/api_coverage.py SDK_DIR"))
    for module, m in summary(rows).items():
        print(f"{module:16} {m['present']:4}/{m['names']:<4} present, {m['signature']:4} signatures match, "
              f"{m['tested']:4} tested")
    print(f"{'all':16} {sum(r.present for r in rows):4}/{len(rows):<4} present")
    print(f"wrote {REFERENCE_JSON.relative_to(REPO)} and {REPORT_MD.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
