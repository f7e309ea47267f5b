"""Loop nests run as whole-array operations in the machine simulator.

A rolled loop nest whose iterations the IR lets run op by op - every op of the
body for all iterations at once, in program order - is executed that way: one
strided view per access with a leading axis per loop (a gather), one batched
call of the op's `batched` rule (ir/ops: the definition of the instruction),
one store (a scatter). That is legal when no element is touched by two
iterations in an order the batched execution would swap:

- tiles allocated inside the nest are private to their iteration: each gets a
  typed array with a leading axis per enclosing loop of the nest, so the reuse
  of one address by every iteration is no dependence;
- for every other tensor, every pair of accesses (one a write) in two ops is
  tested for each loop enclosing both (ir.loopdeps.carried, exact over the
  concrete offsets, conservative when too big): touching the same element in
  two different iterations of such a loop forbids batching, except for an
  accumulation (a PSUM matmul with accumulate, or dst = dst + x) along loops
  its destination does not move with: those are summed over the loop axes
  (floating-point sums in another order; float32 destinations only);
- tiles that share bytes must both be private and live in disjoint stretches
  of the body (the allocator reuses addresses only so); everything else
  falls back to per-iteration execution, which also reports out-of-bounds
  accesses (E170) and reads past a tile (W101 semantics).

The verdict is cached per loop and per value of the outer indices that change
the relative position of two accesses (usually none: once per loop). Timing
and hazard checks (E171) then run per iteration without moving data
(`MachineSimulator._walk_timing`): times do not depend on values.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from ..ir import Access, Alloc, Loop, Op, ops
from ..ir.analysis import reads, runtime_guard
from ..ir.loopdeps import carried
from . import semantics
from ._blas import default_blas
from .reference import ReferenceMachine

_accumulate = ReferenceMachine._accumulate
CHECK_BUDGET = 200_000_000      # run-start comparisons per legality check (seconds at most, once per loop)
MAX_PRIVATE_BYTES = 512 << 20     # private tile copies of one nest
MAX_VALUES_BYTES = 256 << 20      # one op's batched results
# BLAS threads for a matmul of at least this many flops per GEMM: below it a multi-threaded OpenBLAS
# lost 10x on this shared 2-vCPU machine (stacked 30 MFLOP GEMMs of mm2 --scale 8: 62 s against 3.9 s)
THREADED_GEMM_FLOP = 1 << 30


@dataclass
class _OpItem:
    plan: object                    # machine._Plan
    vars: tuple                     # loops of the nest around it, outermost first
    order: int                      # position in the nest's body, depth first
    reduce: tuple = ()              # loop axes (indices into vars) its destination accumulates over
    accum: tuple = ()               # its accesses that are a sum's destination (dst += x), if it is one
    feeds: "_OpItem | None" = None  # a matmul whose only use is this op's sum: computed inside it
    fused: bool = False             # a matmul computed inside the sum it feeds
    rule: object = None             # the OpDef's Batched


@dataclass
class Nest:
    """Static facts of one loop nest that may run batched."""
    label: str
    trips: dict                     # nest loop var -> trip count
    items: list                     # _OpItem, depth first
    private: dict                   # tensor name -> nest loops around its Alloc
    uses: dict                      # tensor name -> [(item, access, write)]
    relevant: tuple                 # outer indices the legality depends on
    verdicts: dict = field(default_factory=dict)
    fresh: set = field(default_factory=set)  # private tiles that need no poison
    dead: set = field(default_factory=set)   # private tiles only a fused matmul writes: never materialised
    batched: int = 0                # entries run batched


def plan(sim, loop: Loop, outer: tuple, label: str) -> Nest | None:
    """The nest rooted at `loop`, or None when it can never run batched."""
    plans = sim._plan_of
    trips: dict = {}
    items: list = []
    private: dict = {}

    fresh: set = set()  # private tiles their first op overwrites whole: no poison needed

    def walk(stmts, vars_):
        for i, s in enumerate(stmts):
            if isinstance(s, Alloc):
                private[s.tensor] = vars_
                first = sim._first_use(stmts[i + 1:], s.tensor)
                if isinstance(first, Op) and sim._overwrites(first, s.tensor):
                    fresh.add(s.tensor)
            elif isinstance(s, Loop):
                if runtime_guard(s) is not None:
                    return False
                trips[s.var] = s.trip
                if walk(s.body.stmts, vars_ + (s.var,)) is False:
                    return False
            elif isinstance(s, Op):
                p = plans.get(id(s))
                rule = ops.of(s).batched
                if p is None or rule is None or p.collective is not None or p.is_print:
                    return False
                if any(isinstance(a, Access) and a.scalar is not None for a in s.ins + s.outs):
                    return False  # runtime offsets: per iteration
                items.append(_OpItem(p, vars_, len(items), rule=rule))
        return True

    trips[loop.var] = loop.trip
    if walk(loop.body.stmts, (loop.var,)) is False or not items:
        return None
    tensors = sim.tensors
    uses: dict = {}
    for it in items:
        op = it.plan.op
        dst = op.outs[0]
        t = tensors[dst.tensor]
        if it.rule.reduces(op) and t.dtype == np.float32:
            mine = private.get(dst.tensor, ())
            it.reduce = tuple(i for i, v in enumerate(it.vars) if v not in mine and dst.offset.coeff(v) == 0)
            it.accum = (dst,)
        ins = [a for a in op.ins if isinstance(a, Access)]
        if len(ins) > 1 and op.opcode != "dma_copy" and op.opcode != "nc_matmul":
            # stacking iterations along partitions needs operands of one partition count
            if len({(a.shape[0] if a.shape else 1) for a in ins + list(op.outs)}) > 1:
                return None
        for a in reads(op):
            uses.setdefault(a.tensor, []).append((it, a, False))
        for a in op.outs:
            uses.setdefault(a.tensor, []).append((it, a, True))
    # sizes: private copies and per-op results must stay small
    total = 0
    for name, vars_ in private.items():
        t = tensors[name]
        total += int(np.prod([trips[v] for v in vars_], dtype=np.int64)) * t.P * t.F * t.dtype.itemsize
    if total > MAX_PRIVATE_BYTES:
        return None
    for it in items:
        points = int(np.prod([trips[v] for v in it.vars], dtype=np.int64))
        count = max([a.count for a in it.plan.op.ins if isinstance(a, Access)] + [it.plan.op.outs[0].count])
        if points * count * 4 > MAX_VALUES_BYTES:
            return None
    # tiles sharing bytes: both private, used in disjoint stretches of the body
    span = {}
    for name, us in uses.items():
        orders = [it.order for it, _, _ in us]
        span[name] = (min(orders), max(orders))
    onchip = sorted((tensors[n] for n in uses if tensors[n].onchip), key=lambda t: (t.key, t.address))
    for i, a in enumerate(onchip):
        for b in onchip[i + 1:]:
            if b.key != a.key or b.address >= a.address + a.F * a.item:
                break
            if a.name not in private or b.name not in private:
                return None
            sa, sb = span[a.name], span[b.name]
            if not (sa[1] < sb[0] or sb[1] < sa[0]):
                return None
    relevant = set()
    for name, us in uses.items():
        for v in outer:
            if len({a.offset.coeff(v) for _, a, _ in us}) > 1:
                relevant.add(v)
    dead = _fuse(items, uses, private, tensors)
    return Nest(label, trips, items, private, uses, tuple(sorted(relevant)), fresh=fresh, dead=dead)


def _fuse(items, uses, private, tensors) -> set:
    """matmul into a private PSUM tile, then dst += that tile summed over loops:
    the sum of the products is one matmul whose contraction runs over those
    loops too (K * trips), instead of one small matmul per iteration and a sum.
    Only when the tile has no other use and nothing between the two ops writes
    the matmul's operands. The tile's bytes are not written (it is dead after
    the sum: the nest leaves its bytes as they were). Returns those tiles."""
    dead = set()
    for add in items:
        if not add.accum or add.plan.is_matmul:
            continue
        op = add.plan.op
        terms = [a for a in op.ins if isinstance(a, Access) and a != op.outs[0]]
        if len(terms) != 1 or terms[0].tensor not in private:
            continue
        us = uses[terms[0].tensor]
        mm = us[0][0]
        if (len(us) != 2 or us[0][1] != terms[0] or not us[0][2] or us[1][0] is not add or not mm.rule.sums
                or mm.plan.is_matmul or mm.vars != add.vars
                or tensors[terms[0].tensor].dtype != np.float32):
            continue
        read = {a.tensor for a in mm.plan.op.ins if isinstance(a, Access)}
        if any(it.order > mm.order and it.order < add.order and w and a.tensor in read
               for name in read for it, a, w in uses.get(name, ())):
            continue
        add.feeds, mm.fused = mm, True
        dead.add(terms[0].tensor)
    return dead


def _exempt(w, x, v) -> bool:
    """Reordered sums: an accumulation along loop v (the op's destination with
    itself or with the input it adds to), or two ops that both add into the
    same elements."""
    (iw, aw, _), (ix, ax, _) = w, x
    if iw is ix:
        return v in [iw.vars[i] for i in iw.reduce] and ax == aw
    # the same kind of sum: PSUM matmul accumulation (where the first write may overwrite: then
    # whichever comes first) or an add; mixed, a poisoned first add would be skipped or not
    return aw in iw.accum and ax in ix.accum and iw.plan.is_matmul == ix.plan.is_matmul


def legal(nest: Nest, env: dict) -> bool:
    key = tuple(env[v] for v in nest.relevant)
    verdict = nest.verdicts.get(key)
    if verdict is None:
        verdict = nest.verdicts[key] = _legal(nest, env)
    return verdict


def _legal(nest: Nest, env: dict) -> bool:
    budget = [CHECK_BUDGET]
    cache: dict = {}
    trips = nest.trips
    for name, us in nest.uses.items():
        mine = nest.private.get(name, ())
        for i, w in enumerate(us):
            if not w[2]:
                continue
            for j, x in enumerate(us):
                if x[2] and j < i:
                    continue  # each pair of writes once
                (iw, aw, _), (ix, ax, _) = w, x
                if any(aw.offset.coeff(v) != ax.offset.coeff(v) for v in mine):
                    return False  # private copies addressed differently: not worth proving
                common = [v for v in iw.vars if v in ix.vars and v not in mine]
                around = {v for v in iw.vars + ix.vars if v not in mine}
                fixed = {**env, **{v: 0 for v in mine}}
                for v in common:
                    if _exempt(w, x, v):
                        continue
                    inner = {u: trips[u] for u in around if u != v}
                    if carried(aw, ax, v, trips[v], inner, fixed, budget, cache):
                        return False
    return True


class _Views:
    """Strided views of one entry of a nest: machine memory for shared
    tensors, private arrays for the nest's own tiles."""

    def __init__(self, sim, nest: Nest, env: dict):
        self.sim, self.nest, self.env = sim, nest, env
        self.priv: dict = {}
        for name, vars_ in nest.private.items():
            if name in nest.dead or name not in nest.uses:
                continue
            t = sim.tensors[name]
            shape = tuple(nest.trips[v] for v in vars_) + (t.P, t.F)
            data = np.empty(shape, dtype=t.dtype) if name in nest.fresh else np.full(shape, t.fill, dtype=t.dtype)
            mask = np.zeros(shape, dtype=np.bool_) if t.is_psum else None
            self.priv[name] = (data, mask, vars_)

    def view(self, item: _OpItem, a: Access, lead: tuple):
        """(data, PSUM written-mask or None) of access a over the loops `lead`, or None if it
        wraps rows or leaves its tensor (per-iteration execution handles those)."""
        sim, trips = self.sim, self.nest.trips
        t = sim.tensors[a.tensor]
        e = a.offset.const + sum(c * self.env[v] for v, c in a.offset.terms if v not in trips)
        dims = [(a.offset.coeff(v), trips[v]) for v in lead] + list(a.pattern)
        shape = tuple(n for _, n in dims)
        if not t.onchip:
            lo = e + sum(s * (n - 1) for s, n in dims if s < 0)
            hi = e + sum(s * (n - 1) for s, n in dims if s > 0)
            if lo < 0 or hi >= t.size:
                return None
            return np.ndarray(shape, t.dtype, sim._mv[t.key], e * t.item, tuple(s * t.item for s, _ in dims)), None
        priv = self.priv.get(t.name)
        F = t.F
        item = t.dtype.itemsize if priv is not None else t.item  # private copies are dense typed arrays
        pb = F * item if priv is not None else sim._pb(t)
        strides, plo, phi, flo, fhi = [], 0, 0, 0, 0
        for s, n in dims:
            if n > 1 and s and s % F == 0:
                strides.append((s // F) * pb)
                plo, phi = plo + min(0, (s // F) * (n - 1)), phi + max(0, (s // F) * (n - 1))
            else:
                strides.append(s * item)
                flo, fhi = flo + min(0, s * (n - 1)), fhi + max(0, s * (n - 1))
        p0, f0 = divmod(e, F)
        if p0 + plo < 0 or p0 + phi >= t.P or f0 + flo < 0 or f0 + fhi >= F:
            return None
        if priv is None:
            off = t.address + p0 * pb + f0 * item
            data = np.ndarray(shape, t.dtype, sim._mv[t.key], off, tuple(strides))
            mask = np.ndarray(shape, np.bool_, sim._mask_mv, off, tuple(strides)) if t.is_psum else None
            return data, mask
        arr, marr, mine = priv
        for k, v in enumerate(lead):  # a loop around the tile's Alloc picks the private copy
            if v in mine:
                strides[k] += arr.strides[mine.index(v)]
        off = p0 * pb + f0 * item
        data = np.ndarray(shape, t.dtype, arr.view(np.uint8), off, tuple(strides))
        if marr is None:
            return data, None
        mstrides = tuple(s // item for s in strides)  # the mask: one byte per element
        return data, np.ndarray(shape, np.bool_, marr, off // item, mstrides)


def run(sim, nest: Nest) -> bool:
    """Execute one entry of the nest batched; False (nothing done) when it
    has to run per iteration."""
    env = sim.env
    if not legal(nest, env):
        return False
    views = _Views(sim, nest, env)
    plan_ = []
    for it in nest.items:  # every view first: nothing is written unless all exist
        op = it.plan.op
        got = {}
        if it.fused:
            for a in op.ins:
                v = views.view(it, a, it.vars) if isinstance(a, Access) else None
                if isinstance(a, Access) and v is None:
                    return False
                got[id(a)] = v[0] if v is not None else None
            plan_.append((it, got, ()))
            continue
        for a in op.ins:
            if isinstance(a, Access) and a.tensor in nest.dead:
                continue  # the fused matmul's product: computed in place of the read
            if isinstance(a, Access) and id(a) not in got:
                v = views.view(it, a, it.vars)
                if v is None:
                    return False
                got[id(a)] = v[0]
        outs = []
        keep = tuple(v for i, v in enumerate(it.vars) if i not in it.reduce)
        for a in op.outs:
            v = views.view(it, a, keep)
            if v is None:
                return False
            outs.append(v)
        plan_.append((it, got, outs))
    _execute(sim, nest, plan_)
    _write_back(sim, nest, views)
    nest.batched += 1
    return True


def _execute(sim, nest: Nest, plan_: list) -> None:
    done = {}
    for it, got, outs in plan_:
        p = it.plan
        points = int(np.prod([nest.trips[v] for v in it.vars], dtype=np.int64))
        p.count += points
        sim.executed += points
        if it.fused:
            done[id(it)] = got
            continue
        read = lambda a: got[id(a)]
        if it.feeds is not None:  # the matmul's products, summed over the loops this op sums over
            mm = it.feeds
            mm_got = done[id(mm)]
            with _threads(mm, it.reduce, nest):
                summed = mm.rule.run(mm.plan.op, lambda a: mm_got[id(a)], len(it.vars), it.reduce)[0][1]
            term = next(a for a in p.op.ins if isinstance(a, Access) and a != p.op.outs[0])
            shape = tuple(1 if i in it.reduce else nest.trips[v] for i, v in enumerate(it.vars))
            summed = summed.reshape(shape + term.shape)
            read = lambda a, t=term, v=summed: v if a == t else got[id(a)]
        with _threads(it, it.reduce, nest):
            results = it.rule.run(p.op, read, len(it.vars), it.reduce)
        for index, values in results:
            dst, mask = outs[index]
            if mask is not None:
                if p.is_matmul:
                    values = _accumulate(p.mode, dst, mask, values)
                mask[...] = True
            if np.ndim(values) == 0:
                values = np.full(dst.shape, values)
            semantics.store(dst, values)


def _threads(it: _OpItem, reduce: tuple, nest: Nest):
    """BLAS threads for a matmul whose GEMMs (one per iteration left after the sum) are large."""
    op = it.plan.op
    if not it.rule.sums:
        return contextlib.nullcontext()
    st, mv = op.ins[0], op.ins[1]
    k = st.shape[0] if st.shape else 1
    flop = 2 * st.count * (mv.count // max(1, k)) * int(np.prod([nest.trips[it.vars[i]] for i in reduce] or [1]))
    return default_blas() if flop >= THREADED_GEMM_FLOP else contextlib.nullcontext()


def _write_back(sim, nest: Nest, views: _Views) -> None:
    """Memory after the nest as after its last iteration: the private tiles' last copies, in the order
    they were last used (tiles that share bytes)."""
    last = {name: max(it.order for it, _, _ in nest.uses[name]) for name in views.priv}
    for name in sorted(last, key=last.get):
        arr, marr, mine = views.priv[name]
        t = sim.tensors[name]
        t.footprint[...] = arr[tuple(nest.trips[v] - 1 for v in mine)]
        if marr is not None:
            t.mask_footprint[:, ::t.item] = marr[tuple(nest.trips[v] - 1 for v in mine)]


__all__ = ["Nest", "plan", "legal", "run"]
