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
  (floating-point sums in another order; float32 destinations only), and
  except for a tensor the nest only overwrites (a ragged block's last rows
  that the next block rewrites): its stores run last, in program order
  along the loops that rewrite elements;
- a load / add / store through a private tile (how alloc spills an
  accumulator to HBM) is one accumulation into the HBM tensor (_rmw); a tile
  that one load fills whole from HBM the nest does not write is read at its
  source, never copied (_forwards);
- a matmul into a private PSUM tile that one sum adds into an accumulator is
  computed inside that sum (_fuse); such matmuls are joined into GEMMs by
  matmul_groups.py (the ragged variants the tracer peels and the unrolled
  copies of a body; stacked along K where their products add into the same
  elements; rows concatenated where they share moving operands over loops
  that extend one another), and a GEMM reads a stationary operand in place
  where its blocks already lie as the GEMM reads them (gemm._in_place);
- a private tile of zeros (nl.zeros) is filled just before something first
  touches it, and never where one GEMM's products cover it whole: the
  products are kept, a later GEMM of the nest that reads the tile reads them
  where each of its views of the tile is a view of them
  (matmul_groups._product_view: mm2's E GEMMs read C's products, and Ct is
  never written), and anything else gets them written first (Views.zero);
- tiles that share bytes must both be private and live in disjoint stretches
  of the body (the allocator reuses addresses only so); everything else
  falls back to per-iteration execution, which also reports out-of-bounds
  accesses (E170) and reads past a tile (W101 semantics).

An access through a runtime scalar offset (`.ap(scalar_offset=)`) joins a nest
when nothing in the nest changes the offset (a register of a loop outside it,
or a tile element the nest does not write): at each entry the offset is read
once and the access is a static one shifted by it (_scalar_offsets).

The verdict is cached per loop and per value of the outer indices and runtime
offsets that change the relative position of two accesses of a tensor the nest
writes (usually none: once per loop), shared by the simulators of one kernel
(MachineSimulator(verdicts=)). Large GEMMs get BLAS threads and large
element-wise passes two threads while a core is to spare (cpushare.py).

This module plans a nest, checks an entry's legality and runs it; the views
of an entry are nest_views.py's, the GEMMs that matmuls become are gemm.py's
and matmul_groups.py's.
Timing and hazard checks (E171) then run per iteration without moving data
(`MachineSimulator._walk_timing`): times do not depend on values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..ir import Access, Alloc, Loop, Op, ops
from ..ir.analysis import reads, runtime_guard, tensors_touched
from ..ir.loopdeps import carried
from . import gemm, matmul_groups, semantics
from .cpushare import halves
from .matmul_groups import Group, group_matmuls
from .nest_views import Views, shift
from .reference import ReferenceMachine

_accumulate = ReferenceMachine._accumulate
CHECK_BUDGET = 200_000_000      # run-start comparisons per legality check (seconds at most, once per loop)
MAX_PRIVATE_BYTES = 512 << 20     # private tile copies of one nest
MAX_VALUES_BYTES = 256 << 20      # one op's batched results


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
    parts: tuple = ()               # the instructions it stands for, when not just plan (_rmw)
    skip: bool = False              # a load whose tile its readers read at the source (_forwards)
    preset: bool = False            # a memset of 0 of a private tile made of zeros (Nest.zeroed): nothing to do
    group: "Group | None" = None    # a sum fed by a matmul computed in one GEMM with others (matmul_groups)


