"""Sort and search: the Vector Engine's eight-wide max8 / find_index8 /
match_replace8, and the GpSimd Engine's topk, nonzero_with_count and
sequence_bounds. Values are compared in fp32 (the engines convert on
reading); positions count the free elements of a partition, flattened in
row-major order."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Op
from .checks import free, on_chip_tensors, same_layout, scalar
from .core import CostContext, Emit, instruction
from .tile_rules import (
    GPSIMD_PARTITIONS, all_ones, dtype_in, free_between, free_is, gpsimd_sbuf_operands, input_streaming_cost,
    int_arg, max_dims, same_partitions, sbuf_only,
)
from .values import tile

# elements per partition the Max8 family reads
SEARCH_MIN, SEARCH_MAX = 8, 16384
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _ints(x, read) -> np.ndarray:
    """An index tile as exact integers (fp32 would round indices above 2**24)."""
    v = np.asarray(read(x))
    return v.reshape(v.shape[0], -1).astype(np.int64) if v.ndim else v.reshape(1, 1).astype(np.int64)


def _search_operands(opcode: str, dst, data, vals=None):
    max_dims(data, 3, f"{opcode} data")
    free_between(data, SEARCH_MIN, SEARCH_MAX, f"{opcode} data")
    same_partitions(dst, data, opcode)
    free_is(dst, 8, f"{opcode} dst")
    if vals is not None:
        max_dims(vals, 3, f"{opcode} vals")
        same_partitions(vals, data, opcode)
        free_is(vals, 8, f"{opcode} vals")


# --- max8 ------------------------------------------------------------------------


def _max8(op: Op, read):
    x = tile(op.ins[0], read)
    return [(0, -np.sort(-x, axis=1)[:, :8])]


@instruction(family="sort", compute=_max8, cost=input_streaming_cost)
def max8(dst, src, name=None):
    """dst[p, :] = the 8 largest values of partition p of src, in descending
    order (duplicates kept). src: up to 3-d, 8 to 16384 elements per partition,
    read as fp32; dst: [P, 8], converted to its dtype. Vector Engine."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "max8")
    if len(dst.shape) != 2:
        raise NkiccError("E140", f"max8 dst must be a 2-d [P, 8] tile, got {list(dst.shape)}")
    _search_operands("max8", dst, src)
    return Emit([dst], [src])


# --- nc_find_index8 / nc_match_replace8 -------------------------------------------


def _match(data: np.ndarray, vals: np.ndarray, order, absent: int):
    """For each val (in `order`), the first position of data equal to it that no
    earlier val of this call took. Returns (positions with `absent` where none,
    mask of taken positions)."""
    rows = np.arange(data.shape[0])
    taken = np.zeros(data.shape, dtype=bool)
    pos = np.full(vals.shape, absent, dtype=np.int64)
    for i in order:
        hit = (data == vals[:, i:i + 1]) & ~taken
        first = hit.argmax(axis=1)
        found = hit[rows, first]
        pos[found, i] = first[found]
        taken[rows[found], first[found]] = True
    return pos, taken


def _find_index8(op: Op, read):
    pos, _ = _match(tile(op.ins[0], read), tile(op.ins[1], read), range(8), op.attr("absent"))
    return [(0, pos)]


@instruction(family="sort", compute=_find_index8, cost=input_streaming_cost)
def nc_find_index8(dst, data, vals, name=None):
    """dst[p, i] = the position (from 0, free axes flattened) of the first
    occurrence of vals[p, i] in partition p of data. A value repeated in vals
    takes the next occurrence each time (ascending positions across dst
    columns); a value not found (or found fewer times than repeated) gives
    all ones (0xFFFF for uint16 dst, 0xFFFFFFFF for uint32). data: up to 3-d,
    8 to 16384 elements per partition; vals and dst: 8 per partition; dst
    uint16 or uint32. Compared in fp32. Vector Engine."""
    dst, data, vals = on_chip_tensors({"dst": dst, "data": data, "vals": vals}, "nc_find_index8")
    _search_operands("nc_find_index8", dst, data, vals)
    dtype_in(dst, ("uint32", "uint16"), "nc_find_index8 dst")
    return Emit([dst], [data, vals], {"absent": all_ones(dst.decl.dtype)})


def _match_replace8(op: Op, read):
    data = tile(op.ins[0], read)
    # the hardware walks vals from the last to the first: among duplicates the
    # highest column takes the first occurrence
    pos, taken = _match(data, tile(op.ins[1], read), range(7, -1, -1), op.attr("absent"))
    out = [(0, np.where(taken, np.float32(op.attr("imm")), data))]
    if len(op.outs) > 1:
        out.append((1, pos))
    return out


