"""Element-wise instructions on the Vector, Scalar and GpSimd engines."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Access, Const, Op
from . import alu
from .checks import free, not_both_psum, on_chip, on_chip_tensors, per_partition, same_layout, scalar, tensor
from .core import CostContext, Emit, TensorOperand, free_size, instruction
from .values import F32, operand, tile


def _copy(op: Op, read):
    return [(0, read(op.ins[0]))]


@instruction(family="elementwise", compute=_copy)
def tensor_copy(dst, src, engine=None, name=None, dtype=None, **_hw_hints):
    """dst = src on chip (SBUF/PSUM), converted to dst's dtype."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "tensor_copy")
    same_layout(dst, src, "tensor_copy")
    return Emit([dst], [src])


def _memset(op: Op, read):
    return [(0, F32(op.attr("value")))]


@instruction(family="elementwise", compute=_memset)
def memset(dst, value, engine=None, name=None, **_hw_hints):
    """Fill dst with one value."""
    (dst,) = on_chip_tensors({"dst": dst}, "memset")
    return Emit([dst], [], {"value": scalar(value, "memset value")})


def _tensor_tensor(op: Op, read):
    return [(0, alu.BINARY[op.attr("op")](tile(op.ins[0], read), tile(op.ins[1], read)))]


def _tensor_tensor_cost(op: Op, ctx: CostContext) -> float:
    """max(64, 2N) cycles; N when one input streams from PSUM."""
    t = ctx.table
    psum = any(ctx.decls[a.tensor].buffer == "psum" for a in op.ins if isinstance(a, Access))
    factor = 1 if psum else t.tensor_tensor_factor
    return ctx.ns(ctx.fixed_cycles(op) + max(t.elementwise_min, factor * free_size(op.outs[0])))


def _inputs_not_both_psum(op: Op, decls) -> None:
    if sum(decls[a.tensor].buffer == "psum" for a in op.ins if isinstance(a, Access)) == 2:
        raise NkiccError("E120", f"{op.opcode} cannot read both inputs from PSUM", op.loc, "copy one to SBUF")


@instruction(family="elementwise", compute=_tensor_tensor, cost=_tensor_tensor_cost, verify=_inputs_not_both_psum)
def tensor_tensor(dst, data1, data2, op, engine=None, name=None, **_hw_hints):
    """dst = data1 op data2, element by element."""
    dst, a, b = on_chip_tensors({"dst": dst, "data1": data1, "data2": data2}, "tensor_tensor")
    not_both_psum(a, b, "tensor_tensor")
    same_layout(dst, a, "tensor_tensor")
    same_layout(dst, b, "tensor_tensor")
    return Emit([dst], [a, b], {"op": alu.op_name(op, alu.BINARY, "tensor_tensor")})


def _tensor_scalar(op: Op, read):
    x = alu.apply(op.attr("op0"), tile(op.ins[0], read), operand(op.ins[1], read), op.attr("reverse0"))
    if op.attr("op1") is not None:
        x = alu.apply(op.attr("op1"), x, operand(op.ins[2], read), op.attr("reverse1"))
    return [(0, x)]


@instruction(family="elementwise", compute=_tensor_scalar)
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=None, name=None, dtype=None, **_hw_hints):
    """dst = (data op0 operand0) op1 operand1; operands are numbers or [P, 1]
    tiles; reverse swaps an op's operands."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "tensor_scalar")
    same_layout(dst, data, "tensor_scalar")
    ins = [data, per_partition(operand0, dst, "operand0")]
    attrs = {"op0": alu.op_name(op0, alu.BINARY, "tensor_scalar"), "reverse0": bool(reverse0)}
    if op1 is not None:
        ins.append(per_partition(operand1, dst, "operand1"))
        attrs.update(op1=alu.op_name(op1, alu.BINARY, "tensor_scalar"), reverse1=bool(reverse1))
    return Emit([dst], ins, attrs)


def _activation(op: Op, read):
    x = tile(op.ins[0], read) * operand(op.ins[1], read)
    if op.attr("bias"):
        x = x + operand(op.ins[2], read)
    y = alu.UNARY[op.attr("op")](x)
    out = [(0, y)]
    if op.attr("reduce_op") is not None:
        out.append((1, alu.REDUCE[op.attr("reduce_op")](y, axis=1, keepdims=True)))
    return out


@instruction(family="elementwise", compute=_activation, engine="act")
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None,
               name=None, **_hw_hints):
    """dst = op(data * scale + bias) on the Scalar Engine; optionally reduce
    the result along the free axis into reduce_res ([P, 1])."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "activation")
    same_layout(dst, data, "activation")
    ins: list = [data, per_partition(scale, dst, "scale")]
    if bias is not None:
        ins.append(per_partition(bias, dst, "bias"))
    outs = [dst]
    attrs = {"op": alu.op_name(op, alu.UNARY, "activation"), "bias": bias is not None}
    if reduce_res is not None:
        (reduce_res,) = on_chip_tensors({"reduce_res": reduce_res}, "activation")
        if reduce_res.shape[0] != dst.shape[0] or free(reduce_res) != 1:
            raise NkiccError("E140", f"reduce_res must be [{dst.shape[0]}, 1], got {list(reduce_res.shape)}")
        attrs["reduce_op"] = alu.op_name(reduce_op if reduce_op is not None else "add", alu.REDUCE,
                                         "activation reduce")
        outs.append(reduce_res)
    return Emit(outs, ins, attrs)


def _select(op: Op, read):
    pred, a, b = (operand(x, read) for x in op.ins)
    return [(0, np.where(pred != 0, a, b))]


@instruction(family="elementwise", compute=_select)
def select(dst, predicate, on_true, on_false, name=None, **_hw_hints):
    """dst = on_true where predicate != 0 else on_false (element-wise)."""
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


def _iota(op: Op, read):
    free_idx = np.zeros((1,), dtype=np.int64)
    for step, num in op.attr("pattern"):
        free_idx = (free_idx[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    p = np.arange(op.outs[0].shape[0], dtype=np.int64)[:, None] * op.attr("channel_multiplier")
    return [(0, (op.attr("offset") + p + free_idx[None, :]).astype(np.float64))]


def _iota_cost(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.fixed_cycles(op) + ctx.table.iota_base_cycles + free_size(op.outs[0]))


@instruction(family="elementwise", compute=_iota, engine="pool", cost=_iota_cost)
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None, **_hw_hints):
    """dst[p, i...] = offset + p * channel_multiplier + sum(i_k * step_k), in int32 (GpSimd)."""
    (dst,) = on_chip_tensors({"dst": dst}, "iota")
    try:
        pairs = tuple((int(s), int(n)) for s, n in pattern)
        offset, channel_multiplier = int(offset), int(channel_multiplier)
    except (TypeError, ValueError):
        raise NkiccError("E103", "iota takes a pattern of [step, num] pairs and integer offset and "
                                 "channel_multiplier") from None
    count = 1
    for _, n in pairs:
        count *= n
    if count != free(dst):
        raise NkiccError("E140", f"iota pattern covers {count} free elements, dst has {free(dst)}")
    return Emit([dst], [], {"pattern": pairs, "offset": offset, "channel_multiplier": channel_multiplier})