@dataclass
class Nest:
    """Static facts of one loop nest that may run batched."""
    label: str
    trips: dict                     # nest loop var -> trip count
    items: list                     # _OpItem, depth first
    private: dict                   # tensor name -> nest loops around its Alloc
    uses: dict                      # tensor name -> [(item, access, write)]
    relevant: tuple                 # outer indices the legality depends on
    verdicts: dict = field(default_factory=dict)  # outer indices -> (verdict, why); shared (machine.verdicts)
    fresh: set = field(default_factory=set)  # private tiles that need no poison
    zeroed: set = field(default_factory=set)  # private tiles made of zeros (their first op a memset of 0)
    dead: set = field(default_factory=set)   # private tiles only a fused matmul writes: never materialised
    # private tiles an instruction outside the nest touches (a tile of the last iteration used after the
    # loop): the only ones written back to machine memory (any other's bytes are re-poisoned at the next
    # Alloc over them before anything reads them)
    escapes: set = field(default_factory=set)
    forward: dict = field(default_factory=dict)  # tile -> (its load, the source access, its (P, F) steps)
    # private tiles a matmul reads, stored partition-innermost (nest_views): the contraction runs
    # along the partitions, so a tile's rows of K elements are then contiguous, as BLAS reads them
    columns: set = field(default_factory=set)
    scalars: dict = field(default_factory=dict)  # runtime scalar offsets -> how to read them (_scalar_offsets)
    moved: tuple = ()               # those the legality depends on (the others shift every access alike)
    # how each access's view of an entry is made, by (access, loops, read, start, its load's start):
    # the geometry depends on nothing else, so a run after the first only wraps the run's buffers
    recipes: dict = field(default_factory=dict)
    batched: int = 0                # entries run batched
    why: str = ""                   # why an entry last had to run per iteration
    fallbacks: int = 0              # entries run per iteration


def plan(sim, loop: Loop, outer: tuple, label: str) -> Nest | None:
    """The nest rooted at `loop`, or None when it can never run batched."""
    plans = sim._plan_of
    trips: dict = {}
    items: list = []
    private: dict = {}

    fresh: set = set()  # private tiles their first op overwrites whole: no poison needed
    zeroed: dict = {}   # those of them whose first op is a memset of +0 (tile -> that op)

    def walk(stmts, vars_):
        for i, s in enumerate(stmts):
            if isinstance(s, Alloc):
                if not sim.tensors[s.tensor].onchip:  # re-poisoned per iteration (machine._alloc)
                    return f"HBM tensor {s.tensor} allocated inside"
                private[s.tensor] = vars_
                first = sim._first_use(stmts, i + 1, s.tensor)
                if isinstance(first, Op) and sim._overwrites(first, s.tensor):
                    fresh.add(s.tensor)
                    value = first.attr("value") if first.opcode == "memset" else None
                    if (isinstance(value, (int, float)) and value == 0 and math.copysign(1, value) > 0
                            and not sim.tensors[s.tensor].is_psum):
                        zeroed[s.tensor] = first  # made of zero bytes: the memset has nothing to do
            elif isinstance(s, Loop):
                if runtime_guard(s) is not None:
                    return "a loop with a runtime trip count inside"
                trips[s.var] = s.trip
                why = walk(s.body.stmts, vars_ + (s.var,))
                if why:
                    return why
            elif isinstance(s, Op):
                p = plans.get(id(s))
                rule = ops.of(s).batched
                if p is None or rule is None or p.collective is not None or p.is_print:
                    return f"{s.opcode} has no batched rule"
                if any(isinstance(a, Access) and (a.vector is not None or a.dtype is not None) for a in s.ins + s.outs):
                    return f"{s.opcode} with a gather or reinterpreted bytes"
                if p.oob_skip:
                    return f"{s.opcode} skips what its runtime offset puts out of range (oob_mode.skip)"
                items.append(_OpItem(p, vars_, len(items), rule=rule))
        return None

    trips[loop.var] = loop.trip
    why = walk(loop.body.stmts, (loop.var,))
    if why or not items:
        return _unbatched(sim, label, why or "no instructions")
    for it in items:
        it.preset = any(it.plan.op is op for op in zeroed.values())
    scalars = _scalar_offsets(items, trips, private)
    if isinstance(scalars, str):
        return _unbatched(sim, label, scalars)
    tensors = sim.tensors
    items, dead = _rmw(items, private, tensors)
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
                return _unbatched(sim, label, f"{op.opcode} with operands of different partition counts")
        for a in reads(op):
            uses.setdefault(a.tensor, []).append((it, a, False))
        for a in op.outs:
            uses.setdefault(a.tensor, []).append((it, a, True))
    dead |= _fuse(items, uses, private, tensors)
    forward = _forwards(items, uses, private, tensors)
    group_matmuls(items, trips, private, tensors)
    columns = _columns(items, private, tensors)
    # sizes: private copies and per-op results must stay small
    total = 0
    for name, vars_ in private.items():
        if name in dead or name in forward or name not in uses:
            continue  # never materialised
        t = tensors[name]
        total += math.prod(trips[v] for v in vars_) * t.P * t.F * t.dtype.itemsize
    if total > MAX_PRIVATE_BYTES:
        return _unbatched(sim, label, f"private tile copies of {total >> 20} MiB")
    if any(_values_bytes(it, trips, private) > MAX_VALUES_BYTES for it in items):
        return _unbatched(sim, label, f"results of one instruction over {MAX_VALUES_BYTES >> 20} MiB")
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
            sa, sb = span[a.name], span[b.name]
            if a.name not in private or b.name not in private or not (sa[1] < sb[0] or sb[1] < sa[0]):
                return _unbatched(sim, label, f"{a.name} and {b.name} share bytes")
    relevant = set()
    moved = set()  # runtime offsets that move a written tensor's accesses relative to each other
    for name, us in uses.items():
        for v in outer:
            if len({a.offset.coeff(v) for _, a, _ in us}) > 1:
                relevant.add(v)
        shifts = {(a.scalar, a.scalar_scale) for _, a, _ in us}
        if len(shifts) > 1 and any(w for _, _, w in us):
            moved |= {so for so, _ in shifts if so is not None}
    # verdicts shared by the simulators of one kernel: by loop (the object itself checked, not just its
    # id) and storage precision (which decides the float32 sums)
    shared = sim.verdicts.get((id(loop), outer, sim.precise))
    if shared is None or shared[0] is not loop:
        shared = sim.verdicts[(id(loop), outer, sim.precise)] = (loop, {})
    escapes = {name for name in private if not any(x is loop for x in sim.around.get(name, ()))}
    return Nest(label, trips, items, private, uses, tuple(sorted(relevant)), verdicts=shared[1], fresh=fresh,
                dead=dead, forward=forward, zeroed=set(zeroed), columns=columns, scalars=scalars,
                moved=tuple(so for so in scalars if so in moved), escapes=escapes)


