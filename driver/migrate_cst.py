"""The rewrites of `nkicc migrate`, on libcst's concrete syntax tree (comments,
blank lines and formatting of everything not rewritten stay as written).

Each pass is a transformer for one or a few rules of migrate_rules.py. What a
pass cannot rewrite it leaves in place with a `# nkicc-migrate: RULE note`
comment line above the statement. Names are resolved through the file's own
imports (`import neuronxcc.nki.language as nl` makes `nl.mgrid` the name
`nki.language.mgrid`), so aliases of any spelling work.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import libcst as cst

from . import isa as _isa
from .isa import dge_mode, engine, nc_version, oob_mode, reduce_cmd

_isa_names = vars(_isa)

MARK = "# nkicc-migrate:"
NL, ISA = "nki.language", "nki.isa"
_STMT = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_CODE = cst.Module([])


def code(node: cst.CSTNode) -> str:
    return _CODE.code_for_node(node)


def squash(node: cst.CSTNode) -> str:
    """A node's code without whitespace: two spellings of one expression compare equal."""
    return "".join(code(node).split())


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def dotted(node) -> list[str] | None:
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else head + [node.attr.value]
    return None


def _module_name(node) -> str:
    return ".".join(dotted(node) or [])


def _canonical(name: str) -> str:
    return "nki" + name[len("neuronxcc.nki"):] if name == "neuronxcc.nki" or name.startswith("neuronxcc.nki.") else name


class Names:
    """Local names of a file's nki imports -> the canonical dotted name."""

    def __init__(self, module: cst.Module):
        self.alias: dict[str, str] = {}
        module.visit(_ImportScan(self.alias))

    def qual(self, node) -> str | None:
        parts = dotted(node)
        if not parts or parts[0] not in self.alias:
            return None
        full = _canonical(".".join([self.alias[parts[0]], *parts[1:]]))
        return full if full == "nki" or full.startswith("nki.") else None

    def local(self, canonical: str) -> str:
        """How the file spells `canonical` (nl, nki.language, ...); the usual alias when it has none."""
        for name, target in self.alias.items():
            if _canonical(target) == canonical:
                return name
        for name, target in self.alias.items():
            if canonical.startswith(_canonical(target) + "."):
                return name + canonical[len(_canonical(target)):]
        return {"nki.language": "nl", "nki.isa": "nisa", "nki": "nki"}.get(canonical, canonical)


class _ImportScan(cst.CSTVisitor):
    def __init__(self, alias):
        self.alias = alias

    def visit_Import(self, node):
        for a in node.names:
            full = _module_name(a.name)
            if a.asname is not None:
                self.alias[a.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.alias[head] = head

    def visit_ImportFrom(self, node):
        if node.module is None or isinstance(node.names, cst.ImportStar):
            return
        base = _module_name(node.module)
        for a in node.names:
            local = a.asname.name.value if a.asname is not None else a.name.value
            self.alias[local] = f"{base}.{_module_name(a.name)}"


@dataclass
class Context:
    """What the passes share: the file's names, its kernels, the rules in force."""
    names: Names
    enabled: set[str]
    kernels: set[str] = field(default_factory=set)       # functions decorated as kernels
    kernel_scope: set[str] = field(default_factory=set)  # kernels and the file's functions they call
    applied: set[str] = field(default_factory=set)       # rules that rewrote something (RULE.numerics: a
    #                                                      rewrite of that rule that rounds otherwise)
    taken: set[str] = field(default_factory=set)         # names in use (fresh names avoid them)
    infos: list[tuple[str, str]] = field(default_factory=list)  # (rule, what the user must do outside the code)

    def fresh(self, stem: str) -> str:
        n = 0
        while f"{stem}{n}" in self.taken:
            n += 1
        self.taken.add(f"{stem}{n}")
        return f"{stem}{n}"


KERNEL_DECORATORS = {"nki.jit", "nki.baremetal", "nki.benchmark", "nki.profile", "nki.compiler.skip_middle_end_transformations"}


def _decorator_qual(names: Names, d: cst.Decorator) -> str | None:
    target = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
    return names.qual(target)


def scan_kernels(module: cst.Module, ctx: Context) -> None:
    """Kernels (functions with a kernel decorator), and the functions of the file they call."""
    defs: dict[str, cst.FunctionDef] = {}

    class Scan(cst.CSTVisitor):
        def visit_FunctionDef(self, node):
            defs[node.name.value] = node
            if any(_decorator_qual(ctx.names, d) in KERNEL_DECORATORS for d in node.decorators):
                ctx.kernels.add(node.name.value)

        def visit_Name(self, node):
            ctx.taken.add(node.value)

    module.visit(Scan())
    todo = list(ctx.kernels)
    ctx.kernel_scope = set(ctx.kernels)
    while todo:
        fn = defs[todo.pop()]
        for called in _called_names(fn):
            if called in defs and called not in ctx.kernel_scope:
                ctx.kernel_scope.add(called)
                todo.append(called)


def _called_names(fn: cst.CSTNode) -> set[str]:
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Call(self, node):
            if isinstance(node.func, cst.Name):
                out.add(node.func.value)

    fn.visit(V())
    return out


def _with_marks(node, marks: list[tuple[str, str]]):
    if isinstance(node, cst.FlattenSentinel):
        first, *rest = node.nodes
        return cst.FlattenSentinel([_with_marks(first, marks), *rest])
    if not isinstance(node, _STMT):
        return node
    have = {line.comment.value for line in node.leading_lines if line.comment is not None}
    lines = list(node.leading_lines)
    for rule, note in marks:
        text = f"{MARK} {rule} {note}".rstrip()
        if text not in have:
            lines.append(cst.EmptyLine(comment=cst.Comment(text)))
            have.add(text)
    return node.with_changes(leading_lines=lines)


class Pass(cst.CSTTransformer):
    """A transformer that knows the statement and function it is in, and can
    leave a `# nkicc-migrate:` comment on the statement."""
    rules: tuple[str, ...] = ()

    def __init__(self, ctx: Context):
        super().__init__()
        self.ctx = ctx
        self._marks: list[list[tuple[str, str]]] = []
        self.functions: list[str] = []

    def on(self, rule: str) -> bool:
        return rule in self.ctx.enabled

    def flag(self, rule: str, note: str) -> None:
        if self.on(rule) and self._marks:
            if (rule, note) not in self._marks[-1]:
                self._marks[-1].append((rule, note))

    def did(self, rule: str) -> None:
        self.ctx.applied.add(rule)

    def in_kernel(self) -> bool:
        return any(f in self.ctx.kernel_scope for f in self.functions)

    def qual(self, node) -> str | None:
        return self.ctx.names.qual(node)

    def local(self, canonical: str) -> str:
        return self.ctx.names.local(canonical)

    def on_visit(self, node) -> bool:
        if isinstance(node, _STMT):
            self._marks.append([])
        if isinstance(node, cst.FunctionDef):
            self.functions.append(node.name.value)
        return super().on_visit(node)

    def on_leave(self, original, updated):
        out = super().on_leave(original, updated)
        if isinstance(original, cst.FunctionDef):
            self.functions.pop()
        if isinstance(original, _STMT):
            marks = self._marks.pop()
            if marks and not isinstance(out, cst.RemovalSentinel):
                out = _with_marks(out, marks)
        return out


def _kw(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _without(call: cst.Call, *names: str) -> cst.Call:
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value in names)]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def _positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def _arg(value: cst.BaseExpression, keyword: str | None = None) -> cst.Arg:
    if keyword is None:
        return cst.Arg(value)
    return cst.Arg(value, keyword=cst.Name(keyword),
                   equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))


def _add_args(call: cst.Call, front: list[cst.Arg] = (), back: list[cst.Arg] = ()) -> cst.Call:
    args = list(call.args)
    if args and back:
        last = args[-1]
        if last.comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    front = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in front] \
        if args or back else list(front)
    return call.with_changes(args=[*front, *args, *back])


# --- namespace and entry points (M0201, M0402, M0213, M0301, M0303, M0304, M0207) ----------

