"""The program the machine simulator walks, compiled: per-tensor facts (`Tensor`), every access
of every op with what does not depend on loop indices worked out once (`Acc`), and one `Plan` per
op (its engine, costs, waits and accesses; filled in by MachineSimulator._compile_op).

An access is a start offset (affine in the loop indices, plus runtime scalar offsets) and a
pattern of (step, num) pairs. On chip, a pair whose step is a multiple of the row length moves
across partitions, the others inside a partition: the access's box of partitions and bytes, and
whether it fills that box (`Acc.is_dense`), follow from the pairs (hazard checks trust both).
"""
from __future__ import annotations

import functools

import numpy as np

from ..ir import Access, Op, TensorDecl, dtypes
from ..ir.analysis import injective, run_length
from . import oob_skip, semantics


def _nested(pairs) -> tuple[int, list] | None:
    """(lowest value, [(step, num)] by decreasing step, all steps positive) of the values
    sum(i_k * step_k) over the (step, num) pairs, when the pairs that move (a step, more than
    one index) are injective (every step clears the span of the smaller ones): then each value
    comes from one index tuple of those, and their indices walked with the largest step
    outermost give the values in increasing order. None otherwise."""
    live = [(s, n) for s, n in pairs if n > 1 and s]
    if not injective(live):
        return None
    return sum(s * (n - 1) for s, n in live if s < 0), sorted(((abs(s), n) for s, n in live), reverse=True)


