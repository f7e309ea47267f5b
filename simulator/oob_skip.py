"""oob_mode.skip for a DMA whose runtime scalar offset puts elements out of range.

The reference documents oob_mode.skip as skipping every operation that involves
an out-of-bounds index of an indirect (runtime-offset) access; scalar indirection
is one (NKI's "Scalar indirection ... a single dynamic offset"). The NKI Library's
indexed_flatten moves the rows of padding experts to offset -1,000,000 blocks and
skips them so; bwmm_shard_on_block skips the weights of unused experts. Elements
whose source or destination index is out of range are not moved; the others
are, as without the option. Both simulators use it (gathers and scatters through
a vector_offset have their own row rule: reference.gather_index)."""
from __future__ import annotations

import numpy as np

from ..ir import Access, Op


def applies(op: Op) -> bool:
    """A dma_copy with oob_mode.skip and a runtime scalar offset on its source or destination."""
    return op.attr("oob") == "skip" and any(a.scalar is not None for a in (op.outs[0], op.ins[0])
                                            if isinstance(a, Access))


def flat_index(a: Access, start: int) -> np.ndarray:
    """The flat element index of every element of the access, shaped like it."""
    idx = np.full(tuple(n for _, n in a.pattern), start, dtype=np.int64)
    for axis, (s, n) in enumerate(a.pattern):
        shape = [1] * len(a.pattern)
        shape[axis] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return idx


def moved(src_idx: np.ndarray, src_size: int, dst_idx: np.ndarray, dst_size: int) -> np.ndarray | None:
    """Which elements (in order, flat) move: both their indices in range. None when all do."""
    ok = ((src_idx >= 0) & (src_idx < src_size)).reshape(-1) & ((dst_idx >= 0) & (dst_idx < dst_size)).reshape(-1)
    return None if ok.all() else ok
