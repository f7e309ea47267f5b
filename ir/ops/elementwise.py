"""Element-wise instructions on the Vector, Scalar and GpSimd engines."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Access, Const, Op
from . import accumulator, alu, enums
from .checks import affine_pattern, free, not_both_psum, on_chip, on_chip_tensors, per_partition, same_layout, scalar, tensor
from .core import DVE_ACC, Batched, CostContext, Emit, TensorOperand, any_shape, by_partition, free_size, instruction, require_generation
from .tile_rules import gpsimd_sbuf
from .values import F32, affine_values, f32, operand, tile


def _copy(op: Op, read):
    return [(0, read(op.ins[0]))]


def placed(engine, allowed: tuple, what: str, *tiles) -> dict:
    """The attrs that put an instruction on the engine its engine= argument names (none for
    nisa.engine.unknown: nkicc's default placement); on the GpSimd engine its tiles must be in
    SBUF."""
    unit = enums.engine_choice(engine, allowed, what)
    gpsimd_sbuf(unit, f"{what} operands on the GpSimd engine", *tiles)
    return {} if unit is None else {"engine": unit}


@instruction(family="elementwise", compute=_copy, batched=any_shape(_copy))
def tensor_copy(dst, src, engine=enums.engine.unknown, name=None, dtype=None, **_hw_hints):
    """dst = src on chip (SBUF/PSUM), converted to dst's dtype; engine: vector, scalar
    (NeuronCore-v3 and newer), gpsimd (SBUF only) or unknown (nkicc places it)."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "tensor_copy")
    same_layout(dst, src, "tensor_copy")
    attrs = placed(engine, (None, "dve", "act", "pool"), "tensor_copy", dst, src)
    if attrs.get("engine") == "act":
        require_generation(dst.generation, 3, "nisa.tensor_copy on the Scalar Engine (on NeuronCore-v2: "
                                              "nisa.activation with op=nl.copy)")
    return Emit([dst], [src], attrs)


def _memset(op: Op, read):
    return [(0, F32(op.attr("value")))]


@instruction(family="elementwise", compute=_memset, batched=by_partition(_memset))
def memset(dst, value, engine=enums.engine.unknown, name=None, **_hw_hints):
    """Fill dst with one value; engine: vector, gpsimd (SBUF only) or unknown (nkicc places it)."""
    (dst,) = on_chip_tensors({"dst": dst}, "memset")
    return Emit([dst], [], {"value": scalar(value, "memset value"),
                            **placed(engine, (None, "dve", "pool"), "memset", dst)})


def _tensor_tensor(op: Op, read):
    return [(0, alu.BINARY[op.attr("op")](tile(op.ins[0], read), tile(op.ins[1], read)))]


def _accumulator(op: Op) -> int | None:
    """Which input an add reads at its own destination (dst = dst + other), if either."""
    if op.attr("op") != "add":
        return None
    for k in (0, 1):
        if op.ins[k] == op.outs[0]:
            return k
    return None


_tensor_tensor_rows = by_partition(_tensor_tensor)


def _tensor_tensor_batched(op: Op, read, nlead: int, reduce: tuple) -> list:
    """With `reduce`: an accumulation dst += x over those loop axes, as dst + sum(x)."""
    if not reduce:
        return _tensor_tensor_rows.run(op, read, nlead, reduce)
    k = _accumulator(op)
    acc = f32(read(op.ins[k]))[tuple(0 if i in reduce else slice(None) for i in range(nlead))]
    return [(0, acc + _summed(f32(read(op.ins[1 - k])), reduce))]


def _tensor_tensor_into(op: Op, read, nlead: int, reduce: tuple, dst: np.ndarray) -> None:
    """dst += x (summed over `reduce`) in place: dst is the float32 view of op's destination over
    the loops it keeps, the same elements as its accumulator input."""
    np.add(dst, _summed(f32(read(op.ins[1 - _accumulator(op)])), reduce).reshape(dst.shape), out=dst)


def _summed(terms: np.ndarray, reduce: tuple) -> np.ndarray:
    """terms summed over the loop axes `reduce` (those of length 1 just dropped: no copy)."""
    if all(terms.shape[i] == 1 for i in reduce):
        return terms.reshape(tuple(n for i, n in enumerate(terms.shape) if i not in reduce))
    return terms.sum(axis=reduce, dtype=F32)


def partition_broadcast(a: Access) -> bool:
    """An on-chip read of one partition's row into many (nl.broadcast_to over partitions)."""
    return bool(a.pattern) and a.pattern[0][0] == 0 and a.pattern[0][1] > 1


def _tensor_tensor_cost(op: Op, ctx: CostContext) -> float:
    """max(64, 2N) cycles; N when one input streams from PSUM. A compute engine cannot read a
    partition broadcast from SBUF: the vendor's compiler broadcasts it with a TensorE
    instruction, which writes PSUM (fused_mamba.rst, Step 1 Option 2: "partition-dim broadcast
    often requires a separate instruction on TensorE"), so that input streams from PSUM too.
    (That TensorE instruction is not charged: it waits only for the row's load.)"""
    t = ctx.table
    psum = any(ctx.decls[a.tensor].buffer == "psum" or partition_broadcast(a)
               for a in op.ins if isinstance(a, Access))
    factor = 1 if psum else t.tensor_tensor_factor
    return ctx.ns(ctx.fixed_cycles(op) + max(t.elementwise_min, factor * free_size(op.outs[0])))


def _inputs_not_both_psum(op: Op, decls) -> None:
    if sum(decls[a.tensor].buffer == "psum" for a in op.ins if isinstance(a, Access)) == 2:
        raise NkiccError("E120", f"{op.opcode} cannot read both inputs from PSUM", op.loc, "copy one to SBUF")


@instruction(family="elementwise", compute=_tensor_tensor, cost=_tensor_tensor_cost, verify=_inputs_not_both_psum,
             batched=Batched(_tensor_tensor_batched, lambda op: _accumulator(op) is not None,
                             into=_tensor_tensor_into))
def tensor_tensor(dst, data1, data2, op, engine=enums.engine.unknown, name=None, **_hw_hints):
    """dst = data1 op data2, element by element; engine: vector, gpsimd (SBUF only) or unknown
    (nkicc places it)."""
    dst, a, b = on_chip_tensors({"dst": dst, "data1": data1, "data2": data2}, "tensor_tensor")
    not_both_psum(a, b, "tensor_tensor")
    same_layout(dst, a, "tensor_tensor")
    same_layout(dst, b, "tensor_tensor")
    return Emit([dst], [a, b], {"op": alu.op_name(op, alu.BINARY, "tensor_tensor"),
                                **placed(engine, (None, "dve", "pool"), "tensor_tensor", dst, a, b)})


def _tensor_scalar(op: Op, read):
    x = alu.apply(op.attr("op0"), tile(op.ins[0], read), operand(op.ins[1], read), op.attr("reverse0"))
    if op.attr("op1") is not None:
        x = alu.apply(op.attr("op1"), x, operand(op.ins[2], read), op.attr("reverse1"))
    return [(0, x)]


@instruction(family="elementwise", compute=_tensor_scalar, batched=by_partition(_tensor_scalar))
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=enums.engine.unknown, name=None, dtype=None, **_hw_hints):
    """dst = (data op0 operand0) op1 operand1; operands are numbers or [P, 1]
    tiles; reverse swaps an op's operands. An op of None is that stage skipped
    (op0=None, operand0=None: dst = data, as nl.bypass does). engine: vector, scalar or
    unknown (nkicc places it)."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "tensor_scalar")
    same_layout(dst, data, "tensor_scalar")
    if op0 is None:  # no first stage: a pass-through, as the NKI Library's optional clamps write it
        op0, operand0 = "bypass", 0.0 if operand0 is None else operand0
    ins = [data, per_partition(operand0, dst, "operand0")]
    attrs = {"op0": alu.op_name(op0, alu.BINARY, "tensor_scalar"), "reverse0": bool(reverse0)}
    if op1 is not None:
        ins.append(per_partition(operand1, dst, "operand1"))
        attrs.update(op1=alu.op_name(op1, alu.BINARY, "tensor_scalar"), reverse1=bool(reverse1))
    # (the reference allows gpsimd for rsqrt alone, an op nkicc's tensor_scalar does not take)
    return Emit([dst], ins, {**attrs, **placed(engine, (None, "dve", "act"), "tensor_scalar", dst, data)})


def _iota(op: Op, read):
    return [(0, affine_values(op, op.outs[0].shape[0]).astype(np.float64))]


def _iota_cost(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.fixed_cycles(op) + ctx.table.iota_base_cycles + free_size(op.outs[0]))


@instruction(family="elementwise", compute=_iota, engine="pool", cost=_iota_cost)
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None, **_hw_hints):
    """dst[p, i...] = offset + p * channel_multiplier + sum(i_k * step_k), in int32 (GpSimd)."""
    (dst,) = on_chip_tensors({"dst": dst}, "iota")
    return Emit([dst], [], affine_pattern(pattern, offset, channel_multiplier, dst, "iota"))


def _reciprocal(op: Op, read):
    return [(0, 1.0 / tile(op.ins[0], read))]


@instruction(family="elementwise", compute=_reciprocal)
def reciprocal(dst, data, name=None, **_hw_hints):
    """dst = 1 / data, element-wise, in fp32 (Vector Engine)."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "reciprocal")
    same_layout(dst, data, "reciprocal")
    return Emit([dst], [data])


