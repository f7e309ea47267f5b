"""`nkicc migrate`'s rewrites of how 0.1 writes tiles (rules M0202, M0215, M0251,
M0252): ISA calls that return a tile get a destination, assignments into tiles
become instructions, and block dimensions become lists of tiles."""
from __future__ import annotations

import inspect

import libcst as cst

from . import isa as _isa
from .migrate_cst import (CREATION, ISA, NL, Pass, _add_args, _arg, _is_ap, _kw, _positional, _target_names, _without,
                          code, expr)

_isa_names = vars(_isa)

# --- ISA destinations (M0202) -----------------------------------------------------------

# nl calls that make no tile (indices, ranges, registers, sizes)
RANGES = {"program_id", "num_programs", "program_ndim", "ds", "arange", "mgrid", "par_dim", "affine_range",
          "sequential_range", "static_range", "dynamic_range", "register_alloc", "tile_size"}

# instruction -> the 0.6 parameter whose shape (and dtype) the result has
ELEMENTWISE = {"activation": "data", "tensor_tensor": "data1", "tensor_scalar": "data", "tensor_copy": "src",
               "reciprocal": "data", "exponential": "src", "scalar_tensor_tensor": "data",
               "tensor_tensor_scan": "data0", "dropout": "data", "activation_reduce": "data",
               "affine_select": "on_true_tile"}


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
        self.hoisted: list[list[cst.SimpleStatementLine]] = []   # per statement: lines for its nested ISA calls
        self.taken: set[str] = set()   # names the module's functions use (a hoisted result's name is new)

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
        taken = self.taken

        class N(cst.CSTVisitor):
            def visit_Name(self, n):
                taken.add(n.value)

        node.visit(N())

    def visit_SimpleStatementLine(self, node):
        s = node.body[0] if len(node.body) == 1 else None
        self.top.append(s.value if isinstance(s, (cst.Assign, cst.AugAssign, cst.Expr)) else None)
        self.hoisted.append([])

    def leave_Call(self, original, updated):
        q = self.qual(updated.func)
        if not (q and q.startswith(ISA + ".")) or (self.top and original is self.top[-1]):
            return updated
        name = q.split(".", 2)[2]
        fn = _isa_names.get(name)
        if fn is None or "dst" not in inspect.signature(fn).parameters or _kw(updated, "dst") is not None:
            return updated
        call, dtype_arg = updated, None
        if "dtype" not in inspect.signature(fn).parameters:
            dtype_arg, call = _kw(call, "dtype"), _without(call, "dtype")
        decl = self._declaration(name, call, dtype_arg) if self.hoisted else None
        if decl is None:
            self.flag("M0202", f"nisa.{name} inside an expression returns no tile in 0.2+: "
                               "call it on its own line with a destination tile")
            return updated
        # its result gets a tile and a line of its own, before the statement that uses it
        temp = self._temp(f"{name}_res")
        self.did("M0202")
        self.hoisted[-1] += [cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(temp))], expr(decl))]),
                             cst.SimpleStatementLine([cst.Expr(_add_args(call, front=[_arg(cst.Name(temp))]))])]
        return cst.Name(temp)

    def _temp(self, base: str) -> str:
        """A name the module does not use yet."""
        name, k = base, 2
        while name in self.taken:
            name, k = f"{base}{k}", k + 1
        self.taken.add(name)
        return name

    def leave_SimpleStatementLine(self, original, updated):
        hoisted = self.hoisted.pop()
        out = self._line(original, updated)
        if not hoisted:
            return out
        lines = list(out.nodes) if isinstance(out, cst.FlattenSentinel) else [out]
        hoisted[0] = hoisted[0].with_changes(leading_lines=lines[0].leading_lines)
        lines[0] = lines[0].with_changes(leading_lines=[])
        return cst.FlattenSentinel([*hoisted, *lines])

    def _line(self, original, updated):
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
            target = s.targets[0].target
            decl = self._declaration(name, call, dtype_arg) if name == "nc_transpose" else None
            if decl is not None and "buffer=" + self.local(NL) + ".psum" in decl:
                # 0.1's Tensor Engine transpose lands in PSUM and the assignment copies it into the tile
                temp = self._temp(f"{name}_res")
                line = lambda node: cst.SimpleStatementLine([node])
                copy = expr(f"{self.local(ISA)}.tensor_copy(dst={code(target)}, src={temp})")
                return cst.FlattenSentinel([
                    line(cst.Assign([cst.AssignTarget(cst.Name(temp))], expr(decl))).with_changes(
                        leading_lines=updated.leading_lines),
                    line(cst.Expr(_add_args(call, front=[_arg(cst.Name(temp))]))),
                    updated.with_changes(body=[cst.Expr(copy)], leading_lines=[])])
            return updated.with_changes(body=[cst.Expr(_add_args(call, front=[_arg(target)]))])
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
        if name == "tensor_reduce":   # along the free axis of a 2-D tile: 0.1's (P,) result is a (P, 1) tile
            src, axis = _operand(call, name, "data"), _operand(call, name, "axis")
            if src is None or not _plain(src) or axis is None or \
                    code(axis).replace(" ", "") not in ("1", "-1", "(1,)", "(-1,)", "[1]", "[-1]"):
                return None
            return f"{nl}.ndarray(({code(src)}.shape[0], 1), dtype={self._dtype(call, dtype_arg, src)}, buffer={nl}.sbuf)"
        if name == "nc_transpose":    # the Tensor Engine's into PSUM, the Vector Engine's into SBUF
            src, engine = _operand(call, name, "data"), _kw(call, "engine")
            if src is None or not _plain(src):
                return None
            buffer = "sbuf" if engine is not None and code(engine.value).endswith("vector_engine") else "psum"
            return (f"{nl}.ndarray(({code(src)}.shape[1], {code(src)}.shape[0]), "
                    f"dtype={self._dtype(call, dtype_arg, src)}, buffer={nl}.{buffer})")
        if name not in ELEMENTWISE:
            return None
        src = _operand(call, name, ELEMENTWISE[name])
        if src is None or not _plain(src):
            return None
        return f"{nl}.ndarray({code(src)}.shape, dtype={self._dtype(call, dtype_arg, src)}, buffer={nl}.sbuf)"

    @staticmethod
    def _dtype(call, dtype_arg, src) -> str:
        """The result's dtype: the call's dtype= (moved off a 0.6 call that has none), else the operand's."""
        if dtype_arg is not None:
            return code(dtype_arg.value)
        return code(_kw(call, "dtype").value) if _kw(call, "dtype") is not None else f"{code(src)}.dtype"


# --- block dimensions (M0251, M0252) --------------------------------------------------



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