class Namespace(Pass):
    """`neuronxcc.nki...` imports -> `nki...` (aliases kept, so no other line changes)."""
    rules = ("M0201", "M0402")

    def _fix(self, name):
        text = _module_name(name)
        if _canonical(text) == text:
            return name
        self.did("M0201")
        return expr(_canonical(text)) if "." in _canonical(text) else cst.Name(_canonical(text))

    def leave_ImportAlias(self, original, updated):
        # `import neuronxcc.nki.language` binds `neuronxcc`; its dotted uses are fixed in leave_Attribute
        new = updated.with_changes(name=self._fix(updated.name))
        if _module_name(original.name).startswith("neuronxcc") and new.asname is not None and \
                _module_name(new.name) == new.asname.name.value:  # `import neuronxcc.nki as nki` -> `import nki`
            new = new.with_changes(asname=None)
        return new

    def leave_ImportFrom(self, original, updated):
        if updated.module is None:
            return updated
        text = _module_name(updated.module)
        if text == "neuronxcc" and not isinstance(updated.names, cst.ImportStar) and \
                all(_module_name(a.name) == "nki" for a in updated.names):
            # `from neuronxcc import nki` -> `import nki`
            self.did("M0201")
            return cst.Import(names=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in updated.names])
        return updated.with_changes(module=self._fix(updated.module))

    def leave_Attribute(self, original, updated):
        # a dotted use through a bare `import neuronxcc.nki...`: neuronxcc.nki.language.x -> nki.language.x
        parts = dotted(updated)
        if parts and parts[:2] == ["neuronxcc", "nki"] and self.ctx.names.alias.get("neuronxcc") == "neuronxcc":
            self.did("M0201")
            return expr(".".join(parts[1:]))
        return updated


