"""What the rewrites of `nkicc migrate` share, on libcst's concrete syntax tree
(comments, blank lines and formatting of everything not rewritten stay as
written): the file's NKI names, its kernels, and `Pass`, the transformer base.

Each pass (migrate_calls.py, migrate_grids.py, migrate_tiles.py) rewrites for one
or a few rules of migrate_rules.py. What a pass cannot rewrite it leaves in place
with a `# nkicc-migrate: RULE note` comment line above the statement. Names are
resolved through the file's own imports (`import neuronxcc.nki.language as nl`
makes `nl.mgrid` the name `nki.language.mgrid`), so aliases of any spelling work.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

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


def _terms(node, sign=1):
    """An additive expression as (sign, term) pairs."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return _terms(node.left, sign) + _terms(node.right, sign if isinstance(node.operator, cst.Add) else -sign)
    return [(sign, node)]


def _is_ap(node) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "ap"


CREATION = {f"{NL}.{n}" for n in ("ndarray", "zeros", "ones", "full", "empty", "rand", "random")}