def _scalar_tensor_tensor(op: Op, read):
    x = alu.apply(op.attr("op0"), tile(op.ins[0], read), operand(op.ins[1], read), op.attr("reverse0"))
    return [(0, alu.apply(op.attr("op1"), x, tile(op.ins[2], read), op.attr("reverse1")))]


@instruction(family="elementwise", compute=_scalar_tensor_tensor, cost=_tensor_tensor_cost)
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None,
                         **_hw_hints):
    """dst = (data op0 operand0) op1 operand1: operand0 a number or a [P, 1]
    tile, operand1 a tile shaped like data (Vector Engine)."""
    dst, data, t1 = on_chip_tensors({"dst": dst, "data": data, "operand1": operand1}, "scalar_tensor_tensor")
    not_both_psum(data, t1, "scalar_tensor_tensor")
    same_layout(dst, data, "scalar_tensor_tensor")
    same_layout(dst, t1, "scalar_tensor_tensor")
    attrs = {"op0": alu.op_name(op0, alu.BINARY, "scalar_tensor_tensor"), "reverse0": bool(reverse0),
             "op1": alu.op_name(op1, alu.BINARY, "scalar_tensor_tensor"), "reverse1": bool(reverse1)}
    return Emit([dst], [data, per_partition(operand0, dst, "operand0"), t1], attrs)


