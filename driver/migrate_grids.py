"""`nkicc migrate`'s rewrite of 0.1 index grids and masks (rules M0203, M0204):
`nl.mgrid` / `nl.arange` indices become slices or `.ap()` access patterns, and a
mask that bounds them becomes the slices' stop."""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .migrate_cst import (ISA, NL, Names, Pass, _calls_in, _kw, _target_names, _terms, _used_names, _without, code,
                          expr, squash)

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


class GridIndex(Pass):
    """Index grids become slices; masks become slice bounds (M0203, M0204)."""
    rules = ("M0203", "M0204")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.grids: list[Grids] = []
        self.clip: list[dict[str, tuple[str, bool]]] = []    # per statement: squashed index -> (bound, used)
        self.targets: dict = {}   # the statement's assignment target -> may it become an .ap() view
        self.mask_left: list[dict[str, cst.BaseExpression]] = []   # per statement: squashed index -> its node
        self.tiles: list[set[str]] = []   # per function: names bound to tiles

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
        self.tiles.append(_tile_names(node.body, self.ctx.names))

    def leave_FunctionDef(self, original, updated):
        grids = self.grids.pop()
        self.tiles.pop()
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
        self.mask_left.append({})
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
                self.mask_left[-1] = dict(self._lefts)

    def _rows(self, stmt, terms, lefts):
        """`t[...] = nl.OP(a, b, mask=(E + i_p < B))`, OP element-wise and i_p a partition index
        from 0: the instruction computes rows p < B - E of whole tiles, so it becomes
        `t[0:K] = nl.OP(a[0:K], b[0:K])`, K = min(B - E, n) (a, b: the function's tiles)."""
        s = stmt.body[0] if len(stmt.body) == 1 else None
        if not (isinstance(s, cst.Assign) and len(s.targets) == 1 and _whole(s.targets[0].target)
                and isinstance(s.value, cst.Call) and len(terms) == 1):
            return None
        call = s.value
        if (self.qual(call.func) or "").split(".")[-1] not in ROW_WISE or not (self.qual(call.func) or "").startswith(NL):
            return None
        (key, (bound, used)), = terms.items()
        parsed = self._element(lefts[key])
        if used or parsed is None:
            return None
        offset, ax = parsed
        if ax.axis != 0 or ax.lo != "0" or ax.step != "1":
            return None
        start = _plus(offset, ax.base)
        rows = f"min({bound}, {ax.hi})" if start == "0" else f"min({bound} - ({start}), {ax.hi})"
        tiles = self.tiles[-1] if self.tiles else set()

        def cut(node):
            if _whole(node) or (isinstance(node, cst.Name) and node.value in tiles):
                base = node.value if isinstance(node, cst.Subscript) else node
                return expr(f"{code(base)}[0:{rows}]")
            return node

        args = [a.with_changes(value=cut(a.value)) for a in _without(call, "mask").args]
        if not any(a.value is not b.value for a, b in zip(args, _without(call, "mask").args)):
            return None
        new = s.with_changes(targets=[s.targets[0].with_changes(target=cut(s.targets[0].target))],
                             value=call.with_changes(args=args))
        return stmt.with_changes(body=[new])

    def _mask_terms(self, node) -> dict[str, str] | None:
        parts: list = []
        self._lefts = {}

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
            self._lefts[squash(left)] = left
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
        if self.g is not None and self.qual(updated.func) == f"{ISA}.affine_select" and _kw(updated, "pred"):
            return self._affine_select(updated)
        if not self.clip or _kw(updated, "mask") is None or self.g is None:
            return updated
        terms = self.clip[-1]
        if terms and all(used for _, used in terms.values()) and self.on("M0204"):
            self.did("M0204")
            return _without(updated, "mask")
        return updated   # the statement decides (leave_SimpleStatementLine): rows of whole tiles, or a comment

    def _affine_select(self, call: cst.Call) -> cst.Call:
        """0.1's `pred=(L >= R)` over index grids -> 0.6's affine form: cmp_op(offset + p *
        channel_multiplier + sum(i_k * step_k), 0) of L - R, each grid index k * step + lo + base
        contributing its coefficient times step to its axis and times lo + base to the offset."""
        pred = _kw(call, "pred").value
        cmp = _CMP.get(type(pred.comparisons[0].operator)) if isinstance(pred, cst.Comparison) and \
            len(pred.comparisons) == 1 else None
        g = self.g
        if cmp is None or not self.on("M0203"):
            self.flag("M0203", "affine_select pred= is not one comparison of index grids: write its pattern by hand")
            return call
        steps: dict[int, list[str]] = {}
        axes: dict[int, Axis] = {}
        offset: list[str] = []
        for sign, term in _terms(pred.left) + [(-s, t) for s, t in _terms(pred.comparisons[0].comparator)]:
            coef, ax = _scaled_axis(term, g)
            if ax is None:
                if g.refers(term):
                    self.flag("M0203", "affine_select pred= has a grid term that is not affine: write its "
                                       "pattern by hand")
                    return call
                offset.append(("-" if sign < 0 else "+") + _atom(code(term)))
                continue
            if axes and next(iter(axes.values())).rank != ax.rank:
                return call
            axes[ax.axis] = ax
            steps.setdefault(ax.axis, []).append(("-" if sign < 0 else "+") + _mul(coef, ax.step))
            start = _plus(ax.base, ax.lo)
            if start != "0":
                offset.append(("-" if sign < 0 else "+") + _mul(coef, _atom(start)))
        rank = next(iter(axes.values())).rank
        for k in range(1, rank):   # a free axis the predicate leaves out: step 0, its extent from the grid
            if k not in axes:
                same = [a for a in g.vars.values() if a.rank == rank and a.axis == k] + \
                       [a for axs in g.objects.values() for a in axs if a.rank == rank and a.axis == k]
                if not same:
                    self.flag("M0203", "affine_select pred= leaves a free axis whose extent the kernel does "
                                       "not give: write its pattern by hand")
                    return call
                axes[k] = same[0]
        signed = lambda parts: _signed(parts) if parts else "0"
        pattern = ", ".join(f"[{signed(steps.get(k, []))}, {_count(axes[k])}]" for k in range(1, rank))
        nl = self.local(NL)
        self.did("M0203")
        args = []
        for a in call.args:
            if a.keyword is not None and a.keyword.value == "pred":
                args += [_kwarg(f"pattern=[{pattern}]"), _kwarg(f"offset={signed(offset)}"),
                         _kwarg(f"channel_multiplier={signed(steps.get(0, []))}"),
                         _kwarg(f"cmp_op={nl}.{cmp}", comma=a.comma)]
            else:
                args.append(a)
        return call.with_changes(args=args)

    def leave_SimpleStatementLine(self, original, updated):
        terms, lefts = self.clip.pop(), self.mask_left.pop()
        if terms and not all(used for _, used in terms.values()) and self.on("M0204"):
            rows = self._rows(updated, terms, lefts)
            if rows is None:
                self.flag("M0204", "mask= bounds an index this statement does not use as a grid slice "
                                   "(e.g. t[...]): bound the computed region by hand")
            else:
                self.did("M0204")
                updated = rows
        g = self.g
        if g is not None and (g.vars or g.objects) and squash(original) not in g.defs and g.refers(updated):
            if not any(r == "M0203" for r, _ in self._marks[-1]):
                self.flag("M0203", "index grid used outside a subscript: rewrite with slices or .ap()")
        return updated