@instruction(family="sort", compute=_match_replace8, cost=input_streaming_cost)
def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """dst = data with the first occurrence of each of the 8 vals of a
    partition replaced by imm; dst_idx (optional, 8 per partition) gets the
    positions replaced. vals are taken from the last to the first, so for a
    value repeated in vals the highest column gets the first occurrence and
    lower columns the following ones (the opposite of nc_find_index8). A value
    not found leaves data as is and gives all ones in dst_idx (an nkicc
    choice: the reference does not say). Compared in fp32. Vector Engine."""
    dst, data, vals = on_chip_tensors({"dst": dst, "data": data, "vals": vals}, "nc_match_replace8")
    same_layout(dst, data, "nc_match_replace8")
    max_dims(vals, 3, "nc_match_replace8 vals")
    same_partitions(vals, data, "nc_match_replace8")
    free_is(vals, 8, "nc_match_replace8 vals")
    imm = scalar(imm, "nc_match_replace8 imm")
    outs = [dst]
    absent = 0xFFFFFFFF
    if dst_idx is not None:
        (dst_idx,) = on_chip_tensors({"dst_idx": dst_idx}, "nc_match_replace8")
        same_partitions(dst_idx, data, "nc_match_replace8")
        free_is(dst_idx, 8, "nc_match_replace8 dst_idx")
        outs.append(dst_idx)
        absent = all_ones(dst_idx.decl.dtype)
    return Emit(outs, [data, vals], {"imm": float(imm), "absent": absent})


# --- topk --------------------------------------------------------------------------


def _topk(op: Op, read):
    """Each group of 16 partitions holds one snake of n values: snake position
    s = 16 * column + (partition within the group)."""
    src = tile(op.ins[0], read)
    n, k = op.attr("n"), op.attr("k")
    vals = np.empty((src.shape[0], k), dtype=np.float32)
    idx = np.empty((src.shape[0], k), dtype=np.int64)
    for g in range(0, src.shape[0], GPSIMD_PARTITIONS):
        snake = src[g:g + GPSIMD_PARTITIONS].T.reshape(-1)[:n]
        # largest first, the lower position first among equal values; then ascending
        best = np.lexsort((np.arange(n), -snake))[:k][::-1]
        vals[g:g + GPSIMD_PARTITIONS] = snake[best]
        idx[g:g + GPSIMD_PARTITIONS] = best
    return [(0, vals), (1, idx)]


def _topk_cost(op: Op, ctx: CostContext) -> float:
    """Documented: 4 * n + K GpSimd cycles per partition (partitions run in parallel)."""
    return ctx.ns(ctx.fixed_cycles(op) + 4 * op.attr("n") + op.attr("k"))


@instruction(family="sort", compute=_topk, engine="pool",
             verify=gpsimd_sbuf_operands, cost=_topk_cost)
