"""affine_range independence.

NKI lets the compiler run the iterations of an `affine_range` loop in any
order, or overlapped: no iteration may touch what another iteration writes.
Two forms of reuse are allowed, because they are reductions the compiler
keeps in order: an accumulator at the same elements in every iteration
(`acc` read and written at loop-invariant addresses), and matmul accumulation
into PSUM. A dependence whose writes leave every shared element as it is in
any order (ir/order_free.py: a self-copy, two memsets of one value) is a
warning, W190, not an error: the vendor's compiler builds such loops, and
nkicc, which runs every rolled loop in program order, gives the result any
order would. `sequential_range`, `static_range` and `range` allow any
loop-carried dependence.

`check_affine_loops(kernel, affine_vars)` looks at every rolled loop whose
variable is in `affine_vars` (the tracer records which loops came from
`affine_range`). For each tensor allocated outside the loop, each pair of
accesses in the body with at least one write, at least one of them at
addresses that move with the loop index, it searches for two different
iterations that touch the same element. Only a concrete witness is reported
(E190, unless ir/order_free.py finds the pair cannot change the result),
so a kernel is never rejected on a guess; the search is bounded (a few million
element comparisons per loop) and gives up silently beyond that.

The element set of an access in iteration v is S(v) = S(0) + c*v (c: the
coefficient of v in its offset), where S(0) ranges over the pattern and over
the loops nested in the body. S(0) is kept as a sorted set of contiguous runs,
so the test for one iteration distance is a vectorised binary search.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from . import ops
from .analysis import reads
from .errors import NkiccError
from .nodes import Access, Alloc, Block, Kernel, Loop, Op, TensorDecl
from .order_free import order_free

MAX_RUNS = 1 << 20          # run starts per access kept in memory
MAX_WORK = 20_000_000       # run-start comparisons per loop before giving up
MAX_OUTER_SAMPLES = 2


@dataclass(frozen=True)
class _Use:
    op: Op
    access: Access
    write: bool
    reduction: bool  # the destination of an accumulating nc_matmul into PSUM
    order: int


@dataclass
class _Runs:
    starts: np.ndarray  # sorted unique int64 run starts
    length: int
    # where the starts are base + sum of step * j (0 <= j < num) over steps each past the span of the
    # smaller ones (the usual tile access): (base, ((step, num), ...) smallest step first), else None
    grid: tuple | None = None


def check_affine_loops(kernel: Kernel, affine_vars) -> list[NkiccError]:
    """Raise E190 for the first loop-carried dependence found in an
    affine_range loop of `kernel` that can change the result; return a W190
    warning for each loop whose dependences cannot (ir/order_free.py: such a
    loop runs in program order, as every rolled loop does in nkicc)."""
    warnings: list[NkiccError] = []
    if not affine_vars:
        return warnings
    decls = kernel.tensor_map()

    def walk(block: Block, outer: dict[str, int], dynamic: frozenset) -> None:
        for s in block.stmts:
            if isinstance(s, Loop):
                if s.var in affine_vars and s.trip >= 2:
                    found = _check_loop(s, outer, decls, dynamic)
                    if found is not None:
                        warnings.append(found)
                walk(s.body, {**outer, s.var: s.trip}, dynamic if s.kind == "static" else dynamic | {s.var})

    walk(kernel.body, {}, frozenset())
    return warnings


def _body_facts(body: Block) -> tuple[set[str], dict[str, int], list[_Use]]:
    local: set[str] = set()
    inner: dict[str, int] = {}
    uses: list[_Use] = []

    def walk(block: Block) -> None:
        for s in block.stmts:
            if isinstance(s, Alloc):
                local.add(s.tensor)
            elif isinstance(s, Loop):
                inner[s.var] = s.trip
                walk(s.body)
            else:
                acc = ops.of(s).accumulates(s)
                outs = set(s.outs)
                for a in s.outs:
                    uses.append(_Use(s, a, True, acc, len(uses)))
                for a in reads(s):
                    uses.append(_Use(s, a, False, acc and a in outs, len(uses)))

    walk(body)
    return local, inner, uses


def _check_loop(loop: Loop, outer: Mapping[str, int], decls: Mapping[str, TensorDecl],
                dynamic: frozenset = frozenset()) -> NkiccError | None:
    local, inner, uses = _body_facts(loop.body)
    by_tensor: dict[str, list[_Use]] = {}
    for u in uses:
        if u.access.tensor in local or u.access.scalar is not None or u.access.vector is not None:
            continue  # private to an iteration, or a runtime offset: nothing to prove
        by_tensor.setdefault(u.access.tensor, []).append(u)
    v = loop.var
    pairs = []
    for tensor, us in by_tensor.items():
        writes = [u for u in us if u.write]
        for w in writes:
            for x in us:
                if x.write and x.order < w.order:
                    continue  # each pair of writes once
                cw, cx = w.access.offset.coeff(v), x.access.offset.coeff(v)
                if cw == 0 and cx == 0:
                    continue  # the same elements every iteration: an accumulator
                if w.reduction and x.reduction:
                    continue  # matmul accumulation into PSUM
                pairs.append((x.write, x.order, w, x))
    if not pairs:
        return None
    pairs.sort(key=lambda p: (p[0], p[1]))  # reads first, in program order
    budget = [MAX_WORK]
    cache: dict = {}
    order_free_pair = None
    for _, _, w, x in pairs:
        d = _witness(w.access, x.access, v, loop.trip, inner, outer, budget, cache)
        if d is not None:
            if not order_free(loop, (w.op, w.access), (x.op, x.access), x.write, outer, dynamic):
                raise _error(loop, w, x, d, decls)
            order_free_pair = order_free_pair or (w, x)
        if budget[0] <= 0:
            break
    return _warning(loop, *order_free_pair, decls) if order_free_pair else None


def _error(loop: Loop, w: _Use, x: _Use, d: int, decls: Mapping[str, TensorDecl]) -> NkiccError:
    where = f"line {loop.loc.line}" if loop.loc else "its line"
    other = f"k{d:+d}" if d else "k"
    wline = f"line {w.op.loc.line}" if w.op.loc else "another line"
    decl = decls.get(x.access.tensor)
    name = decl.described() if decl is not None else x.access.tensor
    if x.write:
        what = (f"{x.op.opcode} in iteration k writes elements of {name} that the {w.op.opcode} at {wline} "
                f"also writes in iteration {other}")
    else:
        when = "an earlier" if d < 0 else "a later"
        what = (f"{x.op.opcode} in iteration k reads elements of {name} that the {w.op.opcode} at {wline} "
                f"writes in {when} iteration ({other})")
    return NkiccError("E190", f"loop-carried dependence in the affine_range loop at {where}: {what}", x.op.loc,
                      "affine_range iterations must be independent; use nl.sequential_range for a loop that "
                      "carries values from one iteration to the next")


def _warning(loop: Loop, w: _Use, x: _Use, decls: Mapping[str, TensorDecl]) -> NkiccError:
    where = f"line {loop.loc.line}" if loop.loc else "its line"
    wline = f"line {w.op.loc.line}" if w.op.loc else "another line"
    xline = f"line {x.op.loc.line}" if x.op.loc else "another line"
    decl = decls.get(x.access.tensor)
    name = decl.described() if decl is not None else x.access.tensor
    how = (f"both store {w.op.attr('value')!r}" if x.write and w.op.opcode == x.op.opcode == "memset" else
           "the write puts back the value each element holds")
    return NkiccError("W190", f"iterations of the affine_range loop at {where} share elements of {name}: the "
                              f"{w.op.opcode} at {wline} writes in one iteration what the {x.op.opcode} at {xline} "
                              f"{'writes' if x.write else 'reads'} in another; {how}, so no order changes the "
                              "result, and nkicc runs the loop in program order, as nl.sequential_range would",
                      x.op.loc, "use nl.sequential_range to say so, or keep each iteration to elements of its own")


def _free_pairs(a: Access, v: str, inner: Mapping[str, int], outer_values: Mapping[str, int]) -> tuple[int, list]:
    """The access at v = 0 as base + sum(step * j), j in [0, num)."""
    base = a.offset.const
    pairs = list(a.pattern)
    for var, c in a.offset.terms:
        if var == v:
            continue
        if var in inner:
            pairs.append((c, inner[var]))
        else:
            base += c * outer_values.get(var, 0)
    return base, pairs


def _runs(base: int, pairs: list) -> _Runs | None:
    norm = []
    for step, num in pairs:
        if num <= 1 or step == 0:
            continue
        if step < 0:
            base += step * (num - 1)
            step = -step
        norm.append((step, num))
    norm.sort()
    length = 1
    while norm and norm[0][0] == length:
        length *= norm[0][1]
        norm.pop(0)
    count = 1
    for _, num in norm:
        count *= num
    if count > MAX_RUNS:
        return None
    starts = np.array([base], dtype=np.int64)
    for step, num in reversed(norm):  # the largest step outermost: nested strides come out sorted
        starts = (starts[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    if starts.size > 1 and not (starts[1:] > starts[:-1]).all():  # (else sorted and distinct already)
        return _Runs(np.unique(starts), length)
    span, nested = length - 1, True
    for step, num in norm:
        nested = nested and step > span
        span += step * (num - 1)
    return _Runs(starts, length, (base, tuple(norm)) if nested else None)


def _hits(w: _Runs, x: _Runs, t: int) -> bool:
    """Do the runs of w shifted by t overlap the runs of x?"""
    if w.grid is not None and x.grid is not None and w.grid[1] == x.grid[1] and w.length == x.length:
        return _grid_hits(x.grid[0] - w.grid[0] - t, w.grid[1], w.length)  # (no run enumerated)
    lo = w.starts + t - (x.length - 1)
    idx = np.searchsorted(x.starts, lo, side="left")
    ok = idx < x.starts.size
    if not ok.any():
        return False
    found = x.starts[np.minimum(idx, x.starts.size - 1)]
    return bool(np.any(ok & (found <= w.starts + t + (w.length - 1))))


def _grid_hits(diff: int, norm: tuple, length: int) -> bool:
    """Whether two copies of one nested grid of runs (runs of `length` at sum of step * j), the
    second `diff` elements after the first, share an element: whether diff = sum of step * d with
    |d| < num, give or take length - 1. Each step is past the span of the smaller ones, so at each
    level (largest first) d is one of the two nearest multiples: at most two branches a level."""
    levels = list(norm)

    def fits(rest: int, k: int) -> bool:
        if k < 0:
            return abs(rest) <= length - 1
        step, num = levels[k]
        q = rest // step
        return any(abs(d) < num and fits(rest - d * step, k - 1) for d in (q, q + 1))
    return fits(diff, len(levels) - 1)


def _outer_samples(w: Access, x: Access, outer: Mapping[str, int]) -> list[dict[str, int]]:
    differ = [var for var in outer if w.offset.coeff(var) != x.offset.coeff(var)]
    if not differ:
        return [{}]  # the outer indices shift both accesses alike
    return [{var: 0 for var in outer}, {var: n - 1 for var, n in outer.items()}][:MAX_OUTER_SAMPLES]


def _witness(w: Access, x: Access, v: str, trip: int, inner, outer, budget, cache: dict) -> int | None:
    """An iteration distance d != 0 such that the write w in iteration k + d
    and the access x in iteration k touch the same element; None if none is
    found within the budget."""
    cw, cx = w.offset.coeff(v), x.offset.coeff(v)
    for values in _outer_samples(w, x, outer):
        key = tuple(sorted(values.items()))
        for a in (w, x):
            if (a, key) not in cache:
                cache[(a, key)] = _runs(*_free_pairs(a, v, inner, values))
        wr, xr = cache[(w, key)], cache[(x, key)]
        if wr is None or xr is None:
            continue
        # shifts t = cw*v1 - cx*v2 that the bounding intervals allow
        lo = int(xr.starts[0]) - (int(wr.starts[-1]) + wr.length - 1)
        hi = int(xr.starts[-1]) + xr.length - 1 - int(wr.starts[0])
        for d, t in _shifts(cw, cx, trip, lo, hi):
            budget[0] -= wr.starts.size
            if budget[0] <= 0:
                return None
            if _hits(wr, xr, t):
                return d
    return None


def carried(w: Access, x: Access, v: str, trip: int, inner: Mapping[str, int], fixed: Mapping[str, int],
            budget: list, cache: dict | None = None) -> bool:
    """Whether the write w in one iteration of loop v and the access x in
    another can touch the same element, the loops in `inner` taking any values
    and the other indices the values in `fixed`. Conservative, for the machine
    simulator's batching (simulator/batched.py): True also when the question
    is too big to answer within the budget (a one-element list, decremented).
    `cache`: a dict kept across calls with the same `fixed`."""
    cache = {} if cache is None else cache
    runs = []
    for a in (w, x):
        key = (a, v, tuple(sorted((u, n) for u, n in inner.items() if a.offset.coeff(u))))
        if key not in cache:
            cache[key] = _runs(*_free_pairs(a, v, inner, fixed))
        runs.append(cache[key])
    wr, xr = runs
    if wr is None or xr is None:
        return True
    cw, cx = w.offset.coeff(v), x.offset.coeff(v)
    if cw == 0 and cx == 0:  # the same elements in every iteration
        return trip > 1 and _hits(wr, xr, 0)
    lo = int(xr.starts[0]) - (int(wr.starts[-1]) + wr.length - 1)
    hi = int(xr.starts[-1]) + xr.length - 1 - int(wr.starts[0])
    for _, t in _shifts(cw, cx, trip, lo, hi):
        budget[0] -= wr.starts.size
        if budget[0] <= 0 or _hits(wr, xr, t):
            return True
    return False


def _shifts(cw: int, cx: int, trip: int, lo: int, hi: int):
    """(d, t) with t = cw*v1 - cx*v2 in [lo, hi] for some v1 != v2 in [0, trip),
    d = v1 - v2; nearest iterations first where that is cheap to order."""
    if cw == cx:  # the common case: t = c*d
        c = cw
        a, b = (lo, hi) if c > 0 else (-hi, -lo)
        k = abs(c)
        dmin, dmax = max(-(trip - 1), -((-a) // k)), min(trip - 1, b // k)  # ceil(a/k), floor(b/k)
        for n in range(1, trip):
            if n > max(abs(dmin), abs(dmax)):
                return
            for d in (-n, n):
                if dmin <= d <= dmax:
                    yield d, c * d
        return
    if cx == 0:  # the other access is at the same elements every iteration
        for v1 in range(trip):
            t = cw * v1
            if lo <= t <= hi:
                yield (-1 if v1 + 1 < trip else 1), t
        return
    if cw == 0:
        for v2 in range(trip):
            t = -cx * v2
            if lo <= t <= hi:
                yield (-1 if v2 >= 1 else 1), t
        return
    for v1 in range(trip):  # two different strides
        first, last = sorted(((cw * v1 - lo) / cx, (cw * v1 - hi) / cx))
        for v2 in range(max(0, int(np.ceil(first))), min(trip - 1, int(np.floor(last))) + 1):
            if v2 != v1:
                yield v1 - v2, cw * v1 - cx * v2
