"""`nkicc migrate`'s rewrites of names, arguments and signatures: the namespace and
0.1 entry points, the argument changes of 0.2 -> 0.4, kernel signatures and
comparisons, and 0.5's runtime loops (nl.fori_loop, nl.while_loop)."""
from __future__ import annotations

import libcst as cst

from .isa import dge_mode, engine, nc_version, oob_mode, reduce_cmd
from .migrate_cst import (CREATION, ISA, NL, Pass, _add_args, _arg, _called_names, _canonical, _decorator_qual, _kw,
                          _module_name, _positional, _target_names, _without, code, dotted, expr)

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


# --- 0.2 -> 0.3 calls (M0302, M0307, M0310-M0317, M0403, M0404, M0210, M0214, M0205, M0208) ----

REDUCTIONS = {f"{NL}.{n}" for n in ("sum", "max", "min", "mean", "prod", "var")}
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
    rules = ("M0216", "M0217", "M0302", "M0307", "M0310", "M0311", "M0323", "M0312", "M0313", "M0314", "M0316", "M0317", "M0403",
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

    def _keep_partition(self, call: cst.Call) -> cst.Call:
        """M0217: 0.1 keeps a reduction over every free axis (P, 1), so it broadcasts by partition."""
        pos = _positional(call)
        data = _kw(call, "x") or (pos[0] if pos else None)
        axis = _kw(call, "axis") or (pos[1] if len(pos) > 1 else None)
        if data is None or axis is None:
            return call
        v = axis.value
        items = [e.value for e in v.elements] if isinstance(v, (cst.List, cst.Tuple)) else [v]
        if not all(isinstance(i, cst.Integer) for i in items) or not isinstance(data.value, (cst.Name, cst.Attribute,
                                                                                                 cst.Subscript)):
            self.flag("M0217", "a 0.1 reduction over every free axis is (P, 1): add keepdims=True where it is")
            return call
        if any(int(i.value) == 0 for i in items):
            return call   # over the partitions: no partition to keep
        self.did("M0217")
        keep = expr(f"{code(data.value)}.ndim == {len(items) + 1}")
        return _add_args(call, back=[_arg(keep, "keepdims")])

    def leave_Call(self, original, updated):
        q = self.qual(updated.func) or ""
        name = q.split(".")[-1]
        if q in REDUCTIONS and _kw(updated, "keepdims") is None and self.on("M0217"):
            updated = self._keep_partition(updated)
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
        if q == f"{ISA}.range_select" and self.on("M0323") and (
                _kw(updated, "on_false_value") is not None or _kw(updated, "reduce_cmd") is not None):
            # 0.2 filled with FP32_MIN and reset the accumulator whatever these said: 0.3's defaults
            self.did("M0323")
            return _without(updated, "on_false_value", "reduce_cmd")
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