def loops_around(block) -> dict:
    """tensor name -> the loops around every instruction that touches it (outermost first)."""
    around: dict = {}

    def walk(stmts, loops):
        for s in stmts:
            if isinstance(s, Loop):
                walk(s.body.stmts, loops + (s,))
            elif isinstance(s, Op):
                for name in tensors_touched(s):
                    have = around.get(name)
                    if have is None:
                        around[name] = loops
                    elif have:
                        n = 0
                        while n < len(have) and n < len(loops) and have[n] is loops[n]:
                            n += 1
                        around[name] = have[:n]
    walk(block.stmts, ())
    return around


def _columns(items: list, private: dict, tensors: dict) -> set:
    """Private SBUF tiles a matmul reads: stored partition-innermost, so that a GEMM reads their
    K rows (the partitions) contiguously, with no transposing copy into GEMM order, and a GEMM
    whose product adds into one computes it transposed (matmul_groups._transposed)."""
    return {a.tensor for it in items if it.rule.sums for a in it.plan.op.ins[:2]
            if isinstance(a, Access) and a.tensor in private and not tensors[a.tensor].is_psum}


def _scalar_offsets(items: list, trips: dict, private: dict):
    """The runtime scalar offsets of the nest's accesses, {ScalarOffset: the machine's access that
    reads it (None for a register)}, when each keeps one value through an entry of the nest (a
    register of a loop outside it, or a tile element nothing in the nest writes, at an offset no
    nest loop moves): each access is then a static one, shifted by value x scale at entry. Else
    why not (a str)."""
    found: dict = {}
    written = {a.tensor for it in items for a in it.plan.op.outs}
    for it in items:
        for a in list(it.plan.op.ins) + list(it.plan.op.outs):
            if not isinstance(a, Access) or a.scalar is None:
                continue
            so = a.scalar
            if so.register is not None:
                if so.register in trips:
                    return f"{it.plan.op.opcode} with a runtime offset that changes inside the nest"
                found[so] = None
                continue
            if so.tensor in written or so.tensor in private or any(so.offset.coeff(v) for v in trips):
                return f"{it.plan.op.opcode} with a runtime offset that changes inside the nest"
            acc = next(x.scalar for x in it.plan.accs if x.access == a and x.scalar is not None)
            found.setdefault(so, (acc, it.plan.op))
    return found


