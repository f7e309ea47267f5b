"""Shorter live ranges by reordering straight-line code, for the allocator.

A loop whose body appends tiles to Python lists is traced concretely, so the
rolled IR holds its iterations as one straight-line block, in the order the
source wrote them: typically every load of a block first, then every compute
step. The allocator sees each loaded tile live from its load to its last use,
and all of them at once. Statements of such a block that touch disjoint memory
are independent (the iterations of `affine_range` loops are), so they may run
in another order: this module reorders a block demand-first, so that a tile
is allocated and loaded when a compute step needs it and the compute steps
that finish tiles off (their last uses) go before those that start new ones.

It is called by alloc only when the kernel does not fit as written (an order
that fits is the kernel author's and stays), and alloc keeps the new order
only where it lowers the peak. Dependences are exact per tensor within one
iteration of the enclosing loops. A static loop moves as one statement that
touches every tensor its body touches, whole (a rolled inner loop, as in
`for i in range(n): for h in nl.affine_range(k): acc[i] += ...`, is one step of
such a block); dynamic loops and control instructions, in a loop or not, are
barriers that nothing moves across. Reordering is quadratic in the length of a
block, so blocks longer than MAX_BLOCK are left as they are; hoisting last uses
costs a pass over the block per drain, so it takes blocks up to MAX_HOIST_BLOCK
(bwmm_shard_on_I at I 6144 sums 48 accumulators and drains them in one block of
2,800 statements).
"""
from __future__ import annotations

import dataclasses

from nkicc.ir import Access, Alloc, Block, Loop, Op, ops
from nkicc.ir.analysis import reads

MAX_BLOCK = 2048
MAX_HOIST_BLOCK = 16384


@dataclasses.dataclass
class Reordered:
    """One block that was reordered: where, and how many statements."""
    loc: str | None
    statements: int
    moved: int


def reorder(kernel, local: set[str], window: int = 0) -> tuple[object, list[Reordered]]:
    """The kernel with every long enough straight-line block reordered
    demand-first. `local`: tensors that may die inside the block that
    allocates them (all their uses are in that block). `window`: how many
    compute steps ahead of its first use a load is issued, so that loads
    overlap compute (each step ahead keeps one more tile live)."""
    decls = kernel.tensor_map()
    return _segments(kernel, lambda segment: _reorder_segment(segment, decls, local, window))


def hoist_last_uses(kernel, local: set[str], buffer: str) -> tuple[object, list[Reordered]]:
    """The kernel with each last use of a `buffer` tile (a PSUM accumulator's drain) moved up
    to just after what it depends on, and nothing else moved but the allocation of what it
    writes: the smallest change that ends such a tile's life where its value is complete
    (bwmm_shard_on_I sums all its accumulators, then drains them all). `local` as for reorder."""
    decls = kernel.tensor_map()
    tiles = {t for t in local if decls[t].buffer == buffer}
    return _segments(kernel, lambda segment: _hoist_segment(segment, decls, tiles))


def _segments(kernel, rewrite) -> tuple[object, list[Reordered]]:
    """`rewrite` applied to every straight-line segment of every block (between barriers)."""
    done: list[Reordered] = []

    def walk(block: Block, loc) -> Block:
        stmts = [dataclasses.replace(s, body=walk(s.body, s.loc)) if isinstance(s, Loop) else s
                 for s in block.stmts]
        out: list = []
        segment: list = []
        for s in stmts + [None]:
            if s is None or _barrier(s):
                if segment:
                    new = rewrite(segment)
                    moved = sum(a is not b for a, b in zip(new, segment))
                    if moved:
                        where = loc or next((x.loc for x in segment if isinstance(x, Op) and x.loc), None)
                        done.append(Reordered(str(where) if where else None, len(segment), moved))
                    out.extend(new)
                    segment = []
                if s is not None:
                    out.append(s)
            else:
                segment.append(s)
        return Block(tuple(out))

    return dataclasses.replace(kernel, body=walk(kernel.body, None)), done


