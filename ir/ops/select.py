"""Selection: element-wise choice between two sources by a predicate, given
as a tile or computed from positions (affine_select, range_select)."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Const, Op
from . import accumulator, alu, enums
from .checks import affine_pattern, free, not_both_psum, on_chip_tensors, per_partition, same_layout, scalar
from .core import DVE_ACC, CostContext, Emit, TensorOperand, free_size, instruction
from .values import F32, affine_values, operand, tile


def _select(op: Op, read):
    pred, a, b = (operand(x, read) for x in op.ins)
    return [(0, np.where(pred != 0, a, b))]


@instruction(family="select", compute=_select)
def select(dst, predicate, on_true, on_false, name=None, **_hw_hints):
    """dst = on_true where predicate != 0 else on_false (element-wise; each a
    tile shaped like dst or a number). nkicc's own; NKI spells it nl.where."""
    (dst,) = on_chip_tensors({"dst": dst}, "select")
    ins = []
    for x, what in ((predicate, "predicate"), (on_true, "on_true"), (on_false, "on_false")):
        if not isinstance(x, TensorOperand):
            ins.append(Const(scalar(x, f"select {what}")))
            continue
        (x,) = on_chip_tensors({what: x}, "select")
        same_layout(dst, x, "select")
        ins.append(x)
    return Emit([dst], ins)


_PREDICATE_DTYPES = ("uint8", "uint16", "uint32", "int8", "int16", "int32", "bool_", "bool")


def _predicate(t, what: str, allowed=_PREDICATE_DTYPES):
    if t.decl.dtype not in allowed:
        raise NkiccError("E132", f"{what} predicate is {t.decl.dtype}; it must be one of {', '.join(allowed)}",
                         None, "compute the predicate into an integer tile")


def _copy_predicated(op: Op, read):
    pred = tile(op.ins[1], read) != 0
    if op.attr("reverse_pred"):
        pred = ~pred
    src = operand(op.ins[0], read)
    current = tile(op.ins[2], read)
    return [(0, np.where(pred, src, current))]


@instruction(family="select", compute=_copy_predicated)
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None, **_hw_hints):
    """dst = src where predicate is nonzero (zero with reverse_pred); dst
    keeps its other values. src a tile or a number; tiles of any rank with the
    same partitions and elements per partition (Vector Engine)."""
    dst, pred = on_chip_tensors({"dst": dst, "predicate": predicate}, "tensor_copy_predicated")
    _predicate(pred, "tensor_copy_predicated", ("uint8", "uint16", "uint32"))
    same_layout(dst, pred, "tensor_copy_predicated")
    if isinstance(src, TensorOperand):
        (src,) = on_chip_tensors({"src": src}, "tensor_copy_predicated")
        same_layout(dst, src, "tensor_copy_predicated")
        not_both_psum(src, pred, "tensor_copy_predicated")
        if src.decl.dtype != dst.decl.dtype:
            raise NkiccError("E132", f"tensor_copy_predicated src is {src.decl.dtype}, dst {dst.decl.dtype}", None,
                             "src and dst must share a dtype")
    else:
        src = Const(scalar(src, "tensor_copy_predicated src"))
    # dst is read too: where the predicate is false it keeps what it held
    return Emit([dst], [src, pred, dst], {"reverse_pred": bool(reverse_pred)})


_CMP = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")


def _affine_select(op: Op, read):
    x = tile(op.ins[0], read)
    pred = alu.BINARY[op.attr("cmp_op")](affine_values(op, x.shape[0]).astype(np.float64), 0.0) != 0
    return [(0, np.where(pred, x, F32(op.attr("on_false_value"))))]


def _affine_select_cost(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.fixed_cycles(op) + ctx.table.iota_base_cycles + free_size(op.outs[0]))


@instruction(family="select", compute=_affine_select, engine="pool", cost=_affine_select_cost)
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=alu.Named("equal"),
                  offset=0, name=None, **_hw_hints):
    """dst = on_true_tile where cmp_op(offset + p * channel_multiplier +
    sum(i_k * step_k), 0), else on_false_value (GpSimd Engine; a causal mask).
    The affine value is computed in int32 per element, as nisa.iota does."""
    dst, src = on_chip_tensors({"dst": dst, "on_true_tile": on_true_tile}, "affine_select")
    for t, what in ((dst, "dst"), (src, "on_true_tile")):
        if t.buffer != "sbuf":
            raise NkiccError("E120", f"affine_select {what} must be in SBUF, {t.name} is in {t.buffer}", None,
                             "GpSimd cannot access PSUM: copy it to SBUF first")
    same_layout(dst, src, "affine_select")
    return Emit([dst], [src], {**affine_pattern(pattern, offset, channel_multiplier, dst, "affine_select"),
                               "cmp_op": alu.op_name(cmp_op, _CMP, "affine_select cmp_op"),
                               "on_false_value": float(scalar(on_false_value, "affine_select on_false_value"))})


