"""schedule: an engine for every instruction, and the semaphores between
engines, computed on the rolled IR.

Each op gets an `id`, an `engine` (pe, dve, act, pool, or dma with a `queue`)
and `wait`: the ids of ops on other engines or queues it must not start
before (the most recent execution of each). An engine runs its own stream in
program order, so dependences on the same engine need no semaphore.

A DMA whose executions write disjoint memory (a load into a[:, k, :] for each
k) gets `rotate`: each execution takes the next queue, so that the iterations
of a rolled loop spread over all queues as an unrolled stream would. Such a
DMA is ordered by semaphores only, also against DMAs that happen to share its
queue. A DMA whose executions overlap keeps one queue, which orders them.

A wait on a rotating DMA stands for its executions that touched the
waiter's memory only (the simulator narrows it so, simulator/pending.py),
so it implies nothing else: every dependence through such a DMA is named
in full (_Tracker).

Dependences come from the memory each op touches, by physical bytes for SBUF
and PSUM (two tensors the allocator gave the same bytes conflict) and by
element range for HBM. A loop body is visited twice, so that an op also sees
what the previous iteration's later ops left (loop back-edges): the work is
linear in the rolled IR times two per loop level, never in the trip counts.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools

from nkicc.ir import Access, Alloc, Block, Loop, Op
from nkicc.ir.analysis import engine_of, extent, injective, reads, run_length, runtime_guard, writes
from nkicc.ir.dtypes import itemsize
from nkicc.pass_api import Pass, hookimpl

_CHECK_EVERY = 1024


def _resources(op: Op, decls, trips):
    """(resource, lo, hi, is_write, box, exact) for every memory range the op touches: lo..hi
    the bytes of the tensor's rows on chip, the elements it can touch in HBM; box (first
    partition, last, lo, hi) bounds what it touches, exactly so (`exact`) for a dense box
    an op that runs once touches whole."""
    once = all(t == 1 for t in trips.values())
    out = []
    for accesses, is_write in ((reads(op), False), (writes(op), True)):
        for a in accesses:
            d = decls[a.tensor]
            if d.on_chip and d.address is not None:
                item = itemsize(d.dtype)
                row = item
                for dim in d.shape[1:]:
                    row *= dim
                exact = _dense_box(a, row // item, item, d.address) if once else None
                box = exact or (0, (d.shape[0] if d.shape else 1) - 1, d.address, d.address + row - 1)
                out.append((d.buffer, d.address, d.address + row - 1, is_write, box, exact is not None))
            else:
                lo, hi = extent(a, trips, d)
                exact = once and a.dtype is None and _dense_box(a, d.size, 1, 0) == (0, 0, lo, hi)
                out.append((a.tensor, lo, hi, is_write, (0, 0, lo, hi), exact))
    return out


def _dense_box(a: Access, F: int, item: int, base: int):
    """(first partition, last, first byte, last byte) of a static access that touches exactly
    that box of a tensor with F elements per partition row (starting at byte `base`), or None."""
    if a.scalar is not None or a.vector is not None or a.dtype is not None or a.offset.terms:
        return None
    parts, free = [], []
    for step, num in a.pattern:
        if num > 1:
            (parts if step % F == 0 else free).append((step // F if step % F == 0 else step, num))
    rows, cols = run_length(parts), run_length(free)
    p0, f0 = divmod(a.offset.const, F)
    if rows is None or cols is None or f0 + cols > F:
        return None
    return p0, p0 + rows - 1, base + f0 * item, base + (f0 + cols) * item - 1


class _Ranges:
    """One resource's recent accesses, grouped by the range they touch (an on-chip access's
    range is its tensor's bytes, so thousands of accesses share a few dozen ranges): an op
    tests each range once for overlap, not each access. (Testing each access made scheduling
    quadratic in the accesses kept: 3,700 per op, 5 s of the library's attention block.)
    Per range: its writes and its reads, each in arrival order."""

    def __init__(self) -> None:
        self.groups: dict[tuple[int, int], tuple[dict, dict]] = {}  # (lo, hi) -> (writes, reads)

    def add(self, entry: tuple) -> None:
        group = self.groups.get((entry[1], entry[2]))
        if group is None:
            group = self.groups[(entry[1], entry[2])] = ({}, {})
        group[0 if entry[3] else 1][entry] = None  # (a loop body is visited twice: kept once)

    def overlapping(self, lo: int, hi: int) -> list:
        """The (range, (writes, reads)) groups that meet lo..hi."""
        return [(r, g) for r, g in self.groups.items() if r[0] <= hi and lo <= r[1]]

    def drop_covered(self, lo: int, hi: int, dropped) -> None:
        """Forget the entries of the ranges inside lo..hi for which `dropped(entry)` holds."""
        for (rlo, rhi), group in self.overlapping(lo, hi):
            if lo <= rlo and rhi <= hi:
                for kind in group:
                    for e in [e for e in kind if dropped(e)]:
                        del kind[e]
                if not group[0] and not group[1]:
                    del self.groups[(rlo, rhi)]

    def entries(self) -> list:
        return [e for writes, reads in self.groups.values() for e in (*writes, *reads)]


class _Tracker:
    """Recent accesses per resource; a new access depends on every earlier
    overlapping one where either side writes. An access that a later write
    covers is dropped, since a wait on the later write implies it.

    Except where a wait is narrowed: a wait on a rotating DMA covers only its
    executions that touched the waiter's memory (the per-tile semaphores of
    an unrolled program; the machine simulator times it so), which implies
    neither its other executions nor what they waited for. Where the writer
    or the access is a rotating DMA, the access is dropped only when the
    writer runs once and touches all of a box that holds the access: then
    whoever touches the access's memory touches the writer's, whose one
    execution waited for every execution of the access (and a wait on it
    implies them). Elsewhere it stays: the dependence is named in full."""

    def __init__(self, rotating: set[int]) -> None:
        self.recent: dict[str, _Ranges] = collections.defaultdict(_Ranges)
        self.rotating = rotating

    def visit(self, op_id: int, resources) -> set[int]:
        deps = set()
        for res, lo, hi, is_write, _, _ in resources:
            ranges = self.recent.get(res)
            if ranges is not None:
                for _, (writes, reads) in ranges.overlapping(lo, hi):
                    deps.update(e[0] for e in writes)
                    if is_write:
                        deps.update(e[0] for e in reads)
        deps.discard(op_id)
        narrowed = op_id in self.rotating
        for res, lo, hi, is_write, box, exact in resources:
            ranges = self.recent[res]
            if is_write:  # what this write covers, unless a narrowed wait would not imply it
                ranges.drop_covered(lo, hi, lambda e: e[0] != op_id and not (
                    (narrowed or e[0] in self.rotating) and not (exact and _within(e[4], box))))
            ranges.add((op_id, lo, hi, is_write, box))
        return deps

    def snapshot(self) -> dict:
        return {res: ranges.entries() for res, ranges in self.recent.items()}

    def merge(self, other: dict) -> None:
        for res, entries in other.items():
            for e in entries:
                self.recent[res].add(e)


def _within(inner: tuple, outer: tuple) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1] and outer[2] <= inner[2] and inner[3] <= outer[3]


def _alloc_depths(block: Block, depth: int = 0, out=None) -> dict[str, int]:
    """Loop depth of each tensor's allocation (absent: allocated with the kernel)."""
    out = {} if out is None else out
    for s in block.stmts:
        if isinstance(s, Alloc):
            out.setdefault(s.tensor, depth)
        elif isinstance(s, Loop):
            _alloc_depths(s.body, depth + 1, out)
    return out