def _scalar_values(sim, nest: Nest) -> dict | None:
    """{ScalarOffset: its value} at this entry, or None when one was never written (NaN: per
    iteration reports it)."""
    values = {}
    for so, got in nest.scalars.items():
        if got is None:
            values[so] = int(sim.env[so.register])
            continue
        value = sim._scalar(*got)
        if value != value:
            return None
        values[so] = int(value)
    return values


def _static(a: Access, values: dict) -> Access:
    """Access a with its runtime offset folded in (for the legality checks)."""
    if a.scalar is None:
        return a
    return Access(a.tensor, a.offset + shift(a, values), a.pattern)


def _unbatched(sim, label: str, why: str) -> None:
    sim.unbatched[label] = why
    return None


def _points(vars_, trips) -> int:
    return math.prod(trips[v] for v in vars_)


def _values_bytes(it: _OpItem, trips: dict, private: dict) -> int:
    """The most bytes one op's batched execution materialises: its results over the loops its
    destination keeps; a matmul's operands over the loops they move with (a GEMM copies those),
    an element-wise op's over every iteration (they are stacked along partitions)."""
    op = it.plan.op
    out = _points([v for i, v in enumerate(it.vars) if i not in it.reduce], trips) * op.outs[0].count
    if it.feeds is not None:  # the fused matmul's product arrives summed
        return 4 * out
    ins = [a for a in op.ins if isinstance(a, Access)]
    if it.rule.sums:
        sizes = [_points([v for v in it.vars if a.offset.coeff(v) or v in private.get(a.tensor, ())], trips)
                 * a.count for a in ins]
        return 4 * max(sizes + ([] if it.fused else [out]))
    return 4 * max([_points(it.vars, trips) * a.count for a in ins] + [out])


def _rmw(items: list, private: dict, tensors: dict) -> tuple[list, set]:
    """load t <- X[a]; t = t + y; X[a] <- t, through a private tile t used nowhere else (how
    alloc spills an accumulator to HBM, plugins/spill): one item X[a] = X[a] + y, an
    accumulation along the loops X[a] does not move with like any other. The tile is never
    written (it is dead after the store). Returns the items and those tiles."""
    counts: dict = {}
    for it in items:
        for a in list(it.plan.op.outs) + list(reads(it.plan.op)):
            counts[a.tensor] = counts.get(a.tensor, 0) + 1
    out, dead, i = [], set(), 0
    while i < len(items):
        m = _match_rmw(items[i:i + 3], private, tensors)
        if m is None or counts[m.outs[1].tensor] != 4:
            out.append(items[i])
            i += 1
            continue
        tri = items[i:i + 3]
        op = Op("tensor_tensor", (m.outs[0],), m.ins, (("op", "add"),), tri[1].plan.op.loc)
        out.append(_OpItem(_Merged(op), tri[0].vars, 0, rule=ops.of(op).batched,
                           parts=tuple(it.plan for it in tri)))
        dead.add(m.outs[1].tensor)
        i += 3
    for k, it in enumerate(out):
        it.order = k
    return out, dead


_DMA_ATTRS = {"id", "engine", "queue", "rotate", "wait"}


def _match_rmw(tri: list, private: dict, tensors: dict):
    """For a load / add / store triple: an Op-like record with outs (X[a], t) and the add's ins with
    t replaced by X[a]; else None."""
    if len(tri) != 3 or not tri[0].vars == tri[1].vars == tri[2].vars:
        return None
    lo, ad, so = (it.plan.op for it in tri)
    if (lo.opcode, ad.opcode, so.opcode) != ("dma_copy", "tensor_tensor", "dma_copy") or ad.attr("op") != "add":
        return None
    if any(k not in _DMA_ATTRS for o in (lo, so) for k, _ in o.attrs) or len(lo.ins) != 1 or len(so.ins) != 1:
        return None
    t, x = lo.outs[0], lo.ins[0]
    if not (isinstance(x, Access) and so.outs[0] == x and so.ins[0] == t and ad.outs[0] == t
            and t.tensor in private and x.tensor != t.tensor):
        return None
    k = [i for i, a in enumerate(ad.ins) if a == t]
    if len(k) != 1 or not isinstance(ad.ins[1 - k[0]], Access) or ad.ins[1 - k[0]].tensor in (t.tensor, x.tensor):
        return None
    if tensors[t.tensor].dtype != np.float32 or tensors[x.tensor].dtype != np.float32:
        return None  # the copies convert nothing; reordered sums only in fp32
    if x.shape != t.shape:  # the DMA matches element counts only: X[a] walked in the tile's shape
        if len(t.shape) != 2 or _split(x.pattern, *t.shape) is None:
            return None
        x = Access(x.tensor, x.offset, tuple(zip(_split(x.pattern, *t.shape), t.shape)), x.scalar, x.scalar_scale)
    ins = list(ad.ins)
    ins[k[0]] = x
    return Op("tensor_tensor", (x, t), tuple(ins))


