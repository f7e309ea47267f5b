"""Closed-form timing of loops whose iterations repeat (issue 14).

The machine simulator times a loop one instruction at a time. In most kernels
the timing settles after an iteration or two: from then on every iteration is
the one before it, later by a constant D (its engines' frees, the finishes of
its instructions, the DMA fabric's busy intervals, the hazard records: all
shifted by D, memory addresses moved by the loop's stride). Rotating DMAs are
dealt round the 16 queues; where an iteration deals them a number of times r
that is not a multiple of 16, queue q + r takes up the state queue q had, so
the queues' frees are compared, and advanced, up to that rotation
(TimingModel.roles). The timing walk is deterministic, so once the whole state at
the end of iteration i equals the state at the end of iteration i - p shifted
by D, iterations i + 1 .. are copies of iterations i - p + 1 .. i shifted by D
(and p strides further in memory): skip whole periods, adding D to every time,
their busy time, instruction counts and DMA active time to the accumulators.

What "the whole state" means: everything a later instruction's times or
hazard checks read. Parts that no later instruction can read are left out of
the comparison, and dropped when skipping (which changes nothing): a finish
no later start can precede (at or before the earliest engine free minus the
largest hidden overhead), fabric and DMA activity time before any DMA queue
frees (intervals are clipped there: no later transfer starts before it),
hazard records finishing before every engine frees.

Hazards (E171) in skipped iterations: every access of the loop must move by
the same bytes per iteration within its memory group (on-chip tiles must not
move at all, and no indirect offsets), so an iteration's hazard checks are its
predecessor's translated in memory and time; the live records they run against
are compared too, so a skipped check is one that already ran and passed. A
runtime offset qualifies where the IR shows it moving by a constant: the body
never writes it, or advances it once per iteration by adding a constant
(nisa.tensor_scalar, as the seed's hardware loops do); each access then moves
by what its start moved between the two compared iterations. Loops that do not
qualify, and loops that never become periodic, are timed instruction by
instruction as before.

Two kinds of loop: one whose data a batched run has already computed (only
its timing is walked), and one that computes its data as it is timed (a
hardware loop the batched path cannot take, such as one that advances the
offset it reads). In the second, the skipped iterations still run, for their
data alone (MachineSimulator._replay): their timing is what was skipped.

The clock's part of the state, its comparison and its advance are the timing
model's (simulator/timing.py: snapshot, shift_of, shift); this module finds
the loops that qualify, how their accesses move, and when to skip.

Times are floats: the state is compared to within timing._TOL ns, and a skipped
period adds D once per period instead of summing instruction costs, so results
agree with the instruction-level walk up to rounding (relative ~1e-12).
"""
from __future__ import annotations

import numpy as np

from ..ir import Const
from .timing import Moved

_MAX_PERIOD = 16     # iterations a period may span
_MIN_TRIP = 4        # shorter loops: not worth a snapshot per iteration
_MIN_BODY = 8        # instructions per iteration below which a snapshot costs more than it can save
_GIVE_UP = 2 * _MAX_PERIOD + 2  # iterations of one loop entry without a period: stop looking
_MAX_MISSES = 4      # entries of a loop without a period (in one run): stop looking in that loop


class LoopFacts:
    """What a loop's iterations do to memory, worked out once per loop."""
    __slots__ = ("ok", "why", "plans", "per_iter", "misses", "hits", "accs", "groups")

    def __init__(self) -> None:
        self.ok = True
        self.why = ""
        self.accs: list = []                    # every access of the body, once
        self.groups: list[str] = []             # the memory group of each
        self.plans: list = []                   # the plans of the body (nested loops included)
        self.per_iter = 0                       # instructions per iteration (static loops)
        self.misses = self.hits = 0             # entries of the loop without / with a period, this run


def loop_facts(m, spec) -> LoopFacts:
    var, trip, body = spec[0], spec[1], spec[2]
    f = LoopFacts()
    advancing = set()  # id() of the body's ops that advance a runtime offset tile (outside nested loops)

    def walk(items, mult):
        for kind, x in items:
            if kind == 0:
                f.plans.append(x)
                f.per_iter += mult
                if mult == 1 and _advance(x):
                    advancing.add(id(x))
            elif kind in (2, 4):
                inner = x if kind == 2 else x[0]
                walk(inner[2], mult * inner[1])
            elif kind == 3:
                f.ok, f.why = False, "a runtime loop inside"
            # kind 1 (an Alloc) poisons memory: no timing
    walk(body, 1)
    if trip < _MIN_TRIP or f.per_iter < _MIN_BODY:
        f.ok, f.why = False, "short"
    writes = [(p, acc.t) for p in f.plans for acc in p.hz_writes]
    seen = set()
    for p in f.plans:
        if not f.ok:
            break
        if p.collective is not None:
            f.ok, f.why = False, "a collective"
            break
        for acc in list(p.accs) + list(p.scalars) + list(p.hz_reads) + list(p.hz_writes):
            if acc.vector is not None:
                f.ok, f.why = False, "an indirect offset"
                break
            if acc.scalar is not None:
                writers = {id(w) for w, t in writes if _share_bytes(acc.scalar.t, t)}
                # an offset the body never writes stays put; one it advances by a constant once per
                # iteration moves the access by a constant (in HBM only: tiles must stay put)
                if writers and not (writers <= advancing and len(writers) == 1 and not acc.t.onchip):
                    f.ok, f.why = False, "a runtime offset the loop changes"
                    break
            if acc.t.onchip and any(v == var for v, _ in acc.terms):
                f.ok, f.why = False, "an on-chip access moves with the loop index"
                break
            if id(acc) not in seen:
                seen.add(id(acc))
                f.accs.append(acc)
                f.groups.append(m.neighbours[acc.t.name])
    return f


