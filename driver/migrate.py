"""`nkicc migrate`: rewrite a kernel file written for an older NKI version
into a newer one, applying every rule of every guide section in between
(migrate_rules.py lists them, migrate_cst.py rewrites), and `--check` that the
rewrite kept the kernel's meaning by simulating both on the same random inputs.
"""
from __future__ import annotations

import ast
import difflib
import os
import sys
import tempfile
from dataclasses import dataclass, field

import libcst as cst
import numpy as np

from .api import _compile
from .ir import Loc, NkiccError
from .ir.numerics import random_values
from .loader import resolve_kernel
from .migrate_calls import Calls, EntryPoints, Kernels, LoadStoreAt02, Namespace, RuntimeLoops
from .migrate_cst import MARK, Context, Names, scan_kernels
from .migrate_grids import GridIndex
from .migrate_tiles import BlockDims, IsaDst
from .migrate_rules import BY_ID, VERSIONS, rules_between

LATEST = VERSIONS[-1]
# the passes in the order they run; a pass runs when one of its rules is in force
PASSES = (Namespace, EntryPoints, BlockDims, GridIndex, IsaDst, Calls, Kernels, RuntimeLoops)
# a file that imports plain `nki` is written for 0.2 or later; without --from the
# earliest is assumed: every rule of a later version only rewrites what that version removed
NKI_DEFAULT = "0.2"
# --check's tolerance where a numerics change applies: this many units in the last place
# of the output's largest magnitude
ROUNDING_ULPS = 16


@dataclass(frozen=True)
class Note:
    """A `# nkicc-migrate:` comment in the result: the author's to finish."""
    line: int
    rule: str
    text: str

    def warning(self, path: str) -> str:
        return f"{path}:{self.line}: warning[{self.rule}] {BY_ID[self.rule].heading}: {self.text}"


@dataclass
class Migration:
    path: str
    before: str
    after: str
    start: str
    stop: str
    assumed: str = ""                      # why `start` was assumed, when --from was not given
    applied: set[str] = field(default_factory=set)
    notes: list[Note] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)   # what a rewrite asks of the user, not of the code

    @property
    def rules_applied(self) -> list[str]:
        return sorted({a.split(".")[0] for a in self.applied})

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        name = os.path.basename(self.path)
        return "".join(difflib.unified_diff(self.before.splitlines(True), self.after.splitlines(True),
                                            f"a/{name}", f"b/{name}"))

    @property
    def numerics(self) -> bool:
        """A documented numerics change lies between the versions (a behaviour rule in range), or a
        rewrite that rounds differently was made: --check allows the dtype's rounding."""
        return any(r.numerics and (r.how == "none" or f"{r.id}.numerics" in self.applied)
                   for r in rules_between(self.start, self.stop))


def _version(v: str | None, flag: str) -> str | None:
    if v is None:
        return None
    v = v.strip()
    v = v[:-2] if v.count(".") == 2 and v.endswith(".0") else v
    if v not in VERSIONS:
        raise NkiccError("E201", f"unknown NKI version {flag} {v}", None, f"use one of {', '.join(VERSIONS)}")
    return v


def detect_version(names: Names) -> tuple[str | None, str]:
    """The version the imports say, and why; None when the file imports no NKI."""
    targets = set(names.alias.values())
    if any(t == "neuronxcc" or t.startswith("neuronxcc.nki") for t in targets):
        return "0.1", "from its neuronxcc.nki imports"
    if any(t == "nki" or t.startswith("nki.") for t in targets):
        return NKI_DEFAULT, f"assumed for its nki imports, the earliest nki.* version; give --from"
    return None, ""


