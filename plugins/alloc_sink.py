"""Allocations moved to the first use of their tensor, for the allocator.

A tensor lives from its `Alloc` to its last use. Kernels often allocate ahead
of use: the NKI Library's attention_cte makes every PSUM tile of the kernel
up front, in Python lists, and each is used in one loop of its own; as
written they would all be live at once. Nothing a tensor holds before it is
first touched is defined, so its Alloc can move down to just before the
statement (or loop) of its block that first touches it: the same program,
with live ranges that start where the tensor is first needed, so tiles used
by independent loops share bytes (PSUM banks included). The simulators
poison new memory and clear PSUM's accumulate=None state at the Alloc, so
they keep seeing each tensor fresh where it starts.

Only on-chip tensors move. One stays where it is when it has more than one Alloc, or is touched
anywhere but after its Alloc in the block that allocates it (a dynamic
loop's allocation reused outside it)."""
from __future__ import annotations

import collections
import dataclasses

from nkicc.ir import Alloc, Block, Loop, Op
from nkicc.ir.analysis import tensors_touched


def _touched(stmt) -> collections.Counter:
    """Tensor -> how many ops of `stmt` (a loop: of its whole body) touch it."""
    ops = [stmt] if isinstance(stmt, Op) else [s for s in stmt.body.walk() if isinstance(s, Op)] \
        if isinstance(stmt, Loop) else []
    counts: collections.Counter = collections.Counter()
    for op in ops:
        counts.update(tensors_touched(op))
    return counts


def sink_allocs(kernel):
    """(kernel with each movable Alloc just before the first statement of its block
    that touches its tensor, names of the tensors whose Alloc moved)."""
    decls = kernel.tensor_map()
    allocs = collections.Counter(s.tensor for s in kernel.body.walk() if isinstance(s, Alloc))
    uses = _touched(Loop("", 1, body=kernel.body))
    moved: list[str] = []

    def block(b: Block) -> Block:
        stmts = [dataclasses.replace(s, body=block(s.body)) if isinstance(s, Loop) else s for s in b.stmts]
        # tensor -> [(statement index, how many of its ops touch the tensor)], in order: one pass
        # (a scan of the statements after each Alloc was quadratic: 26 s on attention_cte at 16 K)
        where: dict[str, list] = collections.defaultdict(list)
        for j, s in enumerate(stmts):
            for t, n in _touched(s).items():
                where[t].append((j, n))
        before: dict[int, list] = collections.defaultdict(list)  # statement index -> Allocs to put before it
        keep = []
        for i, s in enumerate(stmts):
            if isinstance(s, Alloc) and allocs[s.tensor] == 1 and decls[s.tensor].on_chip:
                t = s.tensor
                after = [(j, n) for j, n in where.get(t, ()) if j > i]
                later = sum(n for _, n in after)
                first = after[0][0] if after else None
                if first is not None and first > i + 1 and later == uses[t]:
                    before[first].append(s)
                    moved.append(t)
                    continue
            keep.append((i, s))
        out = []
        kept = dict(keep)
        for i in range(len(stmts)):
            out.extend(before.get(i, ()))
            if i in kept:
                out.append(kept[i])
        return Block(tuple(out))

    body = block(kernel.body)
    return (dataclasses.replace(kernel, body=body) if moved else kernel), moved