def _barrier(s) -> bool:
    if isinstance(s, Loop):
        return s.kind != "static" or any(isinstance(x, Op) and _barrier(x) for x in s.body.walk())
    if isinstance(s, Alloc):
        return False
    d = ops.of(s)
    # random-number instructions name their state register as an operand, but the
    # order of draws is what a kernel's results depend on: keep them in place
    return d.control or d.collective is not None or d.family in ("control", "collectives", "debug", "rng")


def _reads_writes(s) -> tuple[tuple[Access, ...], tuple[Access, ...]]:
    """What a statement reads and writes: an op's operands, or everything a loop's
    body does to tensors allocated outside it."""
    if isinstance(s, Op):
        return reads(s), s.outs
    inner = {x.tensor for x in s.body.walk() if isinstance(x, Alloc)}
    body = [x for x in s.body.walk() if isinstance(x, Op)]
    return (tuple(a for x in body for a in reads(x) if a.tensor not in inner),
            tuple(a for x in body for a in x.outs if a.tensor not in inner))


def _accesses(s, decls):
    """(tensor, key, lo, hi, is_write) per memory range a statement touches.
    `key` is the access's loop-variable terms: two accesses with the same terms
    are compared by their constant ranges (exact within one iteration of the
    enclosing loops); different terms or a runtime offset mean the whole tensor,
    as does every access of a loop."""
    if isinstance(s, Alloc):
        return [(s.tensor, None, 0, decls[s.tensor].size - 1, True)]
    out = []
    for accesses, is_write in zip(_reads_writes(s), (False, True)):
        for a in accesses:
            if isinstance(s, Loop):
                out.append((a.tensor, None, 0, decls[a.tensor].size - 1, is_write))
            else:
                out.append((a.tensor, *_range(a, decls), is_write))
    return out


def _range(a: Access, decls):
    if a.scalar is not None:
        return None, 0, decls[a.tensor].size - 1
    lo = hi = a.offset.const
    for step, num in a.pattern:
        span = step * (num - 1)
        if span >= 0:
            hi += span
        else:
            lo += span
    return a.offset.terms, lo, hi


def _dependences(segment, decls):
    """preds[j]: earlier statements j must follow (read/write, write/read,
    write/write on overlapping memory of the same tensor)."""
    history: dict[str, list] = {}
    preds: list[set[int]] = []
    for j, s in enumerate(segment):
        deps = set()
        acc = _accesses(s, decls)
        for tensor, key, lo, hi, w in acc:
            for i, key2, lo2, hi2, w2 in history.get(tensor, ()):
                if (w or w2) and (key is None or key2 is None or key != key2 or (lo <= hi2 and lo2 <= hi)):
                    deps.add(i)
        for tensor, key, lo, hi, w in acc:
            history.setdefault(tensor, []).append((j, key, lo, hi, w))
        preds.append(deps)
    return preds