class EntryPoints(Pass):
    """nki.jit options, 0.1 runtime entry points, decorators on sub-kernels."""
    rules = ("M0213", "M0301", "M0303", "M0304", "M0207")

    def leave_Decorator(self, original, updated):
        q = _decorator_qual(self.ctx.names, updated)
        fn = self.functions[-1] if self.functions else None
        target = updated.decorator.func if isinstance(updated.decorator, cst.Call) else updated.decorator
        if q == "nki.baremetal" and self.on("M0213"):
            self.did("M0213")
            return updated.with_changes(decorator=target.with_changes(attr=cst.Name("jit"))
                                        if isinstance(target, cst.Attribute) else cst.Name("jit"))
        if q == "nki.benchmark" or q == "nki.profile":
            self.flag("M0213", f"nki.{q.split('.')[-1]} has no 0.6 counterpart: decorate with @nki.jit and "
                               "time it with `nkicc simulate` (an estimate) or the Neuron profiler")
        if q == "nki.jit" and isinstance(updated.decorator, cst.Call):
            call = updated.decorator
            if not call.args:
                return updated.with_changes(decorator=call.func)
        return updated

    def leave_FunctionDef(self, original, updated):
        # M0207: a kernel another kernel calls loses its decorator
        name = updated.name.value
        if not self.on("M0207") or name not in self.ctx.kernels:
            return updated
        callers = [k for k in self.ctx.kernels if k != name and name in self._calls.get(k, ())]
        if not callers:
            return updated
        keep = [d for d in updated.decorators if _decorator_qual(self.ctx.names, d) != "nki.jit"]
        if len(keep) != len(updated.decorators):
            self.did("M0207")
            return updated.with_changes(decorators=keep)
        return updated

    def visit_Module(self, node):
        self._calls = {}

        class V(cst.CSTVisitor):
            def visit_FunctionDef(inner, fn):
                self._calls[fn.name.value] = _called_names(fn)

        node.visit(V())

    def leave_Call(self, original, updated):
        q = self.qual(updated.func)
        if q == "nki.simulate_kernel" and (self.on("M0213") or self.on("M0301")) and _positional(updated):
            first, *rest = updated.args
            self.did("M0301" if self.on("M0301") else "M0213")
            simulate = cst.Call(updated.func.with_changes(attr=cst.Name("simulate")) if isinstance(
                updated.func, cst.Attribute) else cst.Name("simulate"), args=[first.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
            return cst.Call(simulate, args=rest)
        if q == "nki.benchmark" or q == "nki.profile":
            self.flag("M0213", f"nki.{q.split('.')[-1]} has no 0.6 counterpart: call the kernel (nki.jit) and "
                               "time it with `nkicc simulate` (an estimate) or the Neuron profiler")
        if q == "nki.baremetal" and self.on("M0213"):
            self.did("M0213")
            jit = updated.func.with_changes(attr=cst.Name("jit")) if isinstance(updated.func, cst.Attribute) \
                else cst.Name("jit")
            return updated.with_changes(func=jit, args=[a for a in updated.args if a.keyword is None][:1])
        if q == "nki.jit":
            if _kw(updated, "mode") and self.on("M0304"):
                self.did("M0304")
                updated = _without(updated, "mode")
            target = _kw(updated, "platform_target")
            if target is not None and self.on("M0303"):
                self.did("M0303")
                self.ctx.infos.append(("M0303", f"platform_target= removed: set NEURON_PLATFORM_TARGET_OVERRIDE="
                                                f"{code(target.value)} when running it"))
                updated = _without(updated, "platform_target")
        return updated


# --- index grids and masks (M0203, M0204) ---------------------------------------------

@dataclass(frozen=True)
class Axis:
    axis: int
    rank: int
    lo: str
    hi: str
    step: str = "1"
    base: str = ""      # `off + nl.arange(n)[:, None]`: off


def _atom(text: str) -> str:
    """`text` as an operand of `+`: in parentheses when it binds more loosely."""
    try:
        node = expr(text)
    except cst.ParserSyntaxError:
        return f"({text})"
    if isinstance(node, cst.BinaryOperation):
        loose = (cst.BitOr, cst.BitAnd, cst.BitXor, cst.LeftShift, cst.RightShift)
        return f"({text})" if isinstance(node.operator, loose) and not node.lpar else text
    loose = (cst.IfExp, cst.Lambda, cst.Comparison, cst.BooleanOperation, cst.NamedExpr)
    return f"({text})" if isinstance(node, loose) and not node.lpar else text


def _plus(*parts: str) -> str:
    parts = [p for p in parts if p and p != "0"]
    return " + ".join(_atom(p) if i else p for i, p in enumerate(parts)) if parts else "0"


def _slice_bounds(s: cst.BaseSlice) -> tuple[str, str, str] | None:
    if not isinstance(s, cst.Slice) or s.upper is None:
        return None
    return (code(s.lower) if s.lower is not None else "0", code(s.upper),
            code(s.step) if s.step is not None else "1")


class Grids:
    """The index grids a function defines: name -> Axis, grid object name -> its Axes."""

    def __init__(self, names: Names):
        self.names = names
        self.vars: dict[str, Axis] = {}
        self.objects: dict[str, list[Axis]] = {}
        self.defs: dict[str, set[str]] = {}    # squashed code of a defining statement -> the names it binds

    def arange(self, node) -> Axis | None:
        """`nl.arange(...)[:, None]` and `off + nl.arange(...)[...]` as an Axis."""
        base = ""
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                ax = self.arange(a)
                if ax is not None and not ax.base and not self.refers(b):
                    return Axis(ax.axis, ax.rank, ax.lo, ax.hi, ax.step, code(b))
            return None
        call, pattern = node, None
        if isinstance(node, cst.Subscript):
            call = node.value
            pattern = [e.slice for e in node.slice]
        if not (isinstance(call, cst.Call) and self.names.qual(call.func) == f"{NL}.arange"):
            return None
        args = [code(a.value) for a in call.args if a.keyword is None]
        if not 1 <= len(args) <= 3 or len(args) != len(call.args):
            return None
        lo, hi, step = (["0", args[0], "1"] if len(args) == 1 else args + ["1"] if len(args) == 2 else args)
        if pattern is None:
            return Axis(0, 1, lo, hi, step, base)
        full = [i for i, p in enumerate(pattern) if isinstance(p, cst.Slice) and p.lower is None and p.upper is None]
        nones = [p for p in pattern if isinstance(p, cst.Index) and isinstance(p.value, cst.Name) and p.value.value == "None"]
        if len(full) != 1 or len(full) + len(nones) != len(pattern):
            return None
        return Axis(full[0], len(pattern), lo, hi, step, base)

    def mgrid(self, node) -> list[Axis] | None:
        if not (isinstance(node, cst.Subscript) and self.names.qual(node.value) == f"{NL}.mgrid"):
            return None
        bounds = [_slice_bounds(e.slice) for e in node.slice]
        if any(b is None for b in bounds):
            return None
        return [Axis(i, len(bounds), *b) for i, b in enumerate(bounds)]

    def define(self, stmt: cst.SimpleStatementLine, assigned_once: set[str]) -> None:
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign) or len(stmt.body[0].targets) != 1:
            return
        target, value = stmt.body[0].targets[0].target, stmt.body[0].value
        axes = self.mgrid(value)
        if axes is not None and isinstance(target, cst.Tuple) and len(target.elements) == len(axes) and \
                all(isinstance(e.value, cst.Name) and e.value.value in assigned_once for e in target.elements):
            for e, a in zip(target.elements, axes):
                self.vars[e.value.value] = a
            self.defs[squash(stmt)] = {e.value.value for e in target.elements}
        elif axes is not None and isinstance(target, cst.Name) and target.value in assigned_once:
            self.objects[target.value] = axes
            self.defs[squash(stmt)] = {target.value}
        elif isinstance(target, cst.Name) and target.value in assigned_once:
            ax = self.arange(value)
            if ax is not None:
                self.vars[target.value] = ax
                self.defs[squash(stmt)] = {target.value}

    def axis_of(self, node) -> Axis | None:
        if isinstance(node, cst.Name):
            return self.vars.get(node.value)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value in self.objects:
            axes = self.objects[node.value.value]
            i = "pxyz".find(node.attr.value)
            return axes[i] if 0 <= i < len(axes) else None
        return self.arange(node)

    def refers(self, node) -> bool:
        found = []
        grids = self

        class V(cst.CSTVisitor):
            def visit_Name(self, n):
                if n.value in grids.vars or n.value in grids.objects:
                    found.append(n)

            def visit_Call(self, n):
                if grids.names.qual(n.func) in (f"{NL}.arange", f"{NL}.mgrid"):
                    found.append(n)

            def visit_Subscript(self, n):
                if grids.names.qual(n.value) == f"{NL}.mgrid":
                    found.append(n)

        node.visit(V())
        return bool(found)


def _terms(node, sign=1):
    """An additive expression as (sign, term) pairs."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return _terms(node.left, sign) + _terms(node.right, sign if isinstance(node.operator, cst.Add) else -sign)
    return [(sign, node)]


class GridIndex(Pass):
    """Index grids become slices; masks become slice bounds (M0203, M0204)."""
    rules = ("M0203", "M0204")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.grids: list[Grids] = []
        self.clip: list[dict[str, tuple[str, bool]]] = []    # per statement: squashed index -> (bound, used)
        self.targets: dict = {}   # the statement's assignment target -> may it become an .ap() view

    def visit_FunctionDef(self, node):
        grids = Grids(self.ctx.names)
        counts: dict[str, int] = {}

        class Count(cst.CSTVisitor):
            def visit_AssignTarget(self, t):
                for n in _target_names(t.target):
                    counts[n] = counts.get(n, 0) + 1

            def visit_For(self, f):
                for n in _target_names(f.target):
                    counts[n] = counts.get(n, 2)

        node.body.visit(Count())
        once = {n for n, c in counts.items() if c == 1}

        class Defs(cst.CSTVisitor):
            def visit_SimpleStatementLine(self, s):
                grids.define(s, once)

            def visit_FunctionDef(self, f):
                return False

        node.body.visit(Defs())
        self.grids.append(grids)

    def leave_FunctionDef(self, original, updated):
        grids = self.grids.pop()
        if not grids.defs:
            return updated
        used = _used_names(updated.body, skip=set(grids.defs))
        dead = {d for d, bound in grids.defs.items() if not (bound & used)}
        return updated.with_changes(body=_drop_statements(updated.body, dead)) if dead else updated

    @property
    def g(self) -> Grids | None:
        return self.grids[-1] if self.grids else None

    def visit_SimpleStatementLine(self, node):
        self.clip.append({})
        s = node.body[0] if len(node.body) == 1 else None
        # assignment targets -> whether M0215 will turn the statement into an instruction
        isa = isinstance(getattr(s, "value", None), cst.Call) and (self.qual(s.value.func) or "").startswith(ISA + ".")
        if isinstance(s, cst.Assign) and len(s.targets) == 1:   # M0202 or M0215 makes it an instruction's dst
            self.targets = {s.targets[0].target: self.on("M0202") if isa else self.on("M0215")}
        elif isinstance(s, cst.AugAssign):
            matmul = isa and self.qual(s.value.func) == f"{ISA}.nc_matmul" and isinstance(s.operator, cst.AddAssign)
            self.targets = {s.target: self.on("M0202") if matmul else (not isa and self.on("M0215") and isinstance(
                s.operator, (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)))}
        else:
            self.targets = {}
        g = self.g
        if g is None or not (g.vars or g.objects) or squash(node) in g.defs:
            return
        for call in _calls_in(node):
            mask = _kw(call, "mask")
            if mask is None:
                continue
            terms = self._mask_terms(mask.value)
            if terms is None:
                self.flag("M0204", "mask= not a conjunction of `index < bound` terms: bound the slices by hand")
            else:
                for k, v in terms.items():
                    self.clip[-1][k] = (v, False)

    def _mask_terms(self, node) -> dict[str, str] | None:
        parts: list = []

        def split(n):
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.BitAnd):
                split(n.left)
                split(n.right)
            else:
                parts.append(n)

        split(node)
        out = {}
        for p in parts:
            if not isinstance(p, cst.Comparison) or len(p.comparisons) != 1:
                return None
            op, right = p.comparisons[0].operator, p.comparisons[0].comparator
            left = p.left
            if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
                left, right = right, left
                inclusive = isinstance(op, cst.GreaterThanEqual)
            elif isinstance(op, (cst.LessThan, cst.LessThanEqual)):
                inclusive = isinstance(op, cst.LessThanEqual)
            else:
                return None
            if not self.g.refers(left) or self.g.refers(right):
                return None
            bound = code(right)
            out[squash(left)] = _plus(bound, "1") if inclusive else bound
        return out

    def leave_Subscript(self, original, updated):
        g = self.g
        if g is None or not (g.vars or g.objects or _has_arange(updated, g)) or not self.on("M0203"):
            return updated
        if not any(g.refers(e.slice.value) for e in updated.slice if isinstance(e.slice, cst.Index)):
            return updated
        new = self._slices(updated)
        if new is None:
            ap = self._access_pattern(updated, original)
            if ap is not None:
                self.did("M0203")
                return ap
            self.flag("M0203", "index grid is not a plain slice (strided, permuted or broadcast): "
                               "write it with slices or .ap()")
            return updated
        self.did("M0203")
        return updated.with_changes(slice=new)

    def _access_pattern(self, sub: cst.Subscript, original) -> cst.BaseExpression | None:
        """`t[i_p, c*i_1 + i_2]` over a whole grid -> `t.ap(pattern=[[step, num], ...], offset=...)`:
        one [step, num] pair per grid axis, in axis order, each step the axis's coefficient times
        the stride of the dimension it indexes (t.shape[k+1] * ...); an assignment target only
        where M0215 turns the assignment into an instruction."""
        g = self.g
        target_ok = original not in self.targets or self.targets[original]
        if not target_ok or self.clip[-1] or not isinstance(sub.value, (cst.Name, cst.Attribute)):
            return None
        elems = list(sub.slice)
        if any(not isinstance(e.slice, cst.Index) or e.slice.star is not None or
               isinstance(e.slice.value, cst.Ellipsis) for e in elems):
            return None
        base = code(sub.value)
        axes: dict[int, tuple[Axis, str]] = {}     # grid axis -> (Axis, step code)
        offset: list[str] = []
        rank = None
        for j, e in enumerate(elems):
            stride = " * ".join(f"{base}.shape[{k}]" for k in range(j + 1, len(elems))) or "1"
            for sign, term in _terms(e.slice.value):
                coef, v = _scaled_axis(term, g)
                if v is None:
                    if g.refers(term):
                        return None
                    offset.append(("-" if sign < 0 else "") + _mul(_atom(code(term)), stride))
                    continue
                if sign < 0 or v.axis in axes or (rank is not None and v.rank != rank) or v.base:
                    return None
                rank = v.rank
                step = _mul(_mul(coef, v.step), stride)
                axes[v.axis] = (v, step)
                if v.lo != "0":
                    offset.append(_mul(_mul(coef, _atom(v.lo)), stride))
        if rank is None or sorted(axes) != list(range(rank)):
            return None
        pairs = ", ".join(f"[{step}, {_count(a)}]" for a, step in (axes[k] for k in range(rank)))
        off = " + ".join(offset) if offset else "0"
        return expr(f"{base}.ap(pattern=[{pairs}], offset={off})")

    def _slices(self, sub: cst.Subscript):
        g = self.g
        elems = list(sub.slice)
        found = []
        for pos, e in enumerate(elems):
            if isinstance(e.slice, cst.Index) and g.refers(e.slice.value):
                parsed = self._element(e.slice.value)
                if parsed is None:
                    return None
                found.append((pos, parsed))
        rank = {p[1][1].rank for p in found}
        if len(rank) != 1:
            return None
        r = rank.pop()
        start = found[0][0] - found[0][1][1].axis
        if start < 0 or start + r != len(elems):
            return None
        by_pos = dict(found)
        out = []
        for pos, e in enumerate(elems):
            if pos < start:
                out.append(e)
                continue
            if pos in by_pos:
                offset, ax = by_pos[pos]
                if ax.axis != pos - start:
                    return None
                lo, hi = _plus(offset, ax.base, ax.lo), _plus(offset, ax.base, ax.hi)
                key = squash(e.slice.value)
                if key in self.clip[-1]:
                    bound, _ = self.clip[-1][key]
                    self.clip[-1][key] = (bound, True)
                    hi = f"min({bound}, {hi})"
                text = f"{lo}:{hi}" + (f":{ax.step}" if ax.step != "1" else "")
            elif isinstance(e.slice, cst.Index) and e.slice.star is None and \
                    not (isinstance(e.slice.value, cst.Ellipsis)) and not (
                    isinstance(e.slice.value, cst.Name) and e.slice.value.value == "None"):
                v = code(e.slice.value)
                text = f"{v}:{_plus(v, '1')}"
            else:
                return None
            out.append(e.with_changes(slice=cst.parse_expression(f"x[{text}]").slice[0].slice))
        return out

    def _element(self, node) -> tuple[str, Axis] | None:
        """`E + i` -> (E, i's Axis); None unless exactly one grid term with coefficient +1."""
        g = self.g
        terms = _terms(node)
        grid = [(s, t) for s, t in terms if g.refers(t)]
        if len(grid) != 1 or grid[0][0] != 1:
            return None
        ax = g.axis_of(grid[0][1])
        if ax is None:
            return None
        rest = ""
        for s, t in terms:
            if t is grid[0][1]:
                continue
            piece = code(t) if s > 0 else _atom(code(t))
            rest = (f"{rest} + {piece}" if rest else piece) if s > 0 else (f"{rest} - {piece}" if rest else f"-{piece}")
        return rest, ax

    def leave_Call(self, original, updated):
        if not self.clip or _kw(updated, "mask") is None or self.g is None:
            return updated
        terms = self.clip[-1]
        if terms and all(used for _, used in terms.values()) and self.on("M0204"):
            self.did("M0204")
            return _without(updated, "mask")
        if terms:
            self.flag("M0204", "mask= bounds an index this statement does not use as a grid slice "
                               "(e.g. t[...]): bound the computed region by hand")
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        self.clip.pop()
        g = self.g
        if g is not None and (g.vars or g.objects) and squash(original) not in g.defs and g.refers(updated):
            if not any(r == "M0203" for r, _ in self._marks[-1]):
                self.flag("M0203", "index grid used outside a subscript: rewrite with slices or .ap()")
        return updated


def _is_ap(node) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "ap"


def _scaled_axis(term, g: Grids) -> tuple[str, Axis | None]:
    """`v`, `c * v`, `v * c` (c free of grids) -> (c, v's Axis)."""
    ax = g.axis_of(term)
    if ax is not None:
        return "1", ax
    if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
        for a, b in ((term.left, term.right), (term.right, term.left)):
            ax = g.axis_of(a)
            if ax is not None and not g.refers(b):
                return _atom(code(b)), ax
    return "1", None


def _mul(a: str, b: str) -> str:
    if a == "1":
        return b
    if b == "1":
        return a
    return f"{a} * {b}"


def _count(ax: Axis) -> str:
    n = ax.hi if ax.lo == "0" else f"{_atom(ax.hi)} - {_atom(ax.lo)}"
    return n if ax.step == "1" else f"({n} + {ax.step} - 1) // {ax.step}"


def _has_arange(node, g: Grids) -> bool:
    return g.refers(node)


def _calls_in(node) -> list[cst.Call]:
    out = []

    class V(cst.CSTVisitor):
        def visit_Call(self, n):
            out.append(n)

    node.visit(V())
    return out


def _target_names(t) -> list[str]:
    if isinstance(t, cst.Name):
        return [t.value]
    if isinstance(t, (cst.Tuple, cst.List)):
        return [n for e in t.elements for n in _target_names(e.value)]
    return []


def _used_names(node, skip: set[str] = frozenset()) -> set[str]:
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, s):
            return squash(s) not in skip

        def visit_Name(self, n):
            out.add(n.value)

    node.visit(V())
    return out


def _drop_statements(block, dead: set[str]):
    """The block without the statements in `dead` (squashed code); their comments
    and blank lines move to the next statement."""

    class Drop(cst.CSTTransformer):
        def leave_IndentedBlock(self, original, updated):
            body, carry = [], []
            for s in updated.body:
                if isinstance(s, cst.SimpleStatementLine) and squash(s) in dead:
                    carry += list(s.leading_lines)
                    if s.trailing_whitespace.comment is not None:
                        carry.append(cst.EmptyLine(comment=s.trailing_whitespace.comment))
                    continue
                if carry:
                    s = s.with_changes(leading_lines=[*carry, *s.leading_lines])
                    carry = []
                body.append(s)
            if not body:
                body = [cst.SimpleStatementLine([cst.Pass()], leading_lines=carry)]
            return updated.with_changes(body=body)

    return block.visit(Drop())


# --- ISA destinations (M0202) -----------------------------------------------------------

# nl calls that make no tile (indices, ranges, registers, sizes)
RANGES = {"program_id", "num_programs", "program_ndim", "ds", "arange", "mgrid", "par_dim", "affine_range",
          "sequential_range", "static_range", "dynamic_range", "register_alloc", "tile_size"}

# instruction -> the 0.6 parameter whose shape (and dtype) the result has
ELEMENTWISE = {"activation": "data", "tensor_tensor": "data1", "tensor_scalar": "data", "tensor_copy": "src",
               "reciprocal": "data", "exponential": "src", "scalar_tensor_tensor": "data",
               "tensor_tensor_scan": "data0", "dropout": "data", "activation_reduce": "data"}


def _operand(call: cst.Call, fn_name: str, param: str) -> cst.BaseExpression | None:
    a = _kw(call, param)
    if a is not None:
        return a.value
    fn = _isa_names.get(fn_name)
    if fn is None:
        return None
    params = [p for p in inspect.signature(fn).parameters if p != "dst"]
    if param not in params:
        return None
    pos = _positional(call)
    i = params.index(param)
    return pos[i].value if i < len(pos) else None


def _plain(node) -> bool:
    return isinstance(node, (cst.Name, cst.Attribute, cst.Subscript))


class IsaDst(Pass):
    """0.1 ISA calls that return their result -> destination first (M0202)."""
    rules = ("M0202", "M0215")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.top: list[cst.CSTNode | None] = []
        self.lists: set[str] = set()   # names bound to Python lists (of tiles) in the kernel
        self.tiles: set[str] = set()   # names bound to what an nl/nisa call made (`acc += t` updates a tile)

    def visit_FunctionDef(self, node):
        lists = self.lists

        class V(cst.CSTVisitor):
            def visit_Assign(self, a):
                if isinstance(a.value, (cst.List, cst.ListComp)):
                    for t in a.targets:
                        lists.update(_target_names(t.target))

        node.body.visit(V())
        tiles, names = self.tiles, self.ctx.names

        class T(cst.CSTVisitor):
            def visit_Assign(self, a):
                q = names.qual(a.value.func) if isinstance(a.value, cst.Call) else None
                if q and q.startswith(("nki.language.", "nki.isa.")) and q.split(".")[-1] not in RANGES:
                    for t in a.targets:
                        tiles.update(_target_names(t.target))

        node.body.visit(T())

    def visit_SimpleStatementLine(self, node):
        s = node.body[0] if len(node.body) == 1 else None
        self.top.append(s.value if isinstance(s, (cst.Assign, cst.AugAssign, cst.Expr)) else None)

    def leave_Call(self, original, updated):
        q = self.qual(updated.func)
        if not (q and q.startswith(ISA + ".")) or (self.top and original is self.top[-1]):
            return updated
        fn = _isa_names.get(q.split(".", 2)[2])
        if fn is not None and "dst" in inspect.signature(fn).parameters and _kw(updated, "dst") is None:
            self.flag("M0202", f"nisa.{q.split('.', 2)[2]} inside an expression returns no tile in 0.2+: "
                               "call it on its own line with a destination tile")
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        self.top.pop()
        if len(updated.body) != 1:
            return updated
        s = updated.body[0]
        if isinstance(s, (cst.Assign, cst.AugAssign)) and isinstance(s.value, cst.Call):
            q = self.qual(s.value.func)
        else:
            q = None
        if not (q and q.startswith(ISA + ".")):
            target = (s.targets[0].target if isinstance(s, cst.Assign) and len(s.targets) == 1 else
                      s.target if isinstance(s, cst.AugAssign) else None)
            if self.on("M0215") and self.in_kernel() and (self._is_tile_target(target) or (
                    isinstance(s, cst.AugAssign) and isinstance(target, cst.Name) and target.value in self.tiles)):
                return self._tile_write(updated, s)
            return updated
        if _kw(s.value, "dst") is not None:
            return updated
        name = q.split(".", 2)[2]
        fn = _isa_names.get(name)
        if fn is None or "dst" not in inspect.signature(fn).parameters:
            return updated
        call = s.value
        params = inspect.signature(fn).parameters
        if "dtype" not in params:
            dtype_arg = _kw(call, "dtype")
            call = _without(call, "dtype")
        else:
            dtype_arg = None
        if isinstance(s, cst.Assign) and len(s.targets) == 1 and (
                isinstance(s.targets[0].target, cst.Subscript) or _is_ap(s.targets[0].target)):
            self.did("M0202")
            return updated.with_changes(body=[cst.Expr(_add_args(call, front=[_arg(s.targets[0].target)]))])
        if isinstance(s, cst.AugAssign) and isinstance(s.operator, cst.AddAssign) and name == "nc_matmul":
            self.did("M0202")
            new = _add_args(_without(call, "accumulate"), front=[_arg(s.target)],
                            back=[_arg(cst.Name("True"), "accumulate")])
            return updated.with_changes(body=[cst.Expr(new)])
        if isinstance(s, cst.Assign) and len(s.targets) == 1 and isinstance(s.targets[0].target, cst.Name):
            decl = self._declaration(name, s.value, dtype_arg)
            if decl is None:
                self.flag("M0202", f"nisa.{name} returns no tile in 0.2+: declare the result "
                                   "(nl.ndarray(shape, dtype, buffer)) and pass it as dst")
                return updated
            target = s.targets[0].target
            self.did("M0202")
            first = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], expr(decl))],
                                            leading_lines=updated.leading_lines)
            second = updated.with_changes(body=[cst.Expr(_add_args(call, front=[_arg(target)]))], leading_lines=[])
            return cst.FlattenSentinel([first, second])
        self.flag("M0202", f"nisa.{name} returns no tile in 0.2+: pass the destination as its first argument")
        return updated

    def _tile_write(self, updated, s):
        """M0215: `t[...] = value` / `t[...] += value` writes a tile in 0.1; in 0.2+ an instruction does."""
        target = s.targets[0].target if isinstance(s, cst.Assign) else s.target
        nl, isa = self.local(NL), self.local(ISA)
        dst, value = code(target), s.value
        if isinstance(s, cst.Assign):
            q = self.qual(value.func) if isinstance(value, cst.Call) else None
            if q == f"{NL}.load" and len(value.args) == 1 and (value.args[0].keyword is None or
                    value.args[0].keyword.value == "src"):
                text = f"{isa}.dma_copy(dst={dst}, src={code(value.args[0].value)})"
            elif isinstance(value, (cst.Integer, cst.Float)) or (
                    isinstance(value, cst.UnaryOperation) and isinstance(value.expression, (cst.Integer, cst.Float))):
                text = f"{isa}.memset(dst={dst}, value={code(value)})"
            elif q == f"{NL}.copy" and len(value.args) == 1 and value.args[0].keyword is None:
                text = f"{isa}.tensor_copy(dst={dst}, src={code(value.args[0].value)})"
            else:
                text = f"{isa}.tensor_copy(dst={dst}, src={code(value)})"
        else:
            ops = {cst.AddAssign: "add", cst.SubtractAssign: "subtract", cst.MultiplyAssign: "multiply"}
            op = ops.get(type(s.operator))
            if op is None:
                self.flag("M0215", "an in-place tile update: write it as an instruction with dst=")
                return updated
            q = self.qual(value.func) if isinstance(value, cst.Call) else None
            pos = _positional(value) if q else []
            tx = _kw(value, "transpose_x") if q else None
            if q == f"{NL}.matmul" and op == "add" and len(pos) == 2 and tx is not None and \
                    isinstance(tx.value, cst.Name) and tx.value.value == "True" and len(value.args) == 3:
                text = f"{isa}.nc_matmul({dst}, {code(pos[0].value)}, {code(pos[1].value)}, accumulate=True)"
                self.did("M0215.numerics")  # PSUM accumulation rounds otherwise than add-after-matmul
            else:
                text = f"{isa}.tensor_tensor(dst={dst}, data1={dst}, data2={code(value)}, op={nl}.{op})"
        self.did("M0215")
        return updated.with_changes(body=[cst.Expr(expr(text))])

    def _is_tile_target(self, target) -> bool:
        """A subscript of a tile, not of a Python list of tiles (`tiles[i] = ...` stays Python)."""
        if _is_ap(target):
            return True   # an access pattern M0203 made of a 0.1 index grid
        if not isinstance(target, cst.Subscript):
            return False
        node, plain = target, True   # plain: every subscript in the chain one index, no slice
        while isinstance(node, cst.Subscript):
            plain = plain and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) and \
                not isinstance(node.slice[0].slice.value, cst.Ellipsis)
            node = node.value
        return not (plain and isinstance(node, cst.Name) and node.value in self.lists)

    def _declaration(self, name, call, dtype_arg) -> str | None:
        nl = self.local(NL)
        if name == "nc_matmul":
            st, mv = _operand(call, name, "stationary"), _operand(call, name, "moving")
            if not (st is not None and mv is not None and _plain(st) and _plain(mv)):
                return None
            return (f"{nl}.ndarray(({code(st)}.shape[1], {code(mv)}.shape[1]), dtype={nl}.float32, "
                    f"buffer={nl}.psum)")
        if name not in ELEMENTWISE:
            return None
        src = _operand(call, name, ELEMENTWISE[name])
        if src is None or not _plain(src):
            return None
        dtype = code(dtype_arg.value) if dtype_arg is not None else (
            code(_kw(call, "dtype").value) if _kw(call, "dtype") is not None else f"{code(src)}.dtype")
        return f"{nl}.ndarray({code(src)}.shape, dtype={dtype}, buffer={nl}.sbuf)"