def _split(pattern, P: int, F: int):
    """(partition step, free step) of a pattern that walks a (P, F) tile row by row, one step per
    axis; None for any other walk."""
    merged: list = []
    for s, n in pattern:
        if n == 1:
            continue
        if merged and merged[-1][0] == s * n:  # the outer axis continues this one
            merged[-1] = (s, merged[-1][1] * n)
        else:
            merged.append((s, n))
    if not merged:
        return (F, 1) if P * F == 1 else None
    if len(merged) == 1 and merged[0][1] == P * F:
        return merged[0][0] * F, merged[0][0]
    if len(merged) == 2 and (merged[0][1], merged[1][1]) == (P, F):
        return merged[0][0], merged[1][0]
    return None


def _forwards(items, uses, private, tensors) -> dict:
    """Private tiles one load fills whole, once per tile, from HBM the nest does not write, and
    nothing else writes: their readers read the source in place. No copy per iteration, and a
    source the loops do not move along stays one array (a GEMM operand without stacked copies).
    The load is not executed. Returns tile -> (load item, source access, source (P, F) steps)."""
    fwd = {}
    for name, us in uses.items():
        t = tensors[name]
        written = [(it, a) for it, a, w in us if w]
        if name not in private or len(written) != 1:
            continue
        it, a = written[0]
        op = it.plan.op
        if (op.opcode != "dma_copy" or len(op.ins) != 1 or it.vars != private[name]
                or any(k not in _DMA_ATTRS for k, _ in op.attrs) or min(u.order for u, _, _ in us) != it.order):
            continue  # not one plain load per tile, first
        x = op.ins[0]
        xt = tensors[x.tensor]
        if xt.onchip or xt.decl.dtype != t.decl.dtype or xt.dtype != t.dtype:
            continue
        if any(w for _, _, w in uses.get(x.tensor, ())):
            continue  # the source changes inside the nest
        if a.offset.terms or a.offset.const or a.scalar is not None or _split(a.pattern, t.P, t.F) != (t.F, 1):
            continue  # not the whole tile, row by row
        steps = _split(x.pattern, t.P, t.F)
        if steps is not None:
            fwd[name] = (it, x, steps)
            it.skip = True
    return fwd


@dataclass
class _Merged:
    """The plan of an item standing for several instructions (_rmw): what batched execution
    reads of a machine._Plan."""
    op: Op
    is_matmul: bool = False
    mode: object = None
    collective: object = None
    is_print: bool = False


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


def legal(nest: Nest, env: dict, values: dict):
    """None when this entry must run per iteration, else the loops each item (by order) stores
    along in order (_legal). `values`: the runtime scalar offsets at this entry."""
    key = tuple(env[v] for v in nest.relevant) + tuple(values[so] for so in nest.moved)
    if key not in nest.verdicts:
        uses = nest.uses if not values else {
            name: [(it, _static(a, values), w) for it, a, w in us] for name, us in nest.uses.items()}
        nest.verdicts[key] = (_legal(nest, env, uses), nest.why)
    verdict, why = nest.verdicts[key]
    if verdict is None:
        nest.why = why
    return verdict


