"""Engine accumulator registers, shared by the instructions that reduce into
them (`reduce_cmd`): one value per partition that persists between
instructions of the same engine. An instruction that touches them lists the
registers as an operand (ir.ops.EngineState), so schedule, hazard checks and
loop dependence analysis see the dependence like any other.

nkicc's choice where the reference is silent: an instruction given a
`reduce_res` tile with `reduce_cmd` left `idle` reduces its own result into
it, as nkicc did before 0.6 and as kernels written for earlier NKI expect
(documented in docs/api.md)."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from . import alu
from .checks import free, on_chip_tensors, per_partition
from .core import EngineState
from .enums import member_name, reduce_cmd
from .values import F32, operand


def command(value) -> str:
    return member_name(value, reduce_cmd, "reduce_cmd")


def plan(state: EngineState, cmd: str, reduce_op: str, partitions: int, outs: list, ins: list, attrs: dict,
         reduce_res=None, init=None, what: str = "") -> None:
    """Add the accumulator operands of one instruction to its outs/ins and
    record where they are in attrs. `init`: the load_reduce value (a number
    or a [P, 1] tile)."""
    if reduce_res is not None and cmd == "idle":
        cmd = "reset_reduce"
    attrs.update(reduce_cmd=cmd, reduce_op=reduce_op)
    if reduce_res is not None:
        (reduce_res,) = on_chip_tensors({"reduce_res": reduce_res}, what)
        if reduce_res.shape[0] != partitions or free(reduce_res) != 1:
            raise NkiccError("E140", f"{what} reduce_res must be [{partitions}, 1], got {list(reduce_res.shape)}")
        attrs["res_out"] = len(outs)
        outs.append(reduce_res)
    if cmd == "reduce":
        attrs["acc_in"] = len(ins)
        ins.append(state.rows(partitions))
    if cmd == "load_reduce":
        if init is None:
            raise NkiccError("E103", f"{what} with reduce_cmd=load_reduce needs the initial value (reduce_init)")
        attrs["init_in"] = len(ins)
        ins.append(per_partition(init, outs[0], "reduce_init"))
    if cmd != "idle":
        attrs["acc_out"] = len(outs)
        outs.append(state.rows(partitions))


def start(op, read, partitions: int) -> np.ndarray | None:
    """The accumulator before this instruction's result: a (P, 1) array, or
    None when the instruction does not accumulate."""
    cmd, rop = op.attr("reduce_cmd"), op.attr("reduce_op")
    if cmd in ("idle", "reset", None):
        return None
    if cmd == "reduce":
        return np.asarray(read(op.ins[op.attr("acc_in")]), dtype=F32).reshape(partitions, 1)
    if cmd == "load_reduce":
        return np.broadcast_to(np.asarray(operand(op.ins[op.attr("init_in")], read), dtype=F32).reshape(-1, 1),
                               (partitions, 1)).copy()
    return np.full((partitions, 1), alu.IDENTITY[rop], dtype=F32)


def finish(op, acc: np.ndarray | None, partial: np.ndarray | None, partitions: int) -> list:
    """Results for the accumulator and reduce_res outputs: acc combined with this
    instruction's per-partition partial result."""
    cmd, rop = op.attr("reduce_cmd"), op.attr("reduce_op")
    if cmd in ("idle", None):
        return []
    if cmd == "reset":
        value = np.full((partitions, 1), alu.IDENTITY[rop], dtype=F32)
    else:
        value = np.asarray(alu.COMBINE[rop](acc, partial), dtype=F32)
    out = [(op.attr("acc_out"), value)]
    if op.attr("res_out") is not None:
        out.append((op.attr("res_out"), value))
    return out