def _executions_disjoint(a: Access, loops) -> bool:
    """Whether every execution of the access over the given loops touches
    elements no other execution touches (the loops as extra pattern pairs)."""
    return a.scalar is None and injective(a.pattern + tuple((a.offset.coeff(lp.var), lp.trip) for lp in loops))


def schedule(kernel, ctx):
    decls = kernel.tensor_map()
    ids = itertools.count()
    dma_ops = itertools.count()
    queues = ctx.target.dma_queues
    depths = _alloc_depths(kernel.body)

    def number(block: Block, chain: tuple) -> Block:
        out = []
        for s in block.stmts:
            if isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=number(s.body, chain + (s,))))
            elif isinstance(s, Op):
                engine = engine_of(s, decls)
                attrs = [(k, v) for k, v in s.attrs if k not in ("id", "engine", "queue", "rotate", "wait")]
                attrs += [("id", next(ids)), ("engine", engine)]
                if engine == "dma":
                    attrs.append(("queue", next(dma_ops) % queues))
                    dst = s.outs[0]
                    srcs = [a for a in s.ins if isinstance(a, Access)]
                    # an execution must neither overwrite nor read what another one writes
                    if (queues > 1 and all(a.tensor != dst.tensor and a.scalar is None for a in srcs)
                            and _executions_disjoint(dst, chain[depths.get(dst.tensor, 0):])):
                        attrs.append(("rotate", True))
                out.append(Op(s.opcode, s.outs, s.ins, tuple(attrs), s.loc))
            else:
                out.append(s)
        return Block(tuple(out))

    kernel = dataclasses.replace(kernel, body=number(kernel.body, ()))
    lane = {}
    rotating: set[int] = set()
    for s in kernel.body.walk():
        if isinstance(s, Op):
            if s.attr("rotate"):  # shares no in-order stream with anything: a lane of its own
                lane[s.attr("id")] = ("dma", f"op{s.attr('id')}")
                rotating.add(s.attr("id"))
            else:
                lane[s.attr("id")] = (s.attr("engine"), s.attr("queue"))
    waits: dict[int, set[int]] = {i: set() for i in lane}
    tracker = _Tracker(rotating)
    visited = [0]

    def visit(block: Block, trips) -> None:
        for s in block.stmts:
            if isinstance(s, Loop):
                inner = {**trips, s.var: s.trip}
                # a runtime loop may run no iteration: what comes after also
                # orders after what came before it
                before = tracker.snapshot() if runtime_guard(s) is not None else None
                for _ in range(2 if s.trip > 1 else 1):
                    visit(s.body, inner)
                if before is not None:
                    tracker.merge(before)
            elif isinstance(s, Alloc):
                d = decls[s.tensor]
                if d.on_chip and d.address is not None:
                    # a new tensor in these bytes: later users order after earlier ones anyway
                    continue
            else:
                op_id = s.attr("id")
                for dep in tracker.visit(op_id, _resources(s, decls, trips)):
                    if lane[dep] != lane[op_id]:
                        waits[op_id].add(dep)
                visited[0] += 1
                if visited[0] % _CHECK_EVERY == 0:
                    ctx.progress(visited[0], 0)

    visit(kernel.body, {})

    def attach(block: Block) -> Block:
        out = []
        for s in block.stmts:
            if isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=attach(s.body)))
            elif isinstance(s, Op):
                out.append(Op(s.opcode, s.outs, s.ins, s.attrs + (("wait", tuple(sorted(waits[s.attr("id")]))),),
                              s.loc))
            else:
                out.append(s)
        return Block(tuple(out))

    kernel = dataclasses.replace(kernel, body=attach(kernel.body))
    ctx.note("semaphores", sum(len(w) for w in waits.values()))
    ctx.note("rotating_dmas", len(rotating))
    ctx.note("instructions_per_engine", _per_engine(lane))
    return kernel


def _per_engine(lane) -> dict:
    counts: dict[str, int] = {}
    for engine, _ in lane.values():
        counts[engine] = counts.get(engine, 0) + 1
    return counts


@hookimpl
def nkicc_passes():
    return [Pass("schedule", schedule, "engine per instruction, dependences and semaphores (rolled, with back-edges)",
                 required=True, scope="kernel", version="4", after=("alloc",))]