_CMP = {cst.GreaterThanEqual: "greater_equal", cst.GreaterThan: "greater", cst.LessThanEqual: "less_equal",
        cst.LessThan: "less", cst.Equal: "equal", cst.NotEqual: "not_equal"}


def _signed(parts: list[str]) -> str:
    """["+a", "-b * c"] -> "a - b * c"."""
    text = " ".join(f"{p[0]} {p[1:]}" for p in parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _kwarg(text: str, comma=cst.MaybeSentinel.DEFAULT) -> cst.Arg:
    arg = cst.parse_expression(f"f({text})").args[0]
    return arg.with_changes(comma=comma if comma is not cst.MaybeSentinel.DEFAULT else
                            cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))


# nl operations that compute each partition row from the same row of their operands
ROW_WISE = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "exp", "log", "sqrt", "rsqrt",
            "square", "abs", "negative", "reciprocal", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "sin", "cos",
            "copy", "sign", "floor", "ceil", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal"}


def _whole(node) -> bool:
    """`t[...]`."""
    return isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
        and isinstance(node.slice[0].slice.value, cst.Ellipsis)


def _tile_names(body, names: Names) -> set[str]:
    """Names the function binds to tiles: results of nl/nisa calls, and views of tiles
    (`t.broadcast_to(...)`, `t[...]`), in statement order."""
    tiles: set[str] = set()

    def makes_tile(v) -> bool:
        if isinstance(v, cst.Call):
            q = names.qual(v.func)
            if q is not None:
                return q.startswith(("nki.language.", "nki.isa.")) and q.split(".")[-1] not in (
                    "program_id", "num_programs", "ds", "arange", "mgrid", "affine_range", "sequential_range",
                    "static_range", "dynamic_range", "register_alloc")
            f = v.func
            return isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value in tiles
        return isinstance(v, cst.Subscript) and isinstance(v.value, cst.Name) and v.value.value in tiles

    class V(cst.CSTVisitor):
        def visit_Assign(self, a):
            if makes_tile(a.value):
                for t in a.targets:
                    tiles.update(_target_names(t.target))

        def visit_AnnAssign(self, a):
            if a.value is not None and makes_tile(a.value):
                tiles.update(_target_names(a.target))

    body.visit(V())
    return tiles


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