def _range_select(op: Op, read):
    x = tile(op.ins[0], read)
    b0, b1 = operand(op.ins[1], read), operand(op.ins[2], read)
    idx = (op.attr("range_start") + np.arange(x.shape[1], dtype=np.float64)).astype(F32)[None, :]
    mask = (alu.BINARY[op.attr("cmp0")](idx, b0) != 0) & (alu.BINARY[op.attr("cmp1")](idx, b1) != 0)
    y = np.where(mask, x, F32(op.attr("on_false_value")))
    p = y.shape[0]
    acc = accumulator.start(op, read, p)
    partial = None if acc is None else alu.REDUCE[op.attr("reduce_op")](y, axis=1, keepdims=True)
    return [(0, y)] + accumulator.finish(op, acc, partial, p)


_FP32_MIN = float(np.finfo(np.float32).min)


@instruction(family="select", compute=_range_select, since=3)
def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=enums.reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=alu.Named("maximum"), range_start=0, on_false_value=_FP32_MIN,
                 name=None, **_hw_hints):
    """dst[p, j] = on_true_tile[p, j] where comp_op0(range_start + j, bound0[p])
    and comp_op1(range_start + j, bound1[p]), else on_false_value (FP32_MIN on
    hardware); compared in fp32. The row's reduction (reduce_op, max) goes
    through the Vector Engine's accumulators as reduce_cmd says, into
    reduce_res (Vector Engine, NeuronCore-v3 and newer)."""
    dst, src, b0, b1 = on_chip_tensors({"dst": dst, "on_true_tile": on_true_tile, "bound0": bound0,
                                        "bound1": bound1}, "range_select")
    same_layout(dst, src, "range_select")
    for b, what in ((b0, "bound0"), (b1, "bound1")):
        if b.shape[0] != dst.shape[0] or free(b) != 1:
            raise NkiccError("E140", f"range_select {what} must be [{dst.shape[0]}, 1], got {list(b.shape)}")
    outs, ins = [dst], [src, b0, b1]
    attrs = {"cmp0": alu.op_name(comp_op0, _CMP, "range_select comp_op0"),
             "cmp1": alu.op_name(comp_op1, _CMP, "range_select comp_op1"),
             "range_start": int(scalar(range_start, "range_start")),
             "on_false_value": float(scalar(on_false_value, "range_select on_false_value"))}
    cmd = accumulator.command(reduce_cmd)
    if cmd != "idle" or reduce_res is not None:
        rop = alu.op_name(reduce_op, alu.REDUCE, "range_select reduce_op")
        accumulator.plan(DVE_ACC, cmd, rop, dst.shape[0], outs, ins, attrs, reduce_res, None, "range_select")
    return Emit(outs, ins, attrs)


def _select_reduce(op: Op, read):
    pred = tile(op.ins[0], read) != 0
    if op.attr("reverse_pred"):
        pred = ~pred
    y = np.where(pred, tile(op.ins[1], read), operand(op.ins[2], read))
    p = y.shape[0]
    acc = accumulator.start(op, read, p)
    partial = None if acc is None else np.max(y, axis=1, keepdims=True)
    return [(0, y)] + accumulator.finish(op, acc, partial, p)


@instruction(family="select", compute=_select_reduce)
def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=enums.reduce_cmd.idle,
                  reduce_op=alu.Named("maximum"), reverse_pred=False, name=None, **_hw_hints):
    """dst = on_true where predicate (inverted with reverse_pred) else on_false
    (a number or a [P, 1] tile); the row maximum goes through the Vector
    Engine's accumulators as reduce_cmd says, into reduce_res."""
    dst, pred, src = on_chip_tensors({"dst": dst, "predicate": predicate, "on_true": on_true}, "select_reduce")
    _predicate(pred, "select_reduce", ("int8", "uint8", "int16", "uint16"))
    same_layout(dst, src, "select_reduce")
    same_layout(dst, pred, "select_reduce")
    not_both_psum(src, pred, "select_reduce")
    outs, ins = [dst], [pred, src, per_partition(on_false, dst, "on_false")]
    attrs = {"reverse_pred": bool(reverse_pred)}
    cmd = accumulator.command(reduce_cmd)
    if cmd != "idle" or reduce_res is not None:
        rop = alu.op_name(reduce_op, ("maximum",), "select_reduce reduce_op")
        accumulator.plan(DVE_ACC, cmd, rop, dst.shape[0], outs, ins, attrs, reduce_res, None, "select_reduce")
    return Emit(outs, ins, attrs)