def _legal(nest: Nest, env: dict, uses: dict):
    budget = [CHECK_BUDGET]
    cache: dict = {}
    trips = nest.trips
    ordered: dict = {}  # tensor -> loops whose iterations overwrite each other's elements
    for name, us in uses.items():
        mine = nest.private.get(name, ())
        overwrites = _overwrite_only(us)
        for i, w in enumerate(us):
            if not w[2]:
                continue
            for j, x in enumerate(us):
                if x[2] and j < i:
                    continue  # each pair of writes once
                (iw, aw, _), (ix, ax, _) = w, x
                if any(aw.offset.coeff(v) != ax.offset.coeff(v) for v in mine):
                    nest.why = f"{name} addressed differently by two instructions"
                    return None  # private copies addressed differently: not worth proving
                common = [v for v in iw.vars if v in ix.vars and v not in mine]
                around = {v for v in iw.vars + ix.vars if v not in mine}
                fixed = {**env, **{v: 0 for v in mine}}
                for v in common:
                    if _exempt(w, x, v) or v in ordered.get(name, ()):
                        continue
                    inner = {u: trips[u] for u in around if u != v}
                    if carried(aw, ax, v, trips[v], inner, fixed, budget, cache):
                        if not overwrites:
                            nest.why = (f"{name}: two iterations of loop {v} may touch one element"
                                        + (" (or the check ran out of budget)" if budget[0] <= 0 else ""))
                            return None
                        ordered.setdefault(name, set()).add(v)
    verdict = {}
    for name, vs in ordered.items():
        writers = [it for it, _, _ in nest.uses[name]]
        if not all(v in it.vars for v in vs for it in writers):
            nest.why = f"{name} is rewritten along loops not around all its writers"
            return None
        verdict[name] = tuple(v for v in writers[0].vars if v in vs)
    return verdict


def _overwrite_only(us: list) -> bool:
    """Whether a tensor is only written in the nest, by ops that overwrite (no PSUM accumulation,
    no sum): iterations writing one element are then an output dependence alone, and storing
    the iterations of the loops that carry it in program order leaves the last value, as
    per-iteration execution does (a ragged block whose last rows the next block rewrites)."""
    return all(w and not it.plan.is_matmul and not it.reduce and not it.parts for it, _, w in us)


def run(sim, nest: Nest) -> bool:
    """Execute one entry of the nest batched; False (nothing done) when it
    has to run per iteration."""
    env = sim.env
    values = _scalar_values(sim, nest)
    if values is None:
        nest.why = "a runtime offset that was never written (per iteration reports it)"
        nest.fallbacks += 1
        return False
    ordered = legal(nest, env, values)
    views = Views(sim, nest, env, values) if ordered is not None else None
    plan_ = _gather(nest, views) if views is not None else None
    if plan_ is None:
        if ordered is not None:
            nest.why = "an access leaves its tensor or wraps a row here (per iteration reports it)"
        nest.fallbacks += 1
        return False
    _execute(sim, nest, plan_, ordered, views)
    _write_back(sim, nest, views)
    views.release()
    nest.batched += 1
    return True


def _gather(nest: Nest, views: Views):
    """[(item, input views by id(access), output views)], or None when some access has no
    strided view (every view first: nothing is written unless all exist)."""
    plan_ = []
    for it in nest.items:
        op = it.plan.op
        got = {}
        if it.skip:  # a forwarded load: only its source's bounds
            if views.view(op.ins[0], it.vars) is None:
                return None
            plan_.append((it, got, ()))
            continue
        for a in op.ins:
            if not isinstance(a, Access):
                got[id(a)] = None
            elif a.tensor not in nest.dead or it.fused:  # else the fused matmul's product, computed instead
                v = views.view(a, it.vars, read=True)
                if v is None:
                    return None
                got[id(a)] = v[0]
        outs = []
        keep = tuple(v for i, v in enumerate(it.vars) if i not in it.reduce)
        for a in op.outs if not it.fused else ():
            v = views.view(a, keep)
            if v is None:
                return None
            outs.append(v)
        plan_.append((it, got, outs))
    return plan_


