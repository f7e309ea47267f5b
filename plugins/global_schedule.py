"""global-schedule: list scheduling over the unrolled instruction stream.

Reorders each straight-line block so that independent instructions on
different engines overlap: an instruction may move past another only when
they touch disjoint elements (no read/write, write/read or write/write
overlap; an allocation counts as a write of its whole tensor). Among ready
instructions the one that can start earliest goes first, by each instruction's
estimated cost. Expensive by design (it sees every instruction of the unrolled
program), so it is opt-in and runs under the compile budget; it expects the
unroll pass to have run, and leaves blocks that still contain static loops'
bodies as they are.
"""
import dataclasses
import heapq

from nkicc.ir import Alloc, Block, Loop, Op, count_instructions, ops
from nkicc.ir.ops.costs import cost_ns
from nkicc.ir.analysis import engine_of, extent, reads, writes
from nkicc.pass_api import Pass, hookimpl

_CHECK_EVERY = 1024


def _cost(op: Op, decls, ctx) -> float:
    """The instruction's estimated time, from its definition's cost rule."""
    return cost_ns(op, engine_of(op, decls), decls, ctx.target, ctx.target.costs)


def _schedule(stmts, trips, decls, ctx, progress):
    n = len(stmts)
    deps: list[set[int]] = [set() for _ in range(n)]
    history: dict[str, list] = {}  # tensor -> [(index, lo, hi, is_write)]
    for j, s in enumerate(stmts):
        if isinstance(s, Alloc):
            accesses = [(s.tensor, 0, decls[s.tensor].size - 1, True)]
        elif isinstance(s, Loop) or ops.of(s).control:
            accesses = [(t, 0, decls[t].size - 1, True) for t in decls]  # a barrier
        else:
            accesses = [(a.tensor, *extent(a, trips, decls[a.tensor]), False) for a in reads(s)]
            accesses += [(a.tensor, *extent(a, trips, decls[a.tensor]), True) for a in writes(s)]
        for tensor, lo, hi, is_write in accesses:
            for i, lo2, hi2, w2 in history.get(tensor, ()):
                if (is_write or w2) and lo <= hi2 and lo2 <= hi:
                    deps[j].add(i)
        for tensor, lo, hi, is_write in accesses:
            history.setdefault(tensor, []).append((j, lo, hi, is_write))
        progress()
    users: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(d) for d in deps]
    for j, d in enumerate(deps):
        for i in d:
            users[i].append(j)
    finish = [0] * n
    engine_free: dict[str, int] = {}
    ready = [(0, j) for j in range(n) if waiting[j] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, j = heapq.heappop(ready)
        s = stmts[j]
        engine = engine_of(s, decls) if isinstance(s, Op) else "seq"
        start = max([engine_free.get(engine, 0)] + [finish[i] for i in deps[j]])
        finish[j] = start + (_cost(s, decls, ctx) if isinstance(s, Op) else 0)
        engine_free[engine] = finish[j]
        order.append(s)
        for u in users[j]:
            waiting[u] -= 1
            if waiting[u] == 0:
                earliest = max(finish[i] for i in deps[u])
                heapq.heappush(ready, (earliest, u))
    return order


def global_schedule(kernel, ctx):
    decls = kernel.tensor_map()
    total = count_instructions(kernel).rolled
    done = 0

    def progress():
        nonlocal done
        done += 1
        if done % _CHECK_EVERY == 0:
            ctx.progress(done, total)

    def walk(block: Block, trips) -> Block:
        stmts = [dataclasses.replace(s, body=walk(s.body, {**trips, s.var: s.trip})) if isinstance(s, Loop) else s
                 for s in block.stmts]
        return Block(tuple(_schedule(stmts, trips, decls, ctx, progress)))

    return dataclasses.replace(kernel, body=walk(kernel.body, {}))


@hookimpl
def nkicc_passes():
    return [Pass("global-schedule", global_schedule, "list scheduling over the unrolled stream (expensive; opt-in)",
                 default=False, scope="kernel", cost="unrolled", after=("unroll",))]