def migrate_source(source: str, path: str = "<string>", start: str | None = None,
                   stop: str = LATEST) -> Migration:
    """The rewrite of one file's text."""
    start, stop = _version(start, "--from"), _version(stop, "--to")
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise NkiccError("E001", f"cannot parse {os.path.basename(path)}: {exc.message}",
                         Loc(path, exc.raw_line), "fix the syntax error first") from None
    names = Names(module)
    detected, why = detect_version(names)
    if detected is None:
        raise NkiccError("E200", f"{path} imports no NKI module (nki, neuronxcc.nki)", None,
                         "give a kernel file written for NKI")
    assumed, infos = "", []
    if start is None:
        start, assumed = detected, why
    elif detected == "0.1" and start != "0.1":
        infos.append(f"{path}: note: it imports neuronxcc.nki (NKI 0.1), yet --from {start}: the rules of the "
                     f"sections before {start} are not applied")
    if VERSIONS.index(start) > VERSIONS.index(stop):
        raise NkiccError("E201", f"--from {start} is newer than --to {stop}", None, "migrations go forward only")
    ctx = Context(names, {r.id for r in rules_between(start, stop)})
    scan_kernels(module, ctx)
    if not ctx.kernels:
        raise NkiccError("E200", f"{path} has no kernel (no function decorated with nki.jit)", None,
                         "migrate a file that defines an @nki.jit kernel")
    passes = list(PASSES) + ([LoadStoreAt02] if stop == "0.2" else [])
    for p in passes:
        if any(r in ctx.enabled for r in p.rules):
            module = module.visit(p(ctx))
    after = module.code
    try:
        ast.parse(after)
    except SyntaxError as exc:  # a rewrite made invalid Python: nkicc's bug, never the user's
        raise RuntimeError(f"nkicc migrate produced invalid Python at line {exc.lineno} of {path}") from exc
    return Migration(path, source, after, start, stop, assumed, set(ctx.applied), notes_of(after),
                     infos + [f"{path}: note[{r}] {BY_ID[r].heading}: {t}" for r, t in ctx.infos])


def notes_of(text: str) -> list[Note]:
    """The `# nkicc-migrate:` comments of a file, with the line of the statement each stands above."""
    out, pending = [], []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith(MARK):
            rule, _, note = s[len(MARK):].strip().partition(" ")
            pending.append((rule, note))
        elif s and pending:
            out += [Note(i, r, n) for r, n in pending if r in BY_ID]
            pending = []
    return out


def nki_names(text: str, kernel_code: bool = False) -> set[str]:
    """Every NKI name the file uses, canonical and whole (`nl.tile_size.pmax` ->
    nki.language.tile_size.pmax), for the census against the API reference;
    `kernel_code`: only in its kernels and the functions they call (with their
    decorators), not in the script around them."""
    module = cst.parse_module(text)
    names = Names(module)
    out: set[str] = set()
    scope: set[str] | None = None
    if kernel_code:
        ctx = Context(names, set())
        scan_kernels(module, ctx)
        scope = ctx.kernel_scope

    class Uses(cst.CSTVisitor):
        def visit_Module(self, node):
            if scope is not None:
                for stmt in node.body:
                    if isinstance(stmt, cst.FunctionDef) and stmt.name.value in scope:
                        stmt.visit(self)
                return False
            return True

        def visit_Import(self, node):
            return False

        def visit_ImportFrom(self, node):
            return False

        def visit_Attribute(self, node):
            q = names.qual(node)
            if q is not None:
                out.add(q)
                return False
            return True

        def visit_Name(self, node):
            q = names.qual(node)
            if q is not None and q.count(".") > 1:  # `from nki.language import par_dim`
                out.add(q)

    module.visit(Uses())
    return out


def migrate_file(path: str, start: str | None = None, stop: str = LATEST) -> Migration:
    if not os.path.isfile(path):
        raise NkiccError("E200", f"no such kernel file: {path}", None, "give the path to a .py file")
    with open(path, encoding="utf-8") as f:
        source = f.read()
    return migrate_source(source, path, start, stop)