def _reorder_segment(segment, decls, local, window):
    n = len(segment)
    if n > MAX_BLOCK or sum(isinstance(s, Alloc) for s in segment) < 2:
        return segment
    preds = _dependences(segment, decls)
    succs: list[list[int]] = [[] for _ in range(n)]
    for j, d in enumerate(preds):
        for i in d:
            succs[i].append(j)
    missing = [len(d) for d in preds]
    allocated_here = {s.tensor for s in segment if isinstance(s, Alloc)}
    dying = allocated_here & local
    uses_left: dict[str, int] = {}
    touched: list[set[str]] = []
    reads_here: list[set[str]] = []  # tensors of this segment a statement reads
    for s in segment:
        r, w = ((), ()) if isinstance(s, Alloc) else _reads_writes(s)
        names = {a.tensor for a in r + w} & dying
        touched.append(names)
        reads_here.append({a.tensor for a in r} & allocated_here)
        for t in names:
            uses_left[t] = uses_left.get(t, 0) + 1
    done = [False] * n
    order: list[int] = []
    live: set[str] = set()

    def consumes(j) -> bool:
        return bool(reads_here[j] & live)

    def frees(j) -> bool:
        return any(uses_left[t] == 1 for t in touched[j])

    def take(j) -> None:
        done[j] = True
        order.append(j)
        if isinstance(segment[j], Alloc):
            live.add(segment[j].tensor)
        for t in touched[j]:
            uses_left[t] -= 1
        for u in succs[j]:
            missing[u] -= 1

    pending = list(range(n))
    while pending:
        pending = [j for j in pending if not done[j]]
        if not pending:
            break
        ready_ops = [j for j in pending if missing[j] == 0 and not isinstance(segment[j], Alloc)]
        if ready_ops:
            # finish tiles off first, then whatever is ready, in source order
            take(next((j for j in ready_ops if frees(j)), ready_ops[0]))
            continue
        # only allocations are ready: allocate for the step closest to running
        # (fewest unmet dependences), preferring one that finishes a tile off,
        # then one that consumes tiles already there over one that starts new ones
        target = min((j for j in pending if not isinstance(segment[j], Alloc)),
                     key=lambda j: (missing[j], not frees(j), not consumes(j), j), default=None)
        if target is None:
            for j in pending:
                take(j)  # allocations nothing uses
            break
        j = target
        while missing[j]:
            j = min(i for i in preds[j] if not done[i])
        take(j)
    if window:
        order = _prefetch(order, segment, preds, reads_here, window)
    return [segment[j] for j in order]


def _hoist_segment(segment, decls, tiles):
    if len(segment) > MAX_HOIST_BLOCK:
        return segment
    preds = _dependences(segment, decls)
    rw = [((), ()) if isinstance(s, Alloc) else _reads_writes(s) for s in segment]
    last_use = {a.tensor: j for j, (r, w) in enumerate(rw) for a in r + w if a.tensor in tiles}
    order = list(range(len(segment)))
    for j in sorted(set(last_use.values())):
        if not {a.tensor for a in rw[j][0]} & tiles:
            continue  # a last use that only writes the tile drains nothing
        where = {x: p for p, x in enumerate(order)}
        # the allocations it needs come along; everything else it depends on stays where it is
        allocs = {i for i in preds[j] if isinstance(segment[i], Alloc) and not preds[i]}
        floor = max((where[i] + 1 for i in preds[j] - allocs), default=0)
        if floor >= where[j]:
            continue
        moving = sorted((i for i in allocs if where[i] >= floor), key=where.get) + [j]
        order = order[:floor] + moving + [x for x in order[floor:] if x not in moving]
    return [segment[j] for j in order]


def _prefetch(order, segment, preds, reads_here, window):
    """Move each load (an allocation and the DMA that fills it from outside
    the block, placed together by the demand-first order) up to `window`
    compute steps earlier, never above a statement it depends on."""
    out: list[int] = []
    compute_at: list[int] = []  # positions in `out` of compute steps
    k = 0
    while k < len(order):
        j = order[k]
        nxt = order[k + 1] if k + 1 < len(order) else None
        if (isinstance(segment[j], Alloc) and nxt is not None and isinstance(segment[nxt], Op)
                and segment[nxt].opcode == "dma_copy" and not reads_here[nxt]
                and {a.tensor for a in segment[nxt].outs} == {segment[j].tensor}):
            where = {x: p for p, x in enumerate(out)}
            floor = max((where[i] + 1 for i in preds[j] | preds[nxt] if i in where), default=0)
            # `window` compute steps back, or to the first one; loads before any compute keep their order
            back = compute_at[-window] if len(compute_at) >= window else (compute_at[0] if compute_at else len(out))
            at = max(floor, back)
            out[at:at] = [j, nxt]
            compute_at = [p + 2 if p >= at else p for p in compute_at]
            k += 2
            continue
        if not isinstance(segment[j], Alloc):
            compute_at.append(len(out))
        out.append(j)
        k += 1
    return out
