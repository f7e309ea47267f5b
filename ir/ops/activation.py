"""The Scalar Engine's activation instructions: op(data * scale + bias), with
an optional reduction through the engine's reduce registers."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Op
from . import accumulator, alu
from .checks import on_chip_tensors, per_partition, same_layout
from .core import ACT_REGS, Emit, TensorOperand, by_partition, instruction, require_generation
from .enums import reduce_cmd
from .values import operand, tile


def _activation(op: Op, read):
    x = tile(op.ins[0], read)
    stages = op.attr("stages")
    if stages is None:  # activation: scale then bias
        x = x * operand(op.ins[1], read)
        if op.attr("bias"):
            x = x + operand(op.ins[2], read)
    else:  # activate2: (x op0 imm0) op1 imm1
        (op0, r0), (op1, r1) = stages
        x = alu.apply(op0, x, operand(op.ins[1], read), r0)
        x = alu.apply(op1, x, operand(op.ins[2], read), r1)
    if op.attr("op") == "prelu":  # x, or x * relu_param below 0 (activate2's relu_param; 0 in activation)
        slope = operand(op.ins[op.attr("slope_in")], read) if op.attr("slope_in") is not None else np.float32(0)
        y = np.where(x >= 0, x, x * slope)
    else:
        y = alu.UNARY[op.attr("op")](x)
    out = [(0, y)]
    p = y.shape[0]
    acc = accumulator.start(op, read, p)
    partial = None
    if acc is not None:
        partial = alu.REDUCE[op.attr("reduce_op")](np.asarray(y, np.float32), axis=1, keepdims=True)
    return out + accumulator.finish(op, acc, partial, p)


def _trace(name, dst, op, data, ins_after_data, attrs, reduce_op, reduce_res, cmd):
    dst, data = on_chip_tensors({"dst": dst, "data": data}, name)
    same_layout(dst, data, name)
    bias = dict(ins_after_data).get("bias")
    if bias is not None and not isinstance(bias, TensorOperand):
        require_generation(dst.generation, 3, f"nisa.{name} with a scalar bias (NeuronCore-v2 takes a [P, 1] tile)")
    if name == "activation_reduce" and dst.generation < 3 and reduce_op is not None \
            and alu.op_name(reduce_op, alu.REDUCE, f"{name} reduce_op") != "add":
        require_generation(dst.generation, 3, f"nisa.{name} with a reduce_op other than nl.add")
    ins = [data] + [per_partition(v, dst, what) for what, v in ins_after_data]
    outs = [dst]
    attrs = {"op": alu.op_name(op, alu.UNARY, name), **attrs}
    cmd = accumulator.command(cmd)
    if cmd != "idle" or reduce_res is not None:
        rop = alu.op_name(reduce_op if reduce_op is not None else "add", alu.REDUCE, f"{name} reduce_op")
        accumulator.plan(ACT_REGS, cmd, rop, dst.shape[0], outs, ins, attrs, reduce_res, what=name)
    return Emit(outs, ins, attrs)


@instruction(family="activation", compute=_activation, engine="act", batched=by_partition(_activation))
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None, **_hw_hints):
    """dst = op(data * scale + bias) on the Scalar Engine. `scale` and `bias`
    are numbers or [P, 1] tiles. The engine's reduce registers (one per
    partition) take the free-axis reduction (`reduce_op`, add) of the result
    as `reduce_cmd` says: reset, reduce onto them, reset_reduce; `reduce_res`
    ([P, 1]) receives their value."""
    extra = [("scale", scale)] + ([("bias", bias)] if bias is not None else [])
    return _trace("activation", dst, op, data, extra, {"bias": bias is not None}, reduce_op, reduce_res, reduce_cmd)


@instruction(family="activation", compute=_activation, engine="act", batched=by_partition(_activation))
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None, **_hw_hints):
    """activation with reduce_cmd=reset_reduce: reduce_res ([P, 1]) receives
    the free-axis reduction of op(data * scale + bias)."""
    if reduce_res is None:
        raise NkiccError("E103", "activation_reduce needs a reduce_res tile", None, "or call nisa.activation")
    extra = [("scale", scale)] + ([("bias", bias)] if bias is not None else [])
    return _trace("activation_reduce", dst, op, data, extra, {"bias": bias is not None}, reduce_op, reduce_res,
                  "reset_reduce")


_ACTIVATE2_STAGES = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
                     ("subtract", "bypass"), ("bypass", "bypass")}


@instruction(family="activation", compute=_activation, engine="act", since=4, batched=by_partition(_activation))
def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False, reduce_op=None,
              reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None, **_hw_hints):
    """dst = op((data op0 imm0) op1 imm1) on the Scalar Engine (NeuronCore-v4),
    with the reduce registers as in activation. (op0, op1) is one of
    (multiply, add), (multiply, subtract), (multiply, bypass), (add, bypass),
    (subtract, bypass), (bypass, bypass). With op=nl.prelu, relu_param (a
    number or a [P, 1] tile) is the slope below 0: x if x >= 0 else
    relu_param * x (nisa.activation's prelu has slope 0)."""
    n0 = alu.op_name(op0 if op0 is not None else "bypass", alu.BINARY, "activate2 op0")
    n1 = alu.op_name(op1 if op1 is not None else "bypass", alu.BINARY, "activate2 op1")
    if (n0, n1) not in _ACTIVATE2_STAGES:
        raise NkiccError("E103", f"activate2 does not support op0={n0}, op1={n1}", None,
                         "use (multiply, add), (multiply, subtract), (multiply|add|subtract|bypass, bypass)")
    stages = ((n0, bool(reverse0)), (n1, bool(reverse1)))
    extra, attrs = [("imm0", imm0), ("imm1", imm1)], {"stages": stages}
    if alu.op_name(op, alu.UNARY, "activate2") == "prelu":
        extra.append(("relu_param", relu_param))  # the slope below 0: a number or a [P, 1] tile
        attrs["slope_in"] = 3
    elif isinstance(relu_param, TensorOperand) or float(relu_param) != 0.0:
        raise NkiccError("E103", "activate2 relu_param is the slope of op=nl.prelu; other ops take none", None,
                         "pass op=nl.prelu, or leave relu_param 0.0")
    return _trace("activate2", dst, op, data, extra, attrs, reduce_op, reduce_res, reduce_cmd)