def topk(val_dst, idx_dst, src, n, name=None):
    """The K largest of n bf16 values and their positions, GpSimd Engine.
    Each group of 16 partitions of src is one "snake" of n values: value s
    sits in partition s % 16 of the group, column s // 16. Every partition of
    the group gets the group's K largest in ascending order in val_dst (bf16,
    [P, K]) and their snake positions in idx_dst (uint32, [P, K]); K is
    val_dst's free size. Among equal values the lower position is chosen
    first. Rules: 8 <= n < 65536, 1 <= K < 32768, K <= n, src has at least
    ceil(n / 16) columns, P a multiple of 16, everything in SBUF.
    (The reference does not say how a group's result is laid out over its 16
    partitions; nkicc writes it to each of them.)"""
    val_dst, idx_dst, src = on_chip_tensors({"val_dst": val_dst, "idx_dst": idx_dst, "src": src}, "topk")
    for t, what in ((val_dst, "val_dst"), (idx_dst, "idx_dst"), (src, "src")):
        sbuf_only(t, f"topk {what}")
    dtype_in(src, ("bfloat16",), "topk src")
    dtype_in(val_dst, ("bfloat16",), "topk val_dst")
    dtype_in(idx_dst, ("uint32",), "topk idx_dst")
    if len(val_dst.shape) != 2 or tuple(val_dst.shape) != tuple(idx_dst.shape):
        raise NkiccError("E140", f"topk val_dst and idx_dst must both be [P, K]: got {list(val_dst.shape)} and "
                                 f"{list(idx_dst.shape)}")
    same_partitions(val_dst, src, "topk")
    if src.shape[0] % GPSIMD_PARTITIONS:
        raise NkiccError("E110", f"topk src spans {src.shape[0]} partitions, not a multiple of 16", None,
                         "one snake takes 16 partitions: use 16, 32, ... 128")
    n = int_arg(n, "topk n", 8, 65535)
    k = val_dst.shape[1]
    if not 1 <= k < 32768 or k > n:
        raise NkiccError("E130", f"topk K (val_dst's free size) is {k}; it must be in [1, 32768) and at most "
                                 f"n = {n}", None, "size val_dst and idx_dst [P, K] with K <= n")
    if free(src) < -(-n // GPSIMD_PARTITIONS):
        raise NkiccError("E140", f"topk src has {free(src)} columns, a snake of n = {n} needs "
                                 f"{-(-n // GPSIMD_PARTITIONS)}", None, "give src ceil(n / 16) columns or more")
    return Emit([val_dst, idx_dst], [src], {"n": n, "k": k})


# --- nonzero_with_count ------------------------------------------------------------


def _nonzero_with_count(op: Op, read):
    src = tile(op.ins[0], read)
    p_count, t = src.shape
    if len(op.ins) > 1:  # partitions the instruction does not write keep their values
        out = _ints(op.ins[1], read)
    else:
        out = np.zeros((p_count, t + 1), dtype=np.int64)
    for p in range(0, p_count, GPSIMD_PARTITIONS):
        nz = np.flatnonzero(src[p] != 0)
        out[p, :nz.size] = nz + op.attr("index_offset")
        out[p, nz.size:t] = op.attr("padding_val")
        out[p, t] = nz.size
    return [(0, out)]


@instruction(family="sort", compute=_nonzero_with_count, engine="pool",
             verify=gpsimd_sbuf_operands, cost=input_streaming_cost, since=3)
def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """For partitions 0, 16, ..., 112 only (the first of each GpSimd core's
    16; the others of dst are left as they are): dst[p, :N] = the positions of
    the N nonzero elements of src[p] (free axes flattened) plus index_offset,
    dst[p, N:T] = padding_val, dst[p, T] = N, where T is src's free size.
    src: float32 or int32, dst: int32 with T + 1 elements per partition, both
    in SBUF. GpSimd Engine (NeuronCore-v3 and newer)."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "nonzero_with_count")
    sbuf_only(dst, "nonzero_with_count dst")
    sbuf_only(src, "nonzero_with_count src")
    dtype_in(src, ("float32", "int32"), "nonzero_with_count src")
    dtype_in(dst, ("int32",), "nonzero_with_count dst")
    same_partitions(dst, src, "nonzero_with_count")
    if free(dst) != free(src) + 1:
        raise NkiccError("E140", f"nonzero_with_count dst must have one element more per partition than src "
                                 f"({free(src)} + 1), it has {free(dst)}", None, "make dst [P, T + 1]")
    attrs = {"index_offset": int_arg(index_offset, "nonzero_with_count index_offset", INT32_MIN, INT32_MAX),
             "padding_val": int_arg(padding_val, "nonzero_with_count padding_val", INT32_MIN, INT32_MAX)}
    # with more than one partition some are left unmodified: the op reads dst
    ins = [src, dst] if dst.shape[0] > 1 else [src]
    return Emit([dst], ins, attrs)


# --- sequence_bounds ---------------------------------------------------------------


def _sequence_bounds(op: Op, read):
    ids = tile(op.ins[0], read).reshape(-1)
    n = ids.size
    pos = np.arange(n)
    starts = np.ones(n, dtype=bool)
    starts[1:] = ids[1:] != ids[:-1]
    ends = np.ones(n, dtype=bool)
    ends[:-1] = ids[:-1] != ids[1:]
    start = np.maximum.accumulate(np.where(starts, pos, 0))
    end = np.minimum.accumulate(np.where(ends, pos + 1, n)[::-1])[::-1]
    pad = ids == 0
    return [(0, np.stack([np.where(pad, n, start), np.where(pad, -1, end)]).astype(np.float64))]


@instruction(family="sort", compute=_sequence_bounds, engine="pool",
             verify=gpsimd_sbuf_operands)
def sequence_bounds(dst, segment_ids, name=None):
    """For each element i of segment_ids ([1, n]): dst[0, 0, i] = the index
    where its run of equal ids starts and dst[0, 1, i] = the index one past
    where it ends. Id 0 is padding: start n, end -1. dst is [1, 2, n]; both
    float32 or int32, one partition, in SBUF. GpSimd Engine."""
    dst, ids = on_chip_tensors({"dst": dst, "segment_ids": segment_ids}, "sequence_bounds")
    sbuf_only(dst, "sequence_bounds dst")
    sbuf_only(ids, "sequence_bounds segment_ids")
    dtype_in(ids, ("float32", "int32"), "sequence_bounds segment_ids")
    dtype_in(dst, ("float32", "int32"), "sequence_bounds dst")
    for t, what in ((ids, "segment_ids"), (dst, "dst")):
        if t.shape[0] != 1:
            raise NkiccError("E110", f"sequence_bounds {what} spans {t.shape[0]} partitions; it takes exactly 1",
                             None, "pass one row of segment ids, [1, n]")
    if free(dst) != 2 * free(ids):
        raise NkiccError("E140", f"sequence_bounds dst must be [1, 2, {free(ids)}], got {list(dst.shape)}")
    return Emit([dst], [ids])


__all__ = ["max8", "nc_find_index8", "nc_match_replace8", "nonzero_with_count", "sequence_bounds", "topk"]