def write_atomically(path: str, text: str) -> None:
    """Replace the file in one step: a crash leaves the old file or the new, never half of one."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nkicc-migrate-", suffix=".py", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --- --check -------------------------------------------------------------------------------

@dataclass
class CheckResult:
    kernel: str
    outputs: int
    max_abs_diff: float
    tolerance: str      # "exact" or "DTYPE rounding"

    def line(self) -> str:
        return (f"check: {self.kernel}: the migrated kernel's {self.outputs} output(s) equal the original's, "
                f"{self.tolerance} (max |diff| {self.max_abs_diff:.3g})")


def _outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (() if result is None else (result,))


def _rounding(dtype) -> float:
    import ml_dtypes  # the fp8/bf16 machine epsilons; ml_dtypes is a core dependency
    try:
        return float(ml_dtypes.finfo(dtype).eps)
    except (ValueError, TypeError):
        return 0.0


def _kernel_name(fn) -> str:
    return fn.__name__


def _simulate(which: str, fn, specs, constants, passes, grid, inputs, shown: tuple[str, str] = ("", ""),
              dialect: str | None = None) -> tuple:
    """One side of --check, traced in `dialect`; its error says which side failed (and a
    line of the migrated text as `FILE (migrated):LINE`, its scratch copy being gone by then)."""
    try:
        compiled = _compile(fn, specs, constants, None, passes=passes, cache=False, grid=grid, printer=lambda *_: None,
                            dialect=dialect)
        return _outputs(compiled.run(**inputs))
    except NkiccError as err:
        loc = err.loc
        if loc is not None and shown[0] and loc.file == shown[0]:
            loc = Loc(shown[1], loc.line)
        raise NkiccError(err.code, f"--check: the kernel {which} does not run: {err.message}", loc,
                         err.hint) from None


def check(migration: Migration, kernel: str | None = None, args: list[str] = (), consts: list[str] = (),
          seed: int = 0, target: str | None = None, grid: tuple[int, ...] | None = None) -> CheckResult:
    """Compile and simulate the file's kernel as written and as migrated, on the
    same random inputs; raise E215 unless the outputs agree (exactly, or within
    the output dtype's rounding where a documented numerics change lies between)."""
    spec = f"{migration.path}::{kernel}" if kernel else migration.path
    before_fn, specs, constants = resolve_kernel(spec, list(args), list(consts))
    name = _kernel_name(before_fn)
    stem = os.path.splitext(os.path.basename(migration.path))[0]
    folder = os.path.dirname(os.path.abspath(migration.path))
    with tempfile.TemporaryDirectory(prefix="nkicc-migrate-") as tmp:
        after_path = os.path.join(tmp, f"{stem}__migrated_{migration.stop.replace('.', '_')}.py")
        with open(after_path, "w", encoding="utf-8") as f:
            f.write(migration.after)
        if folder not in sys.path:  # the kernel's own imports of its neighbours
            sys.path.insert(0, folder)
        after_fn, after_specs, after_consts = resolve_kernel(f"{after_path}::{name}", list(args), list(consts))
        passes = {"target": target} if target else None
        rng = np.random.default_rng(seed)
        inputs = {k: random_values(rng, s.dtype, s.shape) for k, s in specs.items()}
        # as written: in the version it was written for (an `import nki` kernel of 0.2 is 0.2's, not 0.6's)
        before = _simulate("as written", before_fn, specs, constants, passes, grid, inputs, dialect=migration.start)
        after = _simulate(f"as migrated to {migration.stop}", after_fn, after_specs, after_consts, passes, grid,
                          inputs, (after_path, f"{migration.path} (migrated)"))
    loc = Loc(migration.path, 0)
    if len(before) != len(after):
        raise NkiccError("E215", f"the migrated {name} returns {len(after)} output(s), the original {len(before)}",
                         loc, "see the diff (nkicc migrate FILE --diff)")
    worst, tolerance = 0.0, "exactly"
    for i, (b, a) in enumerate(zip(before, after)):
        b, a = np.asarray(b), np.asarray(a)
        if b.shape != a.shape or b.dtype != a.dtype:
            raise NkiccError("E215", f"output {i} of the migrated {name} is {a.dtype}{list(a.shape)}, the "
                                     f"original's {b.dtype}{list(b.shape)}", loc, "see the diff")
        b64, a64 = b.astype(np.float64), a.astype(np.float64)
        same = np.isnan(b64) == np.isnan(a64)
        diff = np.where(np.isnan(b64) | np.isnan(a64), 0.0, np.abs(b64 - a64))
        allowed = 0.0
        if migration.numerics and b.dtype.kind in "fV":  # floats, and ml_dtypes' bf16/fp8
            # normwise: a sum rounded in another order differs by a few units in the last
            # place of its largest terms, not of each (possibly cancelled) element
            scale = float(np.nanmax(np.abs(b64))) if b64.size and not np.isnan(b64).all() else 0.0
            allowed = ROUNDING_ULPS * _rounding(b.dtype) * scale
        bad = ~same | (diff > allowed)
        worst = max(worst, float(diff.max()) if diff.size else 0.0)
        if allowed and worst > 0:
            tolerance = f"within {b.dtype} rounding (a documented numerics change)"
        if bad.any():
            where = tuple(int(x) for x in np.argwhere(bad)[0])
            raise NkiccError("E215", f"output {i} of the migrated {name} differs from the original at {list(where)}:"
                                     f" {a64[where]!r} vs {b64[where]!r} ({int(bad.sum())} element(s))", loc,
                             "a rule changed the meaning: see the diff and the # nkicc-migrate comments")
    return CheckResult(name, len(before), worst, tolerance)
