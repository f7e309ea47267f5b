"""Reductions and scans along the free axes (Vector Engine)."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Op
from . import alu, enums
from .checks import free, normalize_axes, not_both_psum, on_chip_tensors, per_partition, same_layout
from .core import CostContext, Emit, free_size, instruction
from .values import F32, f32, operand, tile


def _reduce(op: Op, read):
    r = alu.REDUCE[op.attr("op")](f32(read(op.ins[0])), axis=tuple(op.attr("axes")))
    return [(0, -r if op.attr("negate") else r)]


def _reduce_cost(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.fixed_cycles(op) + ctx.table.reduce_factor * free_size(op.ins[0]))


@instruction(family="reduce", compute=_reduce, cost=_reduce_cost)
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None, **_hw_hints):
    """dst = op-reduction of data over the free axes `axis` (negated if asked)."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "tensor_reduce")
    axes = normalize_axes(axis, len(data.shape))
    kept = [d for i, d in enumerate(data.shape) if i not in axes]
    expect = 1
    for d in kept[1:]:
        expect *= d
    if dst.shape[0] != data.shape[0] or free(dst) != expect:
        raise NkiccError("E140", f"tensor_reduce over axes {list(axes)} of {list(data.shape)} "
                                 f"gives {kept}, dst is {list(dst.shape)}")
    return Emit([dst], [data], {"op": alu.op_name(op, alu.REDUCE, "tensor_reduce"), "axes": axes,
                                "negate": bool(negate)})



def _scan(op: Op, read):
    """dst[:, i] = (d0[:, i] op0 dst[:, i-1]) op1 d1[:, i], dst[:, -1] = initial; fp32 state."""
    d0, d1 = tile(op.ins[0], read), tile(op.ins[1], read)
    f0, f1 = alu.BINARY[op.attr("op0")], alu.BINARY[op.attr("op1")]
    r0, r1 = op.attr("reverse0"), op.attr("reverse1")
    out = np.empty(d0.shape, dtype=F32)
    prev = np.broadcast_to(np.asarray(operand(op.ins[2], read), dtype=F32).reshape(-1), (d0.shape[0],))
    for i in range(d0.shape[1]):
        x = f0(prev, d0[:, i]) if r0 else f0(d0[:, i], prev)
        prev = np.asarray(f1(d1[:, i], x) if r1 else f1(x, d1[:, i]), dtype=F32)
        out[:, i] = prev
    return [(0, out)]


def _scan_cost(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.fixed_cycles(op) + ctx.table.scan_factor * free_size(op.outs[0]))


@instruction(family="reduce", compute=_scan, cost=_scan_cost)
def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None,
                       engine=enums.engine.unknown, **_hw_hints):
    """A recurrence along the free axis (flattened), per partition:
    dst[:, 0] = (data0[:, 0] op0 initial) op1 data1[:, 0] and
    dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i]; `initial` is a
    number or a [P, 1] tile. reverse0/reverse1 swap the operands of op0/op1.
    The running value is kept in fp32; each step is also written to dst."""
    dst, a, b = on_chip_tensors({"dst": dst, "data0": data0, "data1": data1}, "tensor_tensor_scan")
    not_both_psum(a, b, "tensor_tensor_scan")
    same_layout(dst, a, "tensor_tensor_scan")
    same_layout(dst, b, "tensor_tensor_scan")
    attrs = {"op0": alu.op_name(op0, alu.BINARY, "tensor_tensor_scan"), "reverse0": bool(reverse0),
             "op1": alu.op_name(op1, alu.BINARY, "tensor_tensor_scan"), "reverse1": bool(reverse1)}
    return Emit([dst], [a, b, per_partition(initial, dst, "initial")], attrs)


_PARTITION_REDUCE = {"add": np.sum, "maximum": np.max, "minimum": np.min, "mean": np.mean, "average": np.mean,
                     "bitwise_or": np.bitwise_or.reduce, "bitwise_and": np.bitwise_and.reduce}


def _partition_reduce(op: Op, read):
    x = tile(op.ins[0], read)
    name = op.attr("op")
    if name.startswith("bitwise"):
        r = _PARTITION_REDUCE[name](x.astype(np.int64), axis=0).astype(np.float64)
    else:
        r = _PARTITION_REDUCE[name](x, axis=0)
    return [(0, np.asarray(r).reshape(1, -1))]


def _partition_reduce_cost(op: Op, ctx: CostContext) -> float:
    # estimate: GpSimd streams every element of the input once
    src = op.ins[0]
    return ctx.ns(ctx.fixed_cycles(op) + max(ctx.table.elementwise_min, free_size(src) * src.pattern[0][1] // 8))


@instruction(family="reduce", compute=_partition_reduce, engine="pool", cost=_partition_reduce_cost)
def tensor_partition_reduce(dst, op, data, name=None, **_hw_hints):
    """dst[0, :] = op-reduction of data over its partitions (GpSimd Engine):
    add, average (nl.mean), max, min, bitwise_or, bitwise_and."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "tensor_partition_reduce")
    for t, what in ((dst, "dst"), (data, "data")):
        if t.buffer != "sbuf":
            raise NkiccError("E120", f"tensor_partition_reduce {what} must be in SBUF (GpSimd cannot access PSUM)",
                             None, "copy it to SBUF first")
    if dst.shape[0] != 1 or free(dst) != free(data):
        raise NkiccError("E140", f"tensor_partition_reduce of {list(data.shape)} gives [1, {free(data)}], dst is "
                                 f"{list(dst.shape)}")
    return Emit([dst], [data], {"op": alu.op_name(op, tuple(_PARTITION_REDUCE), "tensor_partition_reduce")})
