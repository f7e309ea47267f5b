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
  where its blocks already lie as the GEMM reads them (matmul._in_place);
- a private tile of zeros (nl.zeros) is filled just before something first
  touches it, and never where one GEMM's products cover it whole: the
  products are kept, a later GEMM of the nest that reads the tile reads them
  where each of its views of the tile is a view of them (_product_view: mm2's
  E GEMMs read C's products, and Ct is never written), and anything else
  gets them written first (_Views.zero);
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
from ..ir.ops.values import address, same_view, view_at
from . import semantics
from ._blas import default_blas
from .cpushare import CpuShare
from .matmul_groups import Group, group_matmuls
from .reference import ReferenceMachine

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy < 2
    from numpy import byte_bounds

_accumulate = ReferenceMachine._accumulate
CHECK_BUDGET = 200_000_000      # run-start comparisons per legality check (seconds at most, once per loop)
MAX_PRIVATE_BYTES = 512 << 20     # private tile copies of one nest
MAX_VALUES_BYTES = 256 << 20      # one op's batched results
_MAX_RECIPES = 1 << 14            # view recipes kept per nest (Nest.recipes): a nest entered at many offsets
# BLAS threads for a GEMM of at least this many flops, while a core is spare (cpushare.py): below it a
# multi-threaded OpenBLAS lost 2-10x on this shared 2-vCPU machine (mm2 --scale 8: 30 MFLOP stacked
# GEMMs 62 s against 3.9 s, before the spare-core check). With the check, 0.35-0.41 GFLOP GEMMs take
# 1.4-1.6 ms on two threads against 2.6-2.9 ms on one, and mm2 --scale 8 ran 2-5% faster than with
# 1 GFLOP here (same process, alternating runs). Row bands on two Python threads with one BLAS thread
# each were no faster at load 1-4 (0.34 s against 0.33 s) and were dropped.
THREADED_GEMM_FLOP = 1 << 28
# element-wise passes over at least this many destination elements run in two halves on two threads:
# a strided 20 MB dst += terms took 3.7-4.2 ms so against 6.6-7.1 ms on one (2 vCPUs at load 2.3)
PARALLEL_ELEMENTS = 1 << 18
# Both only while a core is to spare (cpushare.py): with every core busy the second thread waits for
# a core and loses (mm2 --scale 8 at load 3-4: 0.35-0.65 s with threads against 0.21-0.39 s without,
# best of 5, the two alternating)


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
    # private tiles a matmul reads, stored partition-innermost (_Views): the contraction runs
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
    whose product adds into one computes it transposed (_check_groups)."""
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


def _shift(a: Access, values: dict) -> int:
    """The elements access a's runtime scalar offset adds at this entry."""
    return values[a.scalar] * a.scalar_scale if a.scalar is not None else 0


def _static(a: Access, values: dict) -> Access:
    """Access a with its runtime offset folded in (for the legality checks)."""
    if a.scalar is None:
        return a
    return Access(a.tensor, a.offset + _shift(a, values), a.pattern)


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


class _Views:
    """Strided views of one entry of a nest: machine memory for shared
    tensors, private arrays for the nest's own tiles."""

    def __init__(self, sim, nest: Nest, env: dict, values: dict):
        self.sim, self.nest, self.env, self.values = sim, nest, env, values
        self.priv: dict = {}
        # tiles of zeros not yet zeroed: each is filled just before something first touches it, or
        # never, where a sum's first write covers the whole of it (_one_add)
        self.unfilled: set = set()
        # tiles whose content is a GEMM's products not yet written: name -> (the tile's elements as one
        # strided view, the products in the same shape). A GEMM that reads such a tile reads the
        # products instead (_forward_products); anything else gets them written first (`zero`)
        self.products: dict = {}
        for name, vars_ in nest.private.items():
            if name in nest.dead or name in nest.forward or name not in nest.uses:
                continue
            t = sim.tensors[name]
            lead = tuple(nest.trips[v] for v in vars_)
            column = name in nest.columns
            shape = lead + ((t.F, t.P) if column else (t.P, t.F))
            if name in nest.zeroed:
                self.unfilled.add(name)
            data = sim.scratch.take(shape, t.dtype, None if name in nest.zeroed or name in nest.fresh else t.fill)
            if column:
                data = data.swapaxes(-1, -2)  # indexed (partition, free) like the others
            mask = sim.scratch.take(shape, np.bool_, False) if t.is_psum else None
            self.priv[name] = (data, mask, vars_)

    def zero(self, names) -> None:
        """The tiles among `names` made what the program says they hold, before anything reads or
        adds into them: zeros filled, or GEMM products written (x + 0.0: 0 + x, a -0.0 product
        summing to +0.0 as it would)."""
        for name in self.unfilled.intersection(names):
            self.unfilled.discard(name)
            _halves(self.sim, lambda _, d: d.fill(0), None, self.priv[name][0], True)
        for name in [n for n in names if n in self.products]:
            dst, terms = self.products.pop(name)
            _halves(self.sim, lambda r, d: np.add(r(0), np.float32(0), out=d), lambda _: terms, dst, True)

    def before(self, ops, kept=frozenset()) -> None:
        """`zero` for the tiles any of `ops` touches but `kept`, before they run (nothing worked
        out while no tile waits: the usual case, on every instruction of every entry)."""
        if self.unfilled or self.products:
            self.zero(set().union(*map(tensors_touched, ops)) - kept)

    def release(self) -> None:
        for data, mask, _ in self.priv.values():
            self.sim.scratch.give(data)
            if mask is not None:
                self.sim.scratch.give(mask)
        self.priv, self.products, self.unfilled = {}, {}, set()

    def start(self, a: Access) -> int:
        """The element access a starts at for this entry, the nest's own loops at 0."""
        trips = self.nest.trips
        return a.offset.const + sum(c * self.env[v] for v, c in a.offset.terms if v not in trips) + _shift(a, self.values)

    def view(self, a: Access, lead: tuple, read: bool = False):
        """(data, PSUM written-mask or None) of access a over the loops `lead`, or None if it
        wraps rows or leaves its tensor (per-iteration execution handles those). A read that
        wraps rows of a tile the nest does not write gets a gathered copy instead (_wrapped)."""
        t = self.sim.tensors[a.tensor]
        e = self.start(a)
        fw, priv = self.nest.forward.get(t.name), self.priv.get(t.name)
        key = (id(a), lead, read, e, self.start(fw[1]) if fw is not None else None,
               priv[0].strides if priv is not None else None)
        recipe = self.nest.recipes.get(key)
        if recipe is None:
            recipe = self._recipe(a, t, lead, read, e, fw)
            if len(self.nest.recipes) >= _MAX_RECIPES:
                self.nest.recipes.clear()
            self.nest.recipes[key] = recipe
        kind = recipe[0]
        if kind == "none":
            return None
        if kind == "wrapped":
            return _wrapped(self, a, t, lead, e)
        _, where, dtype, off, shape, strides, mask = recipe
        if kind == "memory":
            data = np.ndarray(shape, dtype, self.sim._mv[where], off, strides)
            return data, None if mask is None else np.ndarray(shape, np.bool_, self.sim._mask_mv, *mask)
        arr, marr, _ = self.priv[where]
        data = np.ndarray(shape, dtype, arr.base if arr.base is not None else arr, off, strides)
        return data, None if mask is None else np.ndarray(shape, np.bool_, marr, *mask)

    def _recipe(self, a: Access, t, lead: tuple, read: bool, e: int, fw) -> tuple:
        """How `view` makes access a's view: ("none",), ("wrapped",) (a gathered copy, made anew
        each time: it copies values), or ("memory" | "private", the machine memory's key | the
        private tile, dtype, byte offset, shape, strides, the PSUM mask's (offset, strides) or None)."""
        sim, trips = self.sim, self.nest.trips
        dims = [(a.offset.coeff(v), trips[v]) for v in lead] + list(a.pattern)
        shape = tuple(n for _, n in dims)
        if not t.onchip:
            lo = e + sum(s * (n - 1) for s, n in dims if s < 0)
            hi = e + sum(s * (n - 1) for s, n in dims if s > 0)
            if lo < 0 or hi >= t.size:
                return ("none",)
            return ("memory", t.key, t.dtype, e * t.item, shape, tuple(s * t.item for s, _ in dims), None)
        if fw is not None:
            recipe = _forwarded_view(self, a, t, lead, fw, e)
            return recipe or (("wrapped",) if read else ("none",))
        priv = self.priv.get(t.name)
        F = t.F
        if priv is not None:  # private copies are typed arrays, (partition, free) either way round
            pb, item = priv[0].strides[-2:]
        else:
            pb, item = sim._pb(t), t.item
        strides = _window(dims, e, t.P, F, pb, item)
        if strides is None:
            if read and priv is None and not any(w for _, _, w in self.nest.uses.get(t.name, ())):
                return ("wrapped",)
            return ("none",)
        p0, f0 = divmod(e, F)
        if priv is None:
            off = t.address + p0 * pb + f0 * item
            return ("memory", t.key, t.dtype, off, shape, tuple(strides), (off, tuple(strides)) if t.is_psum else None)
        arr, marr, mine = priv
        for k, v in enumerate(lead):  # a loop around the tile's Alloc picks the private copy
            if v in mine:
                strides[k] += arr.strides[mine.index(v)]
        off = p0 * pb + f0 * item
        mask = None if marr is None else (off // item, tuple(s // item for s in strides))  # one byte an element
        return ("private", t.name, t.dtype, off, shape, tuple(strides), mask)


def _window(dims, e: int, P: int, F: int, partition_step: int, free_step: int) -> list | None:
    """Strides of a [(step, num)] walk over a (P, F) tile from element e, a step that is a
    multiple of F moving partitions (partition_step each) and any other moving along the row
    (free_step each); None where the walk leaves the tile."""
    strides, plo, phi, flo, fhi = [], 0, 0, 0, 0
    for s, n in dims:
        if n > 1 and s and s % F == 0:
            strides.append((s // F) * partition_step)
            plo, phi = plo + min(0, (s // F) * (n - 1)), phi + max(0, (s // F) * (n - 1))
        else:
            strides.append(s * free_step)
            flo, fhi = flo + min(0, s * (n - 1)), fhi + max(0, s * (n - 1))
    p0, f0 = divmod(e, F)
    if p0 + plo < 0 or p0 + phi >= P or f0 + flo < 0 or f0 + fhi >= F:
        return None
    return strides


def _wrapped(self, a: Access, t, lead: tuple, e: int):
    """A read of on-chip tile t that wraps rows or runs past the tile (the static seed's ragged
    last block reads 7 columns past its At tile), as per-iteration execution reads it: flat
    over the tile, partition-major, poison past its end; gathered into a new array (the tile is
    one the nest does not write, so its values are known before the nest runs: a forwarded
    load's source or memory as the nest found it). Along loops it does not move with, the copy
    is broadcast. None for PSUM or a start before the tile (per iteration reports those)."""
    if t.is_psum:
        return None
    sim, trips = self.sim, self.nest.trips
    fw = self.nest.forward.get(t.name)
    mine = self.nest.private.get(t.name, ()) if fw is not None else ()
    x = fw[1] if fw is not None else None
    full, moves = [], []
    for v in lead:
        full.append(trips[v])
        moves.append(a.offset.coeff(v) != 0 or (v in mine and x.offset.coeff(v) != 0))
    dims = [(a.offset.coeff(v), trips[v] if m else 1) for v, m in zip(lead, moves)] + list(a.pattern)
    nd = len(dims)
    axis = lambda k, n: np.arange(n, dtype=np.int64).reshape([n if j == k else 1 for j in range(nd)])
    idx = np.int64(e)
    for k, (step, n) in enumerate(dims):
        idx = idx + step * axis(k, n)
    idx = np.broadcast_to(idx, tuple(n for _, n in dims))
    if idx.min() < 0:
        return None
    inside = idx < t.P * t.F
    p, f = np.divmod(np.where(inside, idx, 0), t.F)
    if fw is None:
        vals = t.footprint[p, f]
    else:
        _, _, (sp, sf) = fw
        xt = sim.tensors[x.tensor]
        src = self.start(x) + p * sp + f * sf
        for k, v in enumerate(lead):
            if v in mine and moves[k]:
                src = src + x.offset.coeff(v) * axis(k, dims[k][1])
        src = np.broadcast_to(src, idx.shape)
        if src.min() < 0 or src.max() >= xt.size:
            return None
        vals = sim._at(xt, src)
    out = np.where(inside, vals, t.fill).astype(t.dtype, copy=False)
    return np.broadcast_to(out, tuple(full) + out.shape[len(lead):]), None


def _forwarded_view(self, a: Access, t, lead: tuple, fw, e: int):
    """Access a (starting at element e) of a forwarded tile as a view of its load's source (a
    _Views recipe): element (p, f) of the tile is source element base + p * sp + f * sf; loops
    around the tile move the source as the load does. None where a leaves the tile
    (per-iteration execution reports it)."""
    sim, trips = self.sim, self.nest.trips
    _, x, (sp, sf) = fw
    xt, F = sim.tensors[x.tensor], t.F
    mine = self.nest.private[t.name]
    base = self.start(x)
    dims = [(a.offset.coeff(v), trips[v]) for v in lead] + list(a.pattern)
    strides = _window(dims, e, t.P, F, sp, sf)
    if strides is None:
        return None
    p0, f0 = divmod(e, F)
    for k, v in enumerate(lead):
        if v in mine:  # another copy of the tile: where the load read it
            strides[k] += x.offset.coeff(v)
    shape = tuple(n for _, n in dims)
    return ("memory", xt.key, xt.dtype, (base + p0 * sp + f0 * sf) * xt.item, shape,
            tuple(s * xt.item for s in strides), None)


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
    views = _Views(sim, nest, env, values) if ordered is not None else None
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


def _gather(nest: Nest, views: _Views):
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


def _execute(sim, nest: Nest, plan_: list, ordered: dict, views: _Views) -> None:
    # the fused matmuls' operand views (a group's GEMM may come before a member's own position)
    done, pending = {id(it): got for it, got, _ in plan_ if it.fused}, {}
    outs_of = {id(it): outs for it, _, outs in plan_}
    arrays = _EntryArrays(sim)
    mult = partial(gemm, spare=sim.cpu.spare, arrays=arrays)
    _check_groups(sim, nest, done, mult, outs_of, arrays)
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
                kept = _forward_products(sim, it, g, done, views, mult, outs_of, arrays)
                views.before([a.feeds.plan.op for h in g.rows or [g] for a in h.adds], kept)
            summed = _grouped(it, done) if g is not None else None
            if summed is _ADDED:
                continue
            if g is not None and g.one_add and summed is not None:
                once = ("one add", id(g))
                if once not in done:
                    done[once] = _one_add(sim, g, done[id(g)], outs_of, ordered, views)
                if done[once]:
                    continue
            if summed is None:
                views.before([mm.plan.op])
                summed = mm.rule.run(mm.plan.op, lambda a: mm_got[id(a)], len(it.vars), it.reduce, gemm=mult)[0][1]
            term = next(a for a in p.op.ins if isinstance(a, Access) and a != p.op.outs[0])
            shape = tuple(1 if i in it.reduce else nest.trips[v] for i, v in enumerate(it.vars))
            summed = summed.reshape(shape + term.shape)
            read = lambda a, t=term, v=summed: v if a == t else got[id(a)]
        views.before([p.op])
        dst0, mask0 = outs[0]
        if (it.accum and it.rule.into is not None and dst0.dtype == np.float32 and not p.is_matmul
                and p.op.outs[0].tensor not in ordered):
            _halves(sim, lambda r, d: it.rule.into(p.op, r, len(it.vars), it.reduce, d), read, dst0,
                    0 not in it.reduce)  # dst += terms, one pass
            if mask0 is not None:
                mask0[...] = True
            continue
        if it.rule.sums:
            results = it.rule.run(p.op, read, len(it.vars), it.reduce, gemm=mult)
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
                    _halves(sim, lambda _, d, v=values: semantics.fill(d, v), None, dst, True)
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


_ADDED = object()  # a sum whose product its cell's last add adds (matmul_groups._stack)


def _grouped(add: _OpItem, done: dict):
    """The product feeding `add` out of its group's one GEMM (made at the group's first applying
    add, where matmul_groups checked what it reads; kept in `done`); _ADDED when another add of its cell
    adds it; None when the group's operands do not line up (each matmul alone then)."""
    g = add.group
    got = done[id(g)]
    if got is None:
        return None
    if id(add) not in g.applies:
        return _ADDED
    if callable(got):
        got()  # (sets the products of g and of the groups that share its GEMM: _runner)
        got = done[id(g)]
    out, mo, no = got
    i, j = g.cell[id(add)]
    return out[..., mo[i]:mo[i + 1], no[j]:no[j + 1]]


def _one_add(sim, g: Group, got, outs_of: dict, ordered: dict, views: _Views) -> bool:
    """Every cell's product of group g added into its accumulator in one pass, when their views
    (SBUF float32, sums as `into` does them) tile one strided view: the stationary operands'
    cells a uniform step apart, the moving operands' side by side along the last axis (the
    ragged variants of one tile: one dense pass instead of one strided pass per variant).
    A tile of zeros not yet filled that the view covers whole is the products then: they are
    kept (_Views.products), the tile never filled, and written only if something other than a
    GEMM's operand needs them. False (nothing done) otherwise."""
    out, mo, no = got
    app = [a for a in g.adds if id(a) in g.applies]
    cells = {}
    for a in app:
        dst, mask = outs_of[id(a)][0]
        if not (a.accum and a.rule.into is not None and dst.dtype == np.float32 and not a.plan.is_matmul
                and mask is None and a.plan.op.outs[0].tensor not in ordered):
            return False
        cells[g.cell[id(a)]] = dst
    ni, nj = len(g.sts), len(g.mvs)
    Ms, Ns = np.diff(mo).tolist(), np.diff(no).tolist()
    if len(cells) != ni * nj or len(set(Ms)) != 1 or out.shape[:-2] != cells[(0, 0)].shape[:-2]:
        return False
    v0 = cells[(0, 0)]
    step = address(cells[(1, 0)]) - address(v0) if ni > 1 else 0
    for (i, j), v in cells.items():
        if (v.strides != v0.strides or v.shape[:-2] != v0.shape[:-2] or v.shape[-2:] != (Ms[i], Ns[j])
                or address(v) != address(v0) + i * step + no[j] * v0.strides[-1]):
            return False
    shape = v0.shape[:-2] + (ni, Ms[0], no[-1])
    strides = v0.strides[:-2] + (step, v0.strides[-2], v0.strides[-1])
    if not _disjoint(shape, strides, v0.itemsize):
        return False
    dst = np.lib.stride_tricks.as_strided(v0, shape, strides)  # the union of the cells' views
    terms = out.reshape(shape)  # (rows: the stationary operands' blocks, each Ms[0] rows)
    names = {a.plan.op.outs[0].tensor for a in app}
    name = next(iter(names))
    if len(names) == 1 and name in views.unfilled and dst.size == views.priv[name][0].size:
        views.unfilled.discard(name)  # (the cells are disjoint views of its array: size says whole)
        views.products[name] = (dst, terms)  # written when something other than a GEMM needs them
        return True
    views.zero(names)
    order = _inner_run_order(dst, terms)
    if order is not None:
        dst, terms = dst.transpose(order), terms.transpose(order)
    _halves(sim, lambda r, d: np.add(d, r(0), out=d), lambda _: terms, dst, True)  # (disjoint: any axis splits)
    return True


def _inner_run_order(dst: np.ndarray, terms: np.ndarray):
    """The axes of dst += terms in terms' memory order (outermost first), where terms' contiguous
    axis is longer than dst's: a short innermost run of dst (E_write_1's few m tiles interleaved
    along the free axis) made the loop numpy chose touch every line of dst once per tile (mm2
    --scale 8: 1.7 ms, 0.8 in terms' order). None: numpy's own order."""
    inner = lambda x: min(range(x.ndim), key=lambda k: (abs(x.strides[k]) if x.shape[k] > 1 else np.inf))
    i, j = inner(dst), inner(terms)
    if i == j or dst.shape[i] >= terms.shape[j] or abs(terms.strides[j]) != terms.itemsize:
        return None
    return sorted(range(dst.ndim), key=lambda k: -abs(terms.strides[k]) if dst.shape[k] > 1 else -np.inf)


def _disjoint(shape: tuple, strides: tuple, item: int) -> bool:
    """Whether a strided view touches no element twice (sufficient: by increasing step, each step
    clears the extent of the smaller ones)."""
    extent = item
    for step, n in sorted((abs(s), n) for s, n in zip(strides, shape) if n > 1):
        if step < extent:
            return False
        extent += step * (n - 1)
    return True


class _EntryArrays:
    """The float32 arrays one nest entry takes from the simulator's scratch pool (GEMM products,
    `new`; GEMM operands, called as matmul._new_operand's contract), all given back when the
    entry ends (`release`). One view already of an operand's shape is the operand (no copy); an
    operand made only of views of inputs the kernel never writes is made once per entry (the At
    block that mm2's two multi-buffer copies of the n0 body both read)."""

    def __init__(self, sim):
        self.sim, self.taken = sim, []
        self.steady = [byte_bounds(sim.hbm[name]) for name in sim.read_only]  # those inputs' bytes
        self.made: dict = {}

    def new(self, shape: tuple) -> np.ndarray:
        out = self.sim.scratch.take(shape, np.float32)
        self.taken.append(out)
        return out

    def release(self) -> None:
        for x in self.taken:
            self.sim.scratch.give(x)
        self.taken, self.made = [], {}

    def _steady(self, x: np.ndarray) -> bool:
        lo, hi = byte_bounds(x)
        return any(a <= lo and hi <= b for a, b in self.steady)

    def __call__(self, shape: tuple, layout: tuple, sources: list, fill) -> np.ndarray:
        if len(sources) == 1:  # BLAS reads it in place
            try:
                return np.reshape(sources[0], shape, copy=False)
            except (ValueError, TypeError):  # (TypeError: numpy < 2.1 has no copy=)
                pass
        key = None
        if self.steady and all(self._steady(x) for x in sources):
            key = (shape, layout, tuple((address(x), x.shape, x.strides) for x in sources))
            if key in self.made:
                return self.made[key]
        out = fill(self.new(shape))
        if key is not None:
            self.made[key] = out
        return out


def _check_groups(sim, nest: Nest, done: dict, mult, outs_of: dict, operands: "_EntryArrays") -> None:
    """Each group's GEMM, to run (a function) or None where its operands do not line up: decided
    before any of its adds runs (one that adds nothing must know whether its product comes)."""
    view = lambda a, x: done[id(a.feeds)][id(x)]
    for it in nest.items:
        g = it.group
        if g is not None and id(g) not in done:
            done.update(_gemm_of(sim, g, view, done, mult, outs_of, operands))


def _gemm_of(sim, g: Group, view, done: dict, mult, outs_of: dict, operands: "_EntryArrays") -> dict:
    """{id(h): a function that runs the GEMM and puts each group's products in done[id(h)], or
    None where h's does not line up} for g and the groups that share its GEMM (Group.rows); each
    group's own GEMM where one for all does not line up."""
    if g.rows is not None:
        fn = _group_gemm(sim, g.rows, view, mult, outs_of, operands)
        if fn is not None:
            return {id(h): _runner(fn, g.rows, done) for h in g.rows}
    got = {}
    for h in g.rows or [g]:
        fn = _group_gemm(sim, [h], view, mult, outs_of, operands)
        got[id(h)] = None if fn is None else _runner(fn, [h], done)
    return got


def _runner(fn, groups: list, done: dict):
    """What done[id(h)] holds until the GEMM runs: a call that runs fn and puts each group's
    products (fn's list, one per group) in its place."""
    def run():
        for h, x in zip(groups, fn()):
            done[id(h)] = x
    return run


def _forward_products(sim, it: _OpItem, g: Group, done: dict, views: _Views, mult, outs_of: dict,
                      operands: "_EntryArrays") -> set:
    """Group g's GEMM, about to run, reads the kept products of a tile (_Views.products) in place
    of the tile, where every view it takes of that tile is a view of the products (_product_view):
    mm2's E GEMMs read Ct's products, laid out for the GEMM that made them, and Ct is never
    written. Returns those tiles (a tile with a view that does not map is written first, as
    before)."""
    every = [p for h in g.rows or [g] for p in h.sts + h.mvs]
    kept = {x.tensor for parts in every for _, x in parts if x.tensor in views.products}
    moved: dict = {}
    for parts in every:
        for a, x in parts:
            if x.tensor in kept:
                v = _product_view(done[id(a.feeds)][id(x)], *views.products[x.tensor])
                if v is None:
                    kept.discard(x.tensor)
                moved[id(a), id(x)] = v
    if kept:
        view = lambda a, x: moved[id(a), id(x)] if x.tensor in kept else done[id(a.feeds)][id(x)]
        got = _gemm_of(sim, g, view, done, mult, outs_of, operands)
        if any(fn is None for fn in got.values()):  # (the tiles written instead: the GEMMs checked read them)
            return set()
        done.update(got)
    return kept


def _product_view(v: np.ndarray, tile: np.ndarray, terms: np.ndarray):
    """View v of a tile, as the same elements of `terms`: the tile's values, in the shape of
    `tile`, a strided view that covers the tile's array once. tile's axes, merged where both
    views allow, are the digits of a mixed radix over the array's bytes; v's start and each of
    its steps, taken apart into those digits, index terms. None where v's steps carry from one
    digit into the next."""
    digits: list = []  # [step in the tile, length, step in terms], smallest step first
    for k in sorted((k for k in range(tile.ndim) if tile.shape[k] > 1), key=lambda k: tile.strides[k]):
        s, n, t = tile.strides[k], tile.shape[k], terms.strides[k]
        if digits and digits[-1][0] * digits[-1][1] == s and digits[-1][2] * digits[-1][1] == t:
            digits[-1][1] *= n
        else:
            digits.append([s, n, t])
    size = tile.itemsize
    for s, n, _ in digits:
        if s != size:  # (not the whole array, once, in steps of the element: no mixed radix)
            return None
        size *= n
    rest = address(v) - address(tile)
    if v.dtype != tile.dtype or not 0 <= rest < size:
        return None
    start = []
    for s, _, _ in reversed(digits):
        q, rest = divmod(rest, s)
        start.append(q)
    start.reverse()
    if rest:
        return None
    reach, strides = list(start), []
    for n, r in zip(v.shape, v.strides):
        if n == 1 or r == 0:  # (a loop the view does not move with)
            strides.append(0)
            continue
        j = next((j for j in reversed(range(len(digits))) if digits[j][0] <= r), None)
        if j is None or r % digits[j][0]:
            return None
        c = r // digits[j][0]
        reach[j] += c * (n - 1)
        if reach[j] >= digits[j][1]:
            return None
        strides.append(c * digits[j][2])
    out = view_at(terms, address(terms) + sum(q * t for q, (_, _, t) in zip(start, digits)), v.shape,
                  tuple(strides), v.dtype)
    out.flags.writeable = False
    return out


def _copy(sim, dst: np.ndarray, src: np.ndarray) -> None:
    _halves(sim, lambda r, d: np.copyto(d, r(0)), lambda _: src, dst, True)


def _transposed(g: Group, outs_of: dict) -> bool:
    first = next(a for a in g.adds if id(a) in g.applies)
    dst = outs_of[id(first)][0][0]
    return dst.ndim >= 2 and dst.shape[-2] > 1 and abs(dst.strides[-2]) < abs(dst.strides[-1])


def _group_gemm(sim, groups: list, view, mult, outs_of: dict, operands: "_EntryArrays"):
    """One GEMM (the rule's `grouped`) for `groups`, a group alone or those sharing its GEMM
    (Group.rows), over the operand views view(add, access): the shortest group's moving operands,
    every group's stationary ones (the loops beyond the shortest group's as extra axes of their
    views); a function returning each group's products. None where another group's moving views
    differ from those, or the groups' products would be laid out differently. The products are
    laid out as the first sum's destination is: M contiguous there (a tile a matmul reads, stored
    partition-innermost) makes the GEMM compute the transposed product."""
    base = min(groups, key=lambda h: len(h.adds[0].vars))
    nlead = len(base.adds[0].vars)
    op = base.adds[0].feeds.plan.op
    mvs = [[view(a, x) for a, x in parts] for parts in base.mvs]
    sts, subs = [], []
    for h in groups:
        e = len(h.adds[0].vars) - nlead
        for parts, want in zip(h.mvs, mvs):
            for (a, x), w in zip(parts, want):
                v = view(a, x)
                if any(n > 1 and s for n, s in zip(v.shape[nlead:nlead + e], v.strides[nlead:nlead + e])):
                    return None
                v = v[(slice(None),) * nlead + (0,) * e]
                if not same_view(v, w):
                    return None
        views = [[view(a, x) for a, x in parts] for parts in h.sts]
        sts += views
        subs.append((len(h.sts), views[0][0].shape[nlead:nlead + e]))
    if len({_transposed(h, outs_of) for h in groups}) > 1:
        return None
    return base.adds[0].feeds.rule.grouped(sts, mvs, nlead, base.adds[0].reduce, mult,
                                           2 if op.attr("double_row") else 1, partial(_copy, sim),
                                           _transposed(base, outs_of), operands, subs=subs)


def _halves(sim, fn, read, dst: np.ndarray, split: bool) -> None:
    """fn(read, dst), on two cores for a large dst: each half of the first loop axis on one
    thread (numpy lets go of the GIL in its loops). `split`: that axis is one of dst's own (not
    summed away), so the halves write disjoint elements (batched execution is legal only then)."""
    n = dst.shape[0] if dst.ndim else 0
    if not split or n < 2 or dst.size < PARALLEL_ELEMENTS or not sim.cpu.spare():
        fn(read, dst)
        return
    parts = (slice(0, n // 2), slice(n // 2, n))
    part = lambda h: (lambda a: _first_axis(read(a), h))
    later = sim.helper.submit(fn, part(parts[1]), dst[parts[1]])
    fn(part(parts[0]), dst[parts[0]])
    later.result()


def _first_axis(x, h: slice):
    return x[h] if isinstance(x, np.ndarray) and x.ndim else x


def gemm(a: np.ndarray, b: np.ndarray, spare=None, arrays: _EntryArrays | None = None) -> np.ndarray:
    """a @ b for the batched path: BLAS's own threads for a GEMM of THREADED_GEMM_FLOP or more (a
    whole loop nest's product) while a core is to spare (`spare()`, a CpuShare's by default), else
    one thread (the simulator runs under one BLAS thread). With `arrays`, the product lands in one
    of the entry's scratch arrays."""
    flop = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * math.prod(a.shape[:-2])
    out = None
    if arrays is not None and a.dtype == b.dtype == np.float32:
        out = arrays.new(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]))
    if flop >= THREADED_GEMM_FLOP and (spare or CpuShare().spare)():
        with default_blas():
            return np.matmul(a, b, out=out)
    return np.matmul(a, b, out=out)


def _write_back(sim, nest: Nest, views: _Views) -> None:
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