def _advance(p) -> bool:
    """Whether the op adds a constant to a one-element tile in place (an offset's advance)."""
    op = p.op
    return (op.opcode == "tensor_scalar" and op.attr("op0") == "add" and op.attr("op1") is None
            and len(op.ins) == 2 and isinstance(op.ins[1], Const) and len(p.outs) == 1
            and p.outs[0].static and p.outs[0].count == 1 and op.ins[0] == op.outs[0]
            and np.issubdtype(p.outs[0].t.dtype, np.integer))


def _moves(f: LoopFacts, a: "Snapshot", b: "Snapshot", p: int) -> Moved | None:
    """How memory moved from a to b, p iterations on: the elements each access, and the bytes
    each memory group, moves per iteration, from where the accesses were (their starts are affine
    in the iteration: the loop index's terms and offsets the body leaves or advances by a
    constant); None when a group's accesses move apart or a tile moves."""
    acc_elems, group_bytes = {}, {}
    for acc, g, x, y in zip(f.accs, f.groups, a.cur, b.cur):
        d, r = divmod(y - x, p)
        if r or (d and acc.t.onchip):
            return None
        if group_bytes.setdefault(g, d * acc.t.item) != d * acc.t.item:
            return None
        acc_elems[id(acc)] = d
    return Moved(group_bytes, acc_elems, p, b.executed - a.executed)


def _share_bytes(t, u) -> bool:
    """Whether two tensors' memory overlaps (tiles that live at different times share bytes)."""
    if t.name == u.name:
        return True
    if not (t.onchip and u.onchip) or t.decl.buffer != u.decl.buffer:
        return False
    return t.address < u.address + u.F * u.item and u.address < t.address + t.F * t.item


class Snapshot:
    """The state at the end of an iteration: the clock's (timing.ClockState), the plans'
    instruction counts, the instructions executed and where each access of the body starts."""
    __slots__ = ("clock", "counts", "executed", "cur")


def snapshot(m, f: LoopFacts) -> Snapshot:
    s = Snapshot()
    s.clock = m.clock.snapshot()
    s.counts = [p.count for p in f.plans]
    s.executed = m.executed
    s.cur = [acc.cur for acc in f.accs]
    return s


def shift_of(m, f: LoopFacts, a: Snapshot, b: Snapshot, p: int) -> float | None:
    """D when state b (p iterations after a) is state a later by D; else None."""
    return m.clock.shift_of(a.clock, b.clock, lambda: _moves(f, a, b, p))


def skip(m, f: LoopFacts, a: Snapshot, b: Snapshot, p: int, D: float, k: int) -> None:
    """Advance the machine's timing state from b by k periods of p iterations."""
    m.clock.shift(a.clock, b.clock, _moves(f, a, b, p), D, k)
    for plan, x, y in zip(f.plans, a.counts, b.counts):
        plan.count += k * (y - x)
    m.executed += k * (b.executed - a.executed)


def run_loop(m, spec, f: LoopFacts, block, replay=None) -> int:
    """Time the loop's iterations, skipping whole periods once the state repeats;
    returns how many iterations were skipped. replay(body, var, iterations): where `block` also
    computes the data, what runs the skipped iterations for their data alone."""
    var, trip = spec[0], spec[1]
    env = m.env
    snaps: list[Snapshot] = []
    skipped = 0
    # a snapshot costs about as much as timing a few dozen instructions: stop taking them in a
    # loop that has shown no period for a while
    looking = f.hits or f.misses < _MAX_MISSES
    t = 0
    while t < trip:
        env[var] = t
        block(spec[2])
        t += 1
        if not looking or skipped or trip - t < 1 or t > _GIVE_UP:
            continue
        s = snapshot(m, f)
        snaps.append(s)
        for p in range(1, min(_MAX_PERIOD, len(snaps) - 1) + 1):
            k = (trip - t) // p
            if k < 1:
                break
            D = shift_of(m, f, snaps[-1 - p], s, p)
            if D is not None:
                skip(m, f, snaps[-1 - p], s, p, D, k)
                if replay is not None:
                    replay(spec[2], var, range(t, t + k * p), f.plans)
                t += k * p
                skipped = k * p
                break
        if len(snaps) > _MAX_PERIOD + 1:
            del snaps[0]
    env.pop(var, None)
    if looking:
        if skipped:
            f.hits += 1
        else:
            f.misses += 1
    return skipped
