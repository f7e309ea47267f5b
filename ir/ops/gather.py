"""Data movement inside SBUF without DMAs: gathers on the GpSimd Engine
(`local_gather` within each core's 16 partitions, `nc_n_gather` within a
partition) and the Vector Engine's cross-partition `nc_stream_shuffle`.
They copy values without converting them."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Op
from .checks import free, on_chip_tensors, scalar
from .core import Emit, instruction
from .tile_rules import (
    GPSIMD_PARTITIONS, QUADRANT, dtype_in, free_is, gpsimd_sbuf_operands, int_arg, same_dtype, same_partitions,
    sbuf_only, start_partition,
)

LOCAL_GATHER_ELEMS = (1, 2, 4, 8, 16, 32)
LOCAL_GATHER_MAX_INDICES = 4096  # indices one GpSimd core gathers with
SHUFFLE_KEEP = 255                # a shuffle_mask entry that leaves its partition as it is


def _rows(x, read) -> np.ndarray:
    """(partition, free) view in the storage dtype: gathers copy bits, they do not convert."""
    v = np.asarray(read(x))
    return v.reshape(v.shape[0], -1)


def _out_of_range(op: Op, what: str, bad: int, limit: int) -> NkiccError:
    return NkiccError("E170", f"{op.opcode} {what} {bad} at run time; the source has {limit} elements per "
                              "partition (out-of-range indices are undefined on the hardware)", op.loc,
                      "keep every index inside the source tile")


# --- local_gather ------------------------------------------------------------------


def _local_gather(op: Op, read):
    src = _rows(op.ins[0], read)
    index = _rows(op.ins[1], read).astype(np.int64)
    k, valid = op.attr("num_elem_per_idx"), op.attr("num_valid_indices")
    out = np.empty((src.shape[0], valid * k), dtype=src.dtype)
    for g in range(0, src.shape[0], GPSIMD_PARTITIONS):
        # a core's indices: its 16 partitions read partition-fastest, the first `valid`
        flat = index[g:g + GPSIMD_PARTITIONS].T.reshape(-1)[:valid]
        at = (flat[:, None] + np.arange(k)).reshape(-1)
        if at.size and (at.max() >= src.shape[1] or at.min() < 0):
            raise _out_of_range(op, "reads element", int(at.max()), src.shape[1])
        out[g:g + GPSIMD_PARTITIONS] = src[g:g + GPSIMD_PARTITIONS][:, at]
    return [(0, out)]


@instruction(family="gather", compute=_local_gather, engine="pool",
             verify=gpsimd_sbuf_operands)
def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Gather within each GpSimd core's 16 partitions (GpSimd Engine). For the
    core of partitions g..g+15, its indices are index[g:g+16] read partition
    by partition first (index[g, 0], index[g+1, 0], ..., index[g+15, 0],
    index[g, 1], ...), the first num_valid_indices of them (default: all);
    every partition p of the core gets, for each index j in turn,
    num_elem_per_idx contiguous elements of its own row of src_buffer
    (free axes flattened) from element j. index: uint16; dst: src_buffer's
    dtype (no conversion) with num_valid_indices * num_elem_per_idx elements
    per partition; partitions a multiple of 16; num_elem_per_idx one of 1, 2,
    4, 8, 16, 32; at most 4096 indices per core; all in SBUF. An index past
    the row is an error at run time (undefined on the hardware)."""
    dst, src, index = on_chip_tensors({"dst": dst, "src_buffer": src_buffer, "index": index}, "local_gather")
    for t, what in ((dst, "dst"), (src, "src_buffer"), (index, "index")):
        sbuf_only(t, f"local_gather {what}")
    dtype_in(index, ("uint16",), "local_gather index")
    same_dtype(dst, src, "local_gather dst and src_buffer")
    same_partitions(src, index, "local_gather src_buffer and index")
    same_partitions(dst, src, "local_gather dst and src_buffer")
    if src.shape[0] % GPSIMD_PARTITIONS:
        raise NkiccError("E110", f"local_gather spans {src.shape[0]} partitions, not a multiple of 16", None,
                         "each GpSimd core gathers within 16 partitions: use 16, 32, ... 128")
    k = int_arg(num_elem_per_idx, "local_gather num_elem_per_idx")
    if k not in LOCAL_GATHER_ELEMS:
        raise NkiccError("E103", f"local_gather num_elem_per_idx is {k}; it must be one of {list(LOCAL_GATHER_ELEMS)}")
    per_core = GPSIMD_PARTITIONS * free(index)
    valid = per_core if num_valid_indices is None else \
        int_arg(num_valid_indices, "local_gather num_valid_indices", 1, per_core)
    if valid > LOCAL_GATHER_MAX_INDICES:
        raise NkiccError("E130", f"local_gather uses {valid} indices per GpSimd core; at most "
                                 f"{LOCAL_GATHER_MAX_INDICES}", None, "split the gather or pass num_valid_indices")
    free_is(dst, valid * k, "local_gather dst (num_valid_indices * num_elem_per_idx)")
    return Emit([dst], [src, index], {"num_elem_per_idx": k, "num_valid_indices": valid})


# --- nc_n_gather -------------------------------------------------------------------