# --- block dimensions (M0251, M0252) --------------------------------------------------

CREATION = {f"{NL}.{n}" for n in ("ndarray", "zeros", "ones", "full", "empty", "rand", "random")}


class BlockDims(Pass):
    """A leading par_dim goes; block dimensions become lists of tiles."""
    rules = ("M0251", "M0252")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.blocks: list[dict[str, int]] = []

    def visit_FunctionDef(self, node):
        self.blocks.append({})

    def leave_FunctionDef(self, original, updated):
        self.blocks.pop()
        return updated

    def _shape_arg(self, call: cst.Call) -> cst.Arg | None:
        a = _kw(call, "shape")
        if a is None:
            pos = _positional(call)
            a = pos[0] if pos else None
        return a if a is not None and isinstance(a.value, cst.Tuple) else None

    def _par_dim(self, e) -> bool:
        return isinstance(e, cst.Call) and self.qual(e.func) == f"{NL}.par_dim"

    def leave_Call(self, original, updated):
        if self.qual(updated.func) not in CREATION:
            return updated
        a = self._shape_arg(updated)
        if a is None:
            return updated
        elems = a.value.elements
        k = next((i for i, e in enumerate(elems) if self._par_dim(e.value)), None)
        if k != 0 or not self.on("M0251"):
            return updated
        self.did("M0251")
        inner = elems[0].value.args[0].value
        new = a.value.with_changes(elements=[elems[0].with_changes(value=inner), *elems[1:]])
        return updated.with_changes(args=[x.with_changes(value=new) if x is a else x for x in updated.args])

    def leave_SimpleStatementLine(self, original, updated):
        if not self.blocks or len(updated.body) != 1 or not isinstance(updated.body[0], cst.Assign):
            return updated
        s = updated.body[0]
        if not (len(s.targets) == 1 and isinstance(s.targets[0].target, cst.Name) and isinstance(s.value, cst.Call)):
            return updated
        call = s.value
        if self.qual(call.func) not in CREATION:
            return updated
        a = self._shape_arg(call)
        if a is None:
            return updated
        elems = a.value.elements
        k = next((i for i, e in enumerate(elems) if self._par_dim(e.value)), None)
        if not k:
            return updated
        if not self.on("M0252"):
            return updated
        blocks = [code(e.value) for e in elems[:k]]
        tile = a.value.with_changes(elements=[elems[k].with_changes(value=elems[k].value.args[0].value),
                                              *elems[k + 1:]])
        one = call.with_changes(args=[x.with_changes(value=tile) if x is a else x for x in call.args])
        text = code(one)
        for b in reversed(blocks):
            text = f"[{text} for _ in range({b})]"
        self.blocks[-1][s.targets[0].target.value] = k
        self.did("M0252")
        return updated.with_changes(body=[s.with_changes(value=expr(text))])

    def leave_Subscript(self, original, updated):
        if not self.blocks or not isinstance(updated.value, cst.Name) or updated.value.value not in self.blocks[-1]:
            return updated
        k = self.blocks[-1][updated.value.value]
        elems = list(updated.slice)
        head, rest = elems[:k], elems[k:]
        if len(head) < 1 or any(not isinstance(e.slice, cst.Index) for e in head):
            self.flag("M0252", "a block dimension sliced or used whole: index each block, or fold the blocks "
                               "into the free dimension")
            return updated
        node = updated.value
        for e in head:
            node = cst.Subscript(node, [e.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        if rest:
            rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            node = cst.Subscript(node, rest)
        return node

    def leave_Attribute(self, original, updated):
        if not self.blocks or not isinstance(updated.value, cst.Name) or updated.value.value not in self.blocks[-1]:
            return updated
        if updated.attr.value == "dtype":  # every block has the tensor's dtype
            return updated.with_changes(value=expr(updated.value.value + "[0]" * self.blocks[-1][updated.value.value]))
        self.flag("M0252", f"`.{updated.attr.value}` of a tensor with block dimensions, now a list of tiles: "
                           "use one block's, or the list's length")
        return updated


# --- 0.2 -> 0.3 calls (M0302, M0307, M0310-M0317, M0403, M0404, M0210, M0214, M0205, M0208) ----

# nki calls whose result is no tile (an index, a range, a register, a shape): not a dynamic access
NOT_TENSORS = {"program_id", "num_programs", "program_ndim", "ds", "arange", "mgrid", "par_dim", "affine_range",
               "sequential_range", "static_range", "dynamic_range", "register_alloc", "ndarray", "zeros", "ones",
               "full", "shared_constant", "tile_size"}
STRING_BUFFERS = {"sbuf", "psum", "hbm", "private_hbm", "shared_hbm"}
INT_ENUMS = {"dge_mode": dge_mode, "engine": engine, "oob_mode": oob_mode, "reduce_cmd": reduce_cmd,
             "nc_version": nc_version}


class Calls(Pass):
    """Argument-level rewrites of the 0.2 -> 0.3 and 0.3 -> 0.4 sections, and
    the 0.1 constructs that are flagged where they occur."""
    rules = ("M0216", "M0302", "M0307", "M0310", "M0311", "M0312", "M0313", "M0314", "M0316", "M0317", "M0403",
             "M0404", "M0210", "M0214", "M0205", "M0208", "M0206")

    def leave_Arg(self, original, updated):
        if updated.keyword is None:
            return updated
        kw = updated.keyword.value
        v = updated.value
        if kw == "buffer" and isinstance(v, cst.SimpleString) and v.evaluated_value in STRING_BUFFERS \
                and self.on("M0317"):
            self.did("M0317")
            return updated.with_changes(value=expr(f"{self.local(NL)}.{v.evaluated_value}"))
        if kw in INT_ENUMS and isinstance(v, cst.Integer) and self.on("M0316"):
            enum = INT_ENUMS[kw]
            member = next((m.name for m in enum if m.value == int(v.value)), None)
            if member is None:
                self.flag("M0316", f"{kw}={v.value} is no member of nisa.{kw}: name the member")
                return updated
            self.did("M0316")
            return updated.with_changes(value=expr(f"{self.local(ISA)}.{kw}.{member}"))
        return updated

    def leave_Attribute(self, original, updated):
        if self.qual(updated) in (f"{NL}.fp32.min", f"{NL}.fp32.max") and self.on("M0216"):
            self.did("M0216")
            return expr(("-" if updated.attr.value == "min" else "") + "3.4028234663852886e+38")
        if self.qual(updated) == f"{NL}.tile_size.total_available_sbuf_size" and self.on("M0404"):
            self.did("M0404")
            return updated.with_changes(attr=cst.Name("sbuf_fmax_bytes"))
        q = self.qual(updated)
        if q and q.startswith("nki.compiler."):
            self.flag("M0210", "direct allocation: give nl.ndarray(..., address=(partition, byte offset)) "
                               "per tile (the blocks as a list, M0252)")
        return updated

    def leave_Dict(self, original, updated):
        if self.in_kernel() and any(isinstance(e, cst.DictElement) and not isinstance(e.key, (cst.SimpleString,
                                    cst.ConcatenatedString, cst.FormattedString)) and isinstance(
                                    e.key, (cst.Integer, cst.Float, cst.Name, cst.Tuple)) for e in updated.elements):
            self.flag("M0208", "dictionaries in kernels take string keys only")
        return updated

    def visit_FunctionDef(self, node):
        runtime: set[str] = set()
        names = self.ctx.names

        class V(cst.CSTVisitor):
            def visit_Assign(self, a):
                q = names.qual(a.value.func) if isinstance(a.value, cst.Call) else None
                if q and q.startswith(("nki.language.", "nki.isa.")) and q.split(".")[-1] not in NOT_TENSORS:
                    for t in a.targets:
                        runtime.update(_target_names(t.target))

        node.body.visit(V())
        self.runtime = runtime

    def leave_Subscript(self, original, updated):
        if self.in_kernel() and any(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and
                                    e.slice.value.value in getattr(self, "runtime", ()) for e in updated.slice):
            self.flag("M0206", "a tensor's value as an index: a dynamic access, "
                               ".ap(pattern, scalar_offset=tile, indirect_dim=d) in 0.2+")
        if isinstance(updated.value, cst.Subscript) and self.in_kernel():
            inner_slices = any(isinstance(e.slice, cst.Slice) for e in updated.value.slice)
            outer_slices = any(isinstance(e.slice, cst.Slice) for e in updated.slice)
            if inner_slices and outer_slices:
                self.flag("M0205", "nested slicing: write one subscript with the combined bounds")
        return updated

    def leave_Call(self, original, updated):
        q = self.qual(updated.func) or ""
        name = q.split(".")[-1]
        if q in (f"{ISA}.tensor_copy_dynamic_src", f"{ISA}.tensor_copy_dynamic_dst"):
            self.flag("M0403" if "M0403" in self.ctx.enabled and "M0302" not in self.ctx.enabled else "M0302",
                      "removed in 0.4: nisa.tensor_copy with src/dst .ap(pattern, scalar_offset=...)")
        if q == f"{NL}.loop_reduce":
            self.flag("M0214", "nl.loop_reduce: accumulate into an SBUF tile inside the loop body")
        if q == f"{ISA}.dma_copy" and _kw(updated, "dst_rmw_op") is not None and self.on("M0307"):
            return self._rmw(updated)
        if q == f"{ISA}.dma_compute" and self.on("M0310") and len(_positional(updated)) == 4 and \
                len(updated.args) >= 4 and all(a.keyword is None for a in updated.args[:4]):
            self.did("M0310")
            a = list(updated.args)
            scales, op = a[2], a[3]
            tail = a[4:]
            new = [a[0], a[1], op.with_changes(comma=scales.comma), *tail]
            new[-1] = new[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return updated.with_changes(args=[*new, _arg(scales.value, "scales")])
        if q == f"{ISA}.sendrecv" and _kw(updated, "use_gpsimd_dma") is not None and self.on("M0311"):
            v = _kw(updated, "use_gpsimd_dma").value
            if isinstance(v, cst.Name) and v.value in ("True", "False"):
                self.did("M0311")
                member = "gpsimd_dma" if v.value == "True" else "dma"
                return _add_args(_without(updated, "use_gpsimd_dma"),
                                 back=[_arg(expr(f"{self.local(ISA)}.dma_engine.{member}"), "dma_engine")])
            self.flag("M0311", "use_gpsimd_dma= from a value: pass dma_engine=nisa.dma_engine.gpsimd_dma or .dma")
        if q == f"{ISA}.affine_select" and self.on("M0312") and len(_positional(updated)) == 6 and \
                all(a.keyword is None for a in updated.args[:6]):
            self.did("M0312")
            a = list(updated.args)
            offset = a[2]
            rest = [x for i, x in enumerate(a) if i != 2]
            rest[-1] = rest[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return updated.with_changes(args=[*rest, _arg(offset.value, "offset")])
        if name == "collective_permute_implicit_current_processing_rank_id" and q.startswith("nki.") and \
                _kw(updated, "num_channels") is not None and self.on("M0314"):
            self.did("M0314")
            return _without(updated, "num_channels")
        return updated

    def _rmw(self, call):
        op = _kw(call, "dst_rmw_op").value
        if isinstance(op, cst.Name) and op.value == "None":
            self.did("M0307")
            return _without(call, "dst_rmw_op")
        if self.qual(op) is None:
            self.flag("M0307", "dst_rmw_op chosen at run time: dma_copy when it is None, "
                               "dma_compute(dst, [src, dst], reduce_op=op) otherwise")
            return call
        dst, src = _kw(call, "dst"), _kw(call, "src")
        pos = _positional(call)
        dst_v = dst.value if dst is not None else (pos[0].value if pos else None)
        src_v = src.value if src is not None else (pos[1].value if len(pos) > 1 else None)
        if dst_v is None or src_v is None:
            self.flag("M0307", "dma_copy(dst_rmw_op=...) -> dma_compute(dst, [src, dst], reduce_op=...)")
            return call
        self.did("M0307")
        keep = [a for a in call.args if a.keyword is not None and a.keyword.value in ("unique_indices", "name", "oob_mode")]
        args = [_arg(dst_v, "dst"), _arg(expr(f"[{code(src_v)}, {code(dst_v)}]"), "srcs"), _arg(op, "reduce_op"),
                *[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in keep]]
        args = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in args[:-1]] + args[-1:]
        func = call.func.with_changes(attr=cst.Name("dma_compute")) if isinstance(call.func, cst.Attribute) \
            else cst.Name("dma_compute")
        return call.with_changes(func=func, args=args)

    def leave_SimpleStatementLine(self, original, updated):
        # M0313: register_move(dst, imm=V) -> a register holding V, then the move
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Expr) or \
                not isinstance(updated.body[0].value, cst.Call):
            return updated
        call = updated.body[0].value
        if self.qual(call.func) != f"{ISA}.register_move" or _kw(call, "imm") is None or not self.on("M0313"):
            return updated
        self.did("M0313")
        reg = self.ctx.fresh("_src")
        isa = self.local(ISA)
        alloc = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(reg))],
                                                    expr(f"{isa}.register_alloc({code(_kw(call, 'imm').value)})"))],
                                        leading_lines=updated.leading_lines)
        move = _add_args(_without(call, "imm"), back=[_arg(cst.Name(reg))])
        return cst.FlattenSentinel([alloc, updated.with_changes(body=[cst.Expr(move)], leading_lines=[])])