def _sums(low: int, pairs) -> np.ndarray:
    """low + sum(i_k * step_k) for every index tuple, the first pair's index outermost."""
    vals = np.full(1, low, dtype=np.int64)
    for step, num in pairs:
        if num > 1 and step:
            vals = (vals[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    return vals


def _combos(pairs) -> np.ndarray:
    """Sorted unique values of sum(i_k * step_k) over the (step, num) pairs."""
    nested = _nested(pairs)
    if nested is None:  # pairs that overlap (a sliding window): sort out the repeats
        return np.unique(_sums(0, pairs))
    return _sums(*nested)


def _dense_pairs(pairs) -> bool | None:
    """Whether the values of the pairs (as _combos) are one run of consecutive integers,
    from the steps alone; None where that needs the values."""
    return _dense_steps(tuple(pairs))


@functools.lru_cache(maxsize=4096)
def _dense_steps(pairs: tuple) -> bool | None:
    nested = _nested(pairs)
    return None if nested is None else run_length(nested[1]) is not None


def _dense(vals: np.ndarray) -> bool:
    return vals.size == 0 or int(vals[-1] - vals[0]) + 1 == vals.size


class Tensor:
    """Per-tensor facts the hot path needs."""
    __slots__ = ("decl", "name", "onchip", "dtype", "item", "P", "F", "size", "address", "key", "is_psum",
                 "footprint", "mask_footprint", "fill")

    def __init__(self, decl: TensorDecl, precise: bool = True, scale: int = 1) -> None:
        self.decl = decl
        self.name = decl.name
        self.onchip = decl.on_chip
        self.dtype = dtypes.storage(decl.dtype, precise)
        # on chip: bytes of one element in the simulator's memory, `scale` per device byte
        # (see MachineSimulator's NKI_PRECISE_FP note); HBM tensors are arrays of their own
        self.item = dtypes.itemsize(decl.dtype) * scale if self.onchip else self.dtype.itemsize
        self.size = decl.size
        self.P = decl.shape[0] if decl.shape else 1
        self.F = max(1, decl.size // self.P) if self.P else 1
        self.address = decl.address * scale if (self.onchip and decl.address is not None) else decl.address
        self.key = decl.buffer if self.onchip else "hbm:" + decl.name
        self.is_psum = decl.buffer == "psum"
        self.footprint = None       # on-chip: (P, F) view of its bytes; HBM: the flat array
        self.mask_footprint = None  # PSUM: (P, F*item) bool view of the written-mask
        self.fill = semantics.poison_value(self.dtype)


@functools.lru_cache(maxsize=16384)
def _geometry(pattern: tuple, stepping: str, onchip: bool, F: int, item: int, partition_bytes: int) -> tuple:
    """What an access's pattern gives on its tensor, whatever the op: (lo_span, hi_span, shape,
    byte strides, (partition pairs, free pairs), part_lo, part_hi, free_lo, free_hi). A program
    repeats a few hundred patterns over its tens of thousands of accesses (and every party of a
    multi-rank run compiles its program's accesses anew)."""
    stepped = pattern if stepping == "all" else pattern[:1] if stepping == "rows" else pattern[1:]
    lo_span = sum(s * (n - 1) for s, n in stepped if s < 0)
    hi_span = sum(s * (n - 1) for s, n in stepped if s > 0)
    part_pairs, free_pairs = [], []
    if onchip:
        strides = []
        for s, n in pattern:
            if n > 1 and s and s % F == 0:
                strides.append((s // F) * partition_bytes)
                part_pairs.append((s // F, n))
            else:
                strides.append(s * item)
                free_pairs.append((s, n))
    else:
        strides = [s * item for s, _ in pattern]
        free_pairs = list(pattern)
    return (lo_span, hi_span, tuple(n for _, n in pattern), tuple(strides), (tuple(part_pairs), tuple(free_pairs)),
            sum(s * (n - 1) for s, n in part_pairs if s < 0), sum(s * (n - 1) for s, n in part_pairs if s > 0),
            sum(s * (n - 1) for s, n in free_pairs if s < 0), sum(s * (n - 1) for s, n in free_pairs if s > 0))


class Acc:
    """One access of one op, with everything precomputed that does not depend
    on loop indices. On chip, a pair whose step is a multiple of the row
    length F moves across partitions; the others move inside a partition."""
    __slots__ = ("access", "t", "const", "terms", "reg", "scalar", "scale", "lo_span", "hi_span", "shape",
                 "strides", "part_lo", "part_hi", "free_lo", "free_hi", "rel", "pairs", "part_rel", "free_rel",
                 "dense", "cur", "count", "vcache", "rcache", "static", "wrecs", "rrecs", "vector")

    def __init__(self, access: Access, t: Tensor, partition_bytes: int) -> None:
        self.access = access
        self.t = t
        self.const = access.offset.const
        self.terms = access.offset.terms
        self.reg = access.scalar.register if access.scalar is not None else None
        self.scalar: Acc | None = None  # the (1-element) access that reads a tensor scalar offset
        self.scale = access.scalar_scale
        self.vector: Acc | None = None  # the index tile of a gather / scatter (its rows replace pair 0's steps)
        pattern = access.pattern
        # a gather's index tile replaces the stepping of pair 0 (rows), an indirect view's pair 1 (columns)
        stepping = "all" if access.vector is None else "rows" if access.vector_group else "columns"
        (self.lo_span, self.hi_span, self.shape, self.strides, self.pairs, self.part_lo, self.part_hi,
         self.free_lo, self.free_hi) = _geometry(pattern, stepping, t.onchip, t.F, t.item, partition_bytes)
        self.count = access.count
        self.rel = None  # fallback: element offsets of the view, shape self.shape
        self.part_rel = self.free_rel = None
        self.dense = True
        self.cur = 0
        self.vcache: dict = {}
        self.rcache: dict = {}  # start -> hazard region (static per start)
        # a start that never changes (and is in bounds): computed once
        self.static = (not self.terms and access.scalar is None and access.vector is None
                       and self.const + self.lo_span >= 0 and self.const + self.hi_span < t.size)
        if self.static:
            self.cur = self.const
        self.wrecs = self.rrecs = None  # hazard records of its memory group (tensors sharing bytes)

    def is_dense(self) -> bool:
        """Whether the access fills the box of its partitions and bytes (every element in it),
        from the steps alone where they say it."""
        dense = [_dense_pairs(pairs) for pairs in self.pairs]
        if None in dense:
            dense = [_dense(vals) for vals in self.sets()]
        return all(dense)

    def sets(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted unique partition offsets and free element offsets, relative to the start."""
        if self.free_rel is None:
            self.part_rel = _combos(self.pairs[0])
            self.free_rel = _combos(self.pairs[1])
        return self.part_rel, self.free_rel


class Plan:
    """One op, compiled."""
    __slots__ = ("op", "id", "opcode", "engine", "queue", "ekey", "tid", "waits", "cost", "accs", "by_id",
                 "outs", "scalars", "hz_reads", "hz_writes", "count", "loc_str", "loop_vars", "dma_dir",
                 "dma_bytes", "fabric_ns", "spill", "mode", "dyn_accs", "is_matmul", "rotate", "collective", "is_print",
                 "tokens", "hidden", "wait_plain", "wait_rot", "oob_skip", "chain_reads", "chain_writes",
                 "chain_hidden")

    def __init__(self, op: Op) -> None:
        self.op = op
        self.opcode = op.opcode
        self.count = 0
        self.loc_str = str(op.loc) if op.loc is not None else "?"
        self.mode = op.attr("accumulate")
        self.oob_skip = oob_skip.applies(op)  # a skipping DMA with a runtime scalar offset (oob_skip.py)


__all__ = ["Acc", "Plan", "Tensor"]