def _n_gather(op: Op, read):
    data = _rows(op.ins[0], read)
    idx = _rows(op.ins[1], read).astype(np.int64)
    if idx.size and (idx.max() >= data.shape[1] or idx.min() < 0):
        raise _out_of_range(op, "index", int(idx.max() if idx.max() >= data.shape[1] else idx.min()),
                            data.shape[1])
    return [(0, np.take_along_axis(data, idx, axis=1))]


@instruction(family="gather", compute=_n_gather, engine="pool",
             verify=gpsimd_sbuf_operands)
def nc_n_gather(dst, data, indices, name=None):
    """dst[p, j] = data[p, indices[p, j]] with data's free axes flattened:
    a gather inside each partition (GpSimd Engine). indices: uint32, each in
    [0, data's elements per partition) (checked at run time); dst: data's
    dtype, as many elements per partition as indices; all in SBUF."""
    dst, data, indices = on_chip_tensors({"dst": dst, "data": data, "indices": indices}, "nc_n_gather")
    for t, what in ((dst, "dst"), (data, "data"), (indices, "indices")):
        sbuf_only(t, f"nc_n_gather {what}")
    dtype_in(indices, ("uint32",), "nc_n_gather indices")
    same_dtype(dst, data, "nc_n_gather dst and data")
    same_partitions(dst, data, "nc_n_gather dst and data")
    same_partitions(indices, data, "nc_n_gather indices and data")
    if free(dst) != free(indices):
        raise NkiccError("E140", f"nc_n_gather dst has {free(dst)} elements per partition, indices "
                                 f"{free(indices)}", None, "one output element per index")
    return Emit([dst], [data, indices])


# --- nc_stream_shuffle -------------------------------------------------------------


def _stream_shuffle(op: Op, read):
    src = _rows(op.ins[0], read)
    mask = op.attr("mask")
    n = op.attr("dst_partitions")
    if len(op.ins) > 1:  # a 255 entry keeps the destination partition's values
        out = _rows(op.ins[1], read).copy()
    else:
        out = np.empty((n, src.shape[1]), dtype=src.dtype)
    for i in range(n):
        m = mask[i % QUADRANT]
        if m != SHUFFLE_KEEP:
            out[i] = src[i - i % QUADRANT + m]
    return [(0, out)]


def _shuffle_start(t, active: int, what: str) -> None:
    start = start_partition(t)
    allowed = (0,) if active > 64 else (0, 64) if active > 32 else (0, 32, 64, 96)
    if start is not None and start not in allowed:
        raise NkiccError("E111", f"nc_stream_shuffle {what} starts at partition {start}; with {active} active "
                                 f"partitions it must start at {' or '.join(map(str, allowed))}")


@instruction(family="gather", compute=_stream_shuffle)
def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """Move whole partitions within each quadrant of 32 (Vector Engine): in
    every quadrant q, dst partition 32q + i gets src partition
    32q + shuffle_mask[i] (partitions counted from each view's start);
    shuffle_mask[i] = 255 leaves dst partition i as it is. shuffle_mask: 32
    integers in [0, 32) or 255. dst and src: same dtype and elements per
    partition, SBUF or PSUM, may be the same tile. With A = 32 * ceil(max
    partitions / 32) active partitions the views start at 0 (A of 96 or 128),
    0 or 64 (A = 64) or a multiple of 32 (A = 32)."""
    dst, src = on_chip_tensors({"dst": dst, "src": src}, "nc_stream_shuffle")
    same_dtype(dst, src, "nc_stream_shuffle dst and src")
    if free(dst) != free(src):
        raise NkiccError("E140", f"nc_stream_shuffle dst has {free(dst)} elements per partition, src {free(src)}",
                         None, "give both the same number of elements per partition")
    try:
        mask = tuple(shuffle_mask)
    except TypeError:
        raise NkiccError("E103", f"nc_stream_shuffle shuffle_mask must be a list of {QUADRANT} integers, got "
                                 f"{type(shuffle_mask).__name__}") from None
    if len(mask) != QUADRANT:
        raise NkiccError("E103", f"nc_stream_shuffle shuffle_mask has {len(mask)} entries; it takes {QUADRANT}")
    mask = tuple(int(scalar(m, "nc_stream_shuffle shuffle_mask entry")) for m in mask)
    bad = [m for m in mask if not (0 <= m < QUADRANT or m == SHUFFLE_KEEP)]
    if bad:
        raise NkiccError("E103", f"nc_stream_shuffle shuffle_mask entry {bad[0]}: each must be a partition of "
                                 f"the quadrant, 0 to {QUADRANT - 1}, or {SHUFFLE_KEEP} (keep)")
    for i in range(dst.shape[0]):
        m = mask[i % QUADRANT]
        if m != SHUFFLE_KEEP and i - i % QUADRANT + m >= src.shape[0]:
            raise NkiccError("E103", f"nc_stream_shuffle dst partition {i} reads src partition "
                                     f"{i - i % QUADRANT + m}, but src spans {src.shape[0]}", None,
                             "point every used mask entry at a partition src has")
    active = -(-max(dst.shape[0], src.shape[0]) // QUADRANT) * QUADRANT
    _shuffle_start(dst, active, "dst")
    _shuffle_start(src, active, "src")
    ins = [src, dst] if SHUFFLE_KEEP in mask[:dst.shape[0]] else [src]
    return Emit([dst], ins, {"mask": mask, "dst_partitions": dst.shape[0]})