# --- kernel signatures and language restrictions (M0315, M0319, M0320, M0321) ---------

class Kernels(Pass):
    rules = ("M0315", "M0319", "M0320", "M0321")

    def visit_FunctionDef(self, node):
        if node.name.value in self.ctx.kernels:
            self._returned = _returned_names(node)

    def leave_Comparison(self, original, updated):
        if not self.in_kernel() or not self.on("M0320"):
            return updated
        new = []
        for c in updated.comparisons:
            if isinstance(c.operator, cst.Is):
                c = c.with_changes(operator=cst.Equal(whitespace_before=c.operator.whitespace_before,
                                                      whitespace_after=c.operator.whitespace_after))
                self.did("M0320")
            elif isinstance(c.operator, cst.IsNot):
                c = c.with_changes(operator=cst.NotEqual(whitespace_before=c.operator.whitespace_before,
                                                         whitespace_after=c.operator.whitespace_after))
                self.did("M0320")
            new.append(c)
        return updated.with_changes(comparisons=new)

    def leave_Assign(self, original, updated):
        fn = self.functions[-1] if self.functions else None
        if fn not in self.ctx.kernels or not self.on("M0315") or not isinstance(updated.value, cst.Call):
            return updated
        names = {n for t in updated.targets for n in _target_names(t.target)}
        buf = _kw(updated.value, "buffer")
        if names & self._returned and buf is not None and self.qual(buf.value) == f"{NL}.hbm" and \
                self.qual(updated.value.func) in CREATION:
            self.did("M0315")
            new = buf.with_changes(value=buf.value.with_changes(attr=cst.Name("shared_hbm"))
                                   if isinstance(buf.value, cst.Attribute) else expr(f"{self.local(NL)}.shared_hbm"))
            return updated.with_changes(value=updated.value.with_changes(
                args=[new if a is buf else a for a in updated.value.args]))
        return updated

    def leave_FunctionDef(self, original, updated):
        if updated.name.value not in self.ctx.kernels:
            return updated
        params = updated.params
        if self.on("M0321"):
            fixed = [p.with_changes(default=_tuple_of(p.default)) if isinstance(p.default, cst.List) else p
                     for p in params.params]
            fixed_kw = [p.with_changes(default=_tuple_of(p.default)) if isinstance(p.default, cst.List) else p
                        for p in params.kwonly_params]
            if fixed != list(params.params) or fixed_kw != list(params.kwonly_params):
                self.did("M0321")
            params = params.with_changes(params=fixed, kwonly_params=fixed_kw)
        if isinstance(params.star_arg, cst.ParamStar) and self.on("M0319"):
            merged = [*params.params, *params.kwonly_params]
            seen_default = False
            ok = True
            for p in merged:
                seen_default = seen_default or p.default is not None
                ok = ok and (p.default is not None or not seen_default)
            if ok:
                self.did("M0319")
                merged = [p.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                          for p in merged[:-1]] + [merged[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
                params = params.with_changes(params=merged, kwonly_params=[], star_arg=cst.MaybeSentinel.DEFAULT)
            else:
                self.flag("M0319", "keyword-only parameter without a default after defaulted ones: give it a "
                                   "default or move it before them, then drop the `*`")
        return updated.with_changes(params=params)

    def leave_Call(self, original, updated):
        if not self.on("M0321") or not isinstance(updated.func, cst.Name) or updated.func.value not in self.ctx.kernels:
            return updated
        if any(isinstance(a.value, cst.List) for a in updated.args):
            self.did("M0321")
            return updated.with_changes(args=[a.with_changes(value=_tuple_of(a.value)) if isinstance(a.value, cst.List)
                                              else a for a in updated.args])
        return updated


def _tuple_of(lst: cst.List) -> cst.Tuple:
    elems = list(lst.elements)
    if len(elems) == 1:
        elems[0] = elems[0].with_changes(comma=cst.Comma())
    return cst.Tuple(elems, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _returned_names(fn) -> set[str]:
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Return(self, r):
            if r.value is not None:
                out.update(_target_names(r.value))

        def visit_FunctionDef(self, f):
            return f is fn

    fn.visit(V())
    return out


# --- runtime loops (M0601, M0602) ----------------------------------------------------

def _escapes(body) -> bool:
    found = []

    class V(cst.CSTVisitor):
        def visit_Break(self, n):
            found.append(n)

        def visit_Continue(self, n):
            found.append(n)

        def visit_Return(self, n):
            found.append(n)

        def visit_Yield(self, n):
            found.append(n)

        def visit_FunctionDef(self, n):
            return False

        def visit_For(self, n):  # a break inside an inner loop leaves that loop only
            return True

    body.visit(V())
    return bool(found)


def _arithmetic_on(body, name: str) -> bool:
    found = []

    class V(cst.CSTVisitor):
        def visit_BinaryOperation(self, n):
            if any(isinstance(x, cst.Name) and x.value == name for x in (n.left, n.right)):
                found.append(n)

        def visit_UnaryOperation(self, n):
            if isinstance(n.expression, cst.Name) and n.expression.value == name:
                found.append(n)

    body.visit(V())
    return bool(found)


def _assigned(body) -> set[str]:
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, t):
            out.update(_target_names(t.target))

        def visit_AugAssign(self, a):
            out.update(_target_names(a.target))

        def visit_AnnAssign(self, a):
            out.update(_target_names(a.target))

        def visit_For(self, f):
            out.update(_target_names(f.target))

    body.visit(V())
    return out


class RuntimeLoops(Pass):
    rules = ("M0601", "M0602")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.fns: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node):
        self.fns.append(node)

    def leave_FunctionDef(self, original, updated):
        self.fns.pop()
        return updated

    def _carried(self, loop: cst.CSTNode, body) -> set[str]:
        """Names the body assigns that the function uses outside the loop."""
        outside: set[str] = set()

        class V(cst.CSTVisitor):
            def on_visit(self, node):
                if node is loop:
                    return False
                if isinstance(node, cst.Name):
                    outside.add(node.value)
                return True

        self.fns[-1].body.visit(V())
        return _assigned(body) & outside

    def leave_For(self, original, updated):
        if not (isinstance(updated.iter, cst.Call) and self.qual(updated.iter.func) == f"{NL}.dynamic_range"):
            return updated
        args = updated.iter.args
        why = None
        if not self.fns or not isinstance(updated.target, cst.Name):
            why = "loop variable is not a plain name"
        elif updated.orelse is not None:
            why = "for/else"
        elif any(a.keyword is not None or a.star for a in args) or not 1 <= len(args) <= 3:
            why = "keyword arguments to dynamic_range"
        elif _escapes(updated.body):
            why = "break/continue/return in the body"
        elif _arithmetic_on(updated.body, updated.target.value):
            why = f"Python arithmetic on {updated.target.value}, a register in 0.6: read it with .ap(scalar_offset=)"
        else:
            carried = self._carried(original, original.body)
            if carried:
                why = f"the body assigns {', '.join(sorted(carried))}, used outside the loop (keep state in SBUF)"
        if why:
            self.flag("M0601", f"nl.dynamic_range is deprecated: move the body into a function for "
                               f"nl.fori_loop ({why})")
            return updated
        vals = [code(a.value) for a in args]
        lo, hi, step = (["0", vals[0], None] if len(vals) == 1 else vals + [None] if len(vals) == 2 else vals)
        name = self.ctx.fresh("_loop_body_")
        nl = self.local(NL)
        fn = cst.FunctionDef(cst.Name(name), cst.Parameters([cst.Param(updated.target)]), updated.body,
                             leading_lines=updated.leading_lines)
        call = f"{nl}.fori_loop({lo}, {hi}, {name}" + (f", {step})" if step and step != "1" else ")")
        self.did("M0601")
        return cst.FlattenSentinel([fn, cst.SimpleStatementLine([cst.Expr(expr(call))])])

    def leave_While(self, original, updated):
        if not self.fns or self.functions[-1] not in self.ctx.kernel_scope:
            return updated
        test = updated.test
        regs = self._registers()
        if not (isinstance(test, cst.Name) and test.value in regs):
            return updated
        if updated.orelse is not None or _escapes(updated.body):
            self.flag("M0602", "bare `while reg:` is deprecated: nl.while_loop(reg, body) (the body may not "
                               "break, continue or return)")
            return updated
        name = self.ctx.fresh("_while_body_")
        body = updated.body
        ret = cst.SimpleStatementLine([cst.Return(cst.Name(test.value))])
        body = body.with_changes(body=[*body.body, ret])
        fn = cst.FunctionDef(cst.Name(name), cst.Parameters([cst.Param(cst.Name(test.value))]), body,
                             leading_lines=updated.leading_lines)
        self.did("M0602")
        return cst.FlattenSentinel([fn, cst.SimpleStatementLine(
            [cst.Expr(expr(f"{self.local(NL)}.while_loop({test.value}, {name})"))])])

    def _registers(self) -> set[str]:
        out: set[str] = set()
        names = self.ctx.names

        class V(cst.CSTVisitor):
            def visit_Assign(self, a):
                if isinstance(a.value, cst.Call) and names.qual(a.value.func) == f"{ISA}.register_alloc":
                    for t in a.targets:
                        out.update(_target_names(t.target))

        self.fns[-1].visit(V())
        return out


# --- rules whose only rewrite is a comment at 0.2 exactly (M0211) ------------------------

class LoadStoreAt02(Pass):
    rules = ("M0211",)

    def leave_Call(self, original, updated):
        if self.qual(updated.func) in (f"{NL}.load", f"{NL}.store"):
            self.flag("M0211", "nl.load/nl.store are absent in 0.2 (back in 0.3): nisa.dma_copy(dst, src)")
        return updated


# the passes in the order they run; a pass runs when one of its rules is in force
PASSES = (Namespace, EntryPoints, BlockDims, GridIndex, IsaDst, Calls, Kernels, RuntimeLoops)