def _execute(sim, nest: Nest, plan_: list, ordered: dict, views: Views) -> None:
    # the fused matmuls' operand views (a group's GEMM may come before a member's own position)
    done, pending = {id(it): got for it, got, _ in plan_ if it.fused}, {}
    outs_of = {id(it): outs for it, _, outs in plan_}
    arrays = gemm.EntryArrays(sim)
    mult = partial(gemm.multiply, spare=sim.cpu.spare, arrays=arrays)
    products = partial(gemm.products, gemm=mult)
    matmul_groups.check_groups(sim, nest, done, mult, outs_of, arrays)
    for it, got, outs in plan_:
        p = it.plan
        points = _points(it.vars, nest.trips)
        for q in it.parts or (p,):
            q.count += points
            sim.executed += points
        if it.skip or it.fused or it.preset:
            continue
        read = lambda a: got[id(a)]
        if it.reduce or it.rule.sums:
            sim.reordered += 1
        if it.feeds is not None:  # the matmul's products, summed over the loops this op sums over
            mm, g = it.feeds, it.group
            mm_got = done[id(mm)]
            if g is not None and id(it) in g.applies and callable(done[id(g)]):  # its GEMM runs now
                kept = matmul_groups.forward_products(sim, it, g, done, views, mult, outs_of, arrays)
                views.before([a.feeds.plan.op for h in g.rows or [g] for a in h.adds], kept)
            summed = matmul_groups.product_of(it, done) if g is not None else None
            if summed is matmul_groups.ADDED:
                continue
            if g is not None and g.one_add and summed is not None:
                once = ("one add", id(g))
                if once not in done:
                    done[once] = matmul_groups.one_add(sim, g, done[id(g)], outs_of, ordered, views)
                if done[once]:
                    continue
            if summed is None:
                views.before([mm.plan.op])
                summed = mm.rule.run(mm.plan.op, lambda a: mm_got[id(a)], len(it.vars), it.reduce,
                                     products=products)[0][1]
            term = next(a for a in p.op.ins if isinstance(a, Access) and a != p.op.outs[0])
            shape = tuple(1 if i in it.reduce else nest.trips[v] for i, v in enumerate(it.vars))
            summed = summed.reshape(shape + term.shape)
            read = lambda a, t=term, v=summed: v if a == t else got[id(a)]
        views.before([p.op])
        dst0, mask0 = outs[0]
        if (it.accum and it.rule.into is not None and dst0.dtype == np.float32 and not p.is_matmul
                and p.op.outs[0].tensor not in ordered):
            halves(sim, lambda r, d: it.rule.into(p.op, r, len(it.vars), it.reduce, d), read, dst0,
                    0 not in it.reduce)  # dst += terms, one pass
            if mask0 is not None:
                mask0[...] = True
            continue
        if it.rule.sums:
            results = it.rule.run(p.op, read, len(it.vars), it.reduce, products=products)
        else:
            results = it.rule.run(p.op, read, len(it.vars), it.reduce)
        for index, values in results:
            dst, mask = outs[index]
            if mask is not None:
                if p.is_matmul:
                    values = _accumulate(p.mode, dst, mask, values)
                mask[...] = True
            axes = ordered.get(p.op.outs[index].tensor)
            if np.ndim(values) == 0:
                if not axes:
                    halves(sim, lambda _, d, v=values: semantics.fill(d, v), None, dst, True)
                    continue
                values = np.full(dst.shape, values)
            if axes:  # stored last, in program order along those loops
                pending.setdefault(p.op.outs[index].tensor, []).append(
                    (dst, np.asarray(values).reshape(dst.shape), [it.vars.index(v) for v in axes]))
                continue
            semantics.store(dst, values)
    for stores in pending.values():
        dst0, _, axes0 = stores[0]
        for idx in np.ndindex(*(dst0.shape[k] for k in axes0)):
            for dst, values, axes in stores:  # the writers in body order
                sel = [slice(None)] * dst.ndim
                for k, i in zip(axes, idx):
                    sel[k] = i
                semantics.store(dst[tuple(sel)], values[tuple(sel)])
    views.zero(nest.escapes)  # what _write_back copies out (unwritten products: before their arrays go back)
    arrays.release()  # (nothing holds a product or an operand past its entry)


def _write_back(sim, nest: Nest, views: Views) -> None:
    """Memory after the nest as after its last iteration, where anything reads it: the last copies of
    the private tiles used after the loop, in the order they were last used (tiles that share bytes)."""
    last = {name: max(it.order for it, _, _ in nest.uses[name]) for name in views.priv if name in nest.escapes}
    for name in sorted(last, key=last.get):  # (_execute made them what they hold: views.zero)
        arr, marr, mine = views.priv[name]
        t = sim.tensors[name]
        t.footprint[...] = arr[tuple(nest.trips[v] - 1 for v in mine)]
        if marr is not None:
            t.mask_footprint[:, ::t.item] = marr[tuple(nest.trips[v] - 1 for v in mine)]


__all__ = ["Nest", "plan", "legal", "run"]