def _tensor_scalar_reduce(op: Op, read):
    y = alu.apply(op.attr("op0"), tile(op.ins[0], read), operand(op.ins[1], read), op.attr("reverse0"))
    p = y.shape[0]
    acc = accumulator.start(op, read, p)
    out = [(0, y)]
    if acc is None:
        return out
    partial = alu.REDUCE[op.attr("reduce_op")](np.asarray(y, F32), axis=1, keepdims=True)
    res = accumulator.finish(op, acc, partial, p)
    if op.attr("negate_res"):
        res = [(i, -v) if i == op.attr("res_out") else (i, v) for i, v in res]
    return out + res


@instruction(family="elementwise", compute=_tensor_scalar_reduce)
def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=enums.reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False,
                         name=None, **_hw_hints):
    """dst = data op0 operand0, and its free-axis reduction (`reduce_op`: add,
    multiply, max, min) through the Vector Engine's accumulators as
    `reduce_cmd` says; `reduce_res` ([P, 1], optional) receives their value
    (negated with reduce_res_negate)."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "tensor_scalar_reduce")
    same_layout(dst, data, "tensor_scalar_reduce")
    outs, ins = [dst], [data, per_partition(operand0, dst, "operand0")]
    attrs = {"op0": alu.op_name(op0, alu.BINARY, "tensor_scalar_reduce"), "reverse0": bool(reverse0),
             "negate_res": bool(reduce_res_negate)}
    rop = alu.op_name(reduce_op, alu.REDUCE, "tensor_scalar_reduce reduce_op")
    accumulator.plan(DVE_ACC, accumulator.command(reduce_cmd), rop, dst.shape[0], outs, ins, attrs, reduce_res,
                     reduce_init, "tensor_scalar_reduce")
    return Emit(outs, ins, attrs)


def _cumulative(op: Op, read):
    x = tile(op.ins[0], read)
    p = x.shape[0]
    y = alu.apply(op.attr("op0"), x, operand(op.ins[1], read), op.attr("reverse0"))
    acc = accumulator.start(op, read, p)
    if acc is None:  # idle: the scan starts from the identity and leaves no state
        acc = np.full((p, 1), alu.IDENTITY[op.attr("reduce_op")], dtype=F32)
    combine = alu.BINARY[op.attr("reduce_op")]
    out = np.empty(y.shape, dtype=F32)
    reg = acc[:, 0]
    for i in range(y.shape[1]):
        reg = np.asarray(combine(y[:, i], reg), dtype=F32)
        out[:, i] = reg
    res = [(0, out)]
    if op.attr("acc_out") is not None:
        res.append((op.attr("acc_out"), reg.reshape(p, 1)))
    return res


def _cumulative_cost(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.fixed_cycles(op) + ctx.table.scan_factor * free_size(op.outs[0]))


@instruction(family="elementwise", compute=_cumulative, cost=_cumulative_cost)
def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=enums.reduce_cmd.reset_reduce,
                             name=None, **_hw_hints):
    """A running reduction along the free axis, per partition:
    reg = op1(src[i] op0 imm0, reg); dst[i] = reg. The register starts from
    op1's identity (reset_reduce), from imm1 (load_reduce) or from the Vector
    Engine's accumulators (reduce), and is left there."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "tensor_scalar_cumulative")
    same_layout(dst, src, "tensor_scalar_cumulative")
    for t in (dst, src):
        if t.decl.dtype in ("int32", "uint32"):
            raise NkiccError("E132", f"tensor_scalar_cumulative does not take {t.decl.dtype} tiles", None,
                             "use float32, bfloat16, float16, fp8 or 8/16-bit integers")
    rop = alu.op_name(op1, ("add", "subtract", "multiply", "maximum", "minimum"), "tensor_scalar_cumulative op1")
    outs, ins = [dst], [src, per_partition(imm0, dst, "imm0")]
    attrs = {"op0": alu.op_name(op0, alu.BINARY, "tensor_scalar_cumulative op0"), "reverse0": False}
    accumulator.plan(DVE_ACC, accumulator.command(reduce_cmd), rop, dst.shape[0], outs, ins, attrs, None, imm1,
                     "tensor_scalar_cumulative")
    return Emit(outs, ins, attrs)


def _exponential(op: Op, read):
    y = np.exp(tile(op.ins[0], read) - operand(op.ins[1], read))
    p = y.shape[0]
    acc = accumulator.start(op, read, p)
    partial = None if acc is None else np.sum(np.asarray(y, F32), axis=1, keepdims=True)
    return [(0, y)] + accumulator.finish(op, acc, partial, p)


@instruction(family="elementwise", compute=_exponential, since=4)
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=enums.reduce_cmd.idle, reduce_init=0.0,
                name=None, **_hw_hints):
    """dst = exp(src - max_value) (Vector Engine, NeuronCore-v4); max_value a
    number or a [P, 1] tile; the sum of the result accumulates through the
    Vector Engine's accumulators as reduce_cmd says, into reduce_res."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "exponential")
    same_layout(dst, src, "exponential")
    outs, ins = [dst], [src, per_partition(max_value, dst, "max_value")]
    attrs: dict = {}
    cmd = accumulator.command(reduce_cmd)
    if cmd != "idle" or reduce_res is not None:
        accumulator.plan(DVE_ACC, cmd, "add", dst.shape[0], outs, ins, attrs, reduce_res, reduce_init,
                         "exponential")
    return Emit(outs, ins, attrs)
