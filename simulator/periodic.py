"""Closed-form timing of loops whose iterations repeat (issue 14).

The machine simulator times a loop one instruction at a time. In most kernels
the timing settles after an iteration or two: from then on every iteration is
the one before it, later by a constant D (its engines' frees, the finishes of
its instructions, the DMA fabric's busy intervals, the hazard records: all
shifted by D, memory addresses moved by the loop's stride). Rotating DMAs are
dealt round the 16 queues; where an iteration deals them a number of times r
that is not a multiple of 16, queue q + r takes up the state queue q had, so
the queues' frees are compared, and advanced, up to that rotation (_roles).
The timing walk is deterministic, so once the whole state at
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

Times are floats: the state is compared to within _TOL ns, and a skipped
period adds D once per period instead of summing instruction costs, so results
agree with the instruction-level walk up to rounding (relative ~1e-12).
"""
from __future__ import annotations

import numpy as np

from ..ir import Const
from .activity import _merge

_TOL = 1e-6          # ns: two times this close are the same time
_MAX_PERIOD = 16     # iterations a period may span
_MIN_TRIP = 4        # shorter loops: not worth a snapshot per iteration
_MIN_BODY = 8        # instructions per iteration below which a snapshot costs more than it can save
_GIVE_UP = 2 * _MAX_PERIOD + 2  # iterations of one loop entry without a period: stop looking
_MAX_MISSES = 4      # entries of a loop without a period (in one run): stop looking in that loop


class LoopFacts:
    """What a loop's iterations do to memory, worked out once per loop."""
    __slots__ = ("ok", "why", "group_bytes", "acc_elems", "plans", "per_iter", "misses", "hits", "accs", "groups")

    def __init__(self) -> None:
        self.ok = True
        self.why = ""
        self.group_bytes: dict[str, int] = {}   # memory group -> bytes its accesses move per iteration
        self.acc_elems: dict[int, int] = {}     # id(access) -> elements its start moves per iteration
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


def _moves(f: LoopFacts, a: "Snapshot", b: "Snapshot", p: int) -> bool:
    """Set the elements each access, and the bytes each memory group, moves per iteration, from
    where the accesses were p iterations apart (their starts are affine in the iteration: the
    loop index's terms and offsets the body leaves or advances by a constant); False when a
    group's accesses move apart or a tile moves."""
    f.acc_elems, f.group_bytes = {}, {}
    for acc, g, x, y in zip(f.accs, f.groups, a.cur, b.cur):
        d, r = divmod(y - x, p)
        if r or (d and acc.t.onchip):
            return False
        if f.group_bytes.setdefault(g, d * acc.t.item) != d * acc.t.item:
            return False
        f.acc_elems[id(acc)] = d
    return True


def _share_bytes(t, u) -> bool:
    """Whether two tensors' memory overlaps (tiles that live at different times share bytes)."""
    if t.name == u.name:
        return True
    if not (t.onchip and u.onchip) or t.decl.buffer != u.decl.buffer:
        return False
    return t.address < u.address + u.F * u.item and u.address < t.address + t.F * t.item


class Snapshot:
    __slots__ = ("T", "H", "Hw", "floor", "efree", "eexec", "ebusy", "ecount", "counts", "executed", "end_ns",
                 "fin", "rot", "rf", "fab", "blocked", "act_total", "act_live", "hz", "forgotten", "cur")


def snapshot(m, f: LoopFacts) -> Snapshot:
    s = Snapshot()
    s.T = max(m.efree)
    s.H = min(m.efree)          # no instruction not yet timed starts before this
    s.Hw = s.H - m._max_hidden  # nor does its wait begin before this
    s.floor = m._dma_floor() if m._dma_keys else s.H
    s.efree = list(m.efree)
    s.eexec = [m.eexec[k] for k in m._hidden_keys]
    s.ebusy = list(m.ebusy)
    s.ecount = list(m.ecount)
    s.counts = [p.count for p in f.plans]
    s.executed = m.executed
    s.end_ns = m.end_ns
    s.fin = dict(m.finish_of)
    s.rot = m._rot_next
    s.rf = {i: (r.latest_ns, r._dropped_ns, {b: t for b, t in r._fin.items() if t > s.Hw})
            for i, r in m._rot_fin.items()}
    fab = m.fabric
    # no later transfer starts before the floor: what lies before it is history (clipped off)
    s.fab = [(max(lo, s.floor), hi) for lo, hi in fab._busy if hi > s.floor]
    s.blocked = fab._blocked
    act = m.dma_activity
    merged = _merge(act._pending)
    s.act_total = act.closed_ns + sum(hi - lo for lo, hi in merged)
    s.act_live = [(max(lo, s.floor), hi) for lo, hi in merged if hi > s.floor]
    s.hz = [[(k, r) for k, r in d.items() if r[5] > s.H] for d in m._hz_dicts]
    s.forgotten = m.forgotten
    s.cur = [acc.cur for acc in f.accs]
    return s


def _near(x: float, y: float) -> bool:
    return abs(x - y) <= _TOL


def _box(key, db: int, acc_elems, n: int):
    """A hazard record's key moved n iterations on: (p_lo, p_hi, b_lo, b_hi[, id(acc), e])."""
    if len(key) == 4:
        return (key[0], key[1], key[2] + db, key[3] + db)
    return (key[0], key[1], key[2] + db, key[3] + db, key[4], key[5] + acc_elems.get(key[4], 0) * n)


def _rec(r, db: int, de: int, dt: float, ds: int):
    return (r[0], r[1], r[2] + db, r[3] + db, r[4] + dt, r[5] + dt, r[6], r[7], r[8] + de, r[9], r[10], r[11] + ds)


def shift_of(m, f: LoopFacts, a: Snapshot, b: Snapshot, p: int) -> float | None:
    """D when state b (p iterations after a) is state a later by D; else None."""
    D = b.T - a.T
    if not D > 0 or a.forgotten != b.forgotten or m.forgotten or not _moves(f, a, b, p):
        return None
    to = _roles(m, a, b)
    if not all(_near(b.efree[to[e]] - x, D) for e, x in enumerate(a.efree)):
        return None
    # an engine's last execution start matters to an instruction that hides its overhead behind it,
    # which begins no earlier than Hw
    if any(to[key] != key for key in m._hidden_keys):
        return None
    if not all(_near(y - x, D) or (x == y and x <= a.Hw) for x, y in zip(a.eexec, b.eexec)):
        return None
    if not _near(b.end_ns - a.end_ns, D):
        return None
    if a.fin.keys() != b.fin.keys():
        return None
    for k, x in a.fin.items():
        y = b.fin[k]
        if not (_near(y - x, D) or (x == y and x <= a.Hw)):
            return None
    if a.rf.keys() != b.rf.keys():
        return None
    gb = {g: v * p for g, v in f.group_bytes.items()}
    for i, (la, da, boxes_a) in a.rf.items():
        lb, db_, boxes_b = b.rf[i]
        if not (_near(lb - la, D) or (la == lb and la <= a.Hw)):
            return None
        if da > a.Hw or db_ > b.Hw or len(boxes_a) != len(boxes_b):
            return None
        for (g, p0, p1, b0, b1), t in boxes_a.items():
            s = gb.get(g, 0)
            u = boxes_b.get((g, p0, p1, b0 + s, b1 + s))
            if u is None or not _near(u - t, D):
                return None
    if a.blocked > a.floor or b.blocked > b.floor or len(a.fab) != len(b.fab):
        return None
    if not all(_near(c - x, D) and _near(d - y, D) for (x, y), (c, d) in zip(a.fab, b.fab)):
        return None
    if len(a.act_live) != len(b.act_live):
        return None
    if not all(_near(c - x, D) and _near(d - y, D) for (x, y), (c, d) in zip(a.act_live, b.act_live)):
        return None
    ds = b.executed - a.executed
    for g, ra, rb in zip(m._hz_groups, a.hz, b.hz):
        if len(ra) != len(rb):
            return None
        s = gb.get(g, 0)
        want = dict(rb)
        for k, r in ra:
            u = want.get(_box(k, s, f.acc_elems, p))
            if (u is None or u[6] is not r[6] or u[7] is not r[7] or u[0] != r[0] or u[1] != r[1]
                    or u[2] != r[2] + s or u[3] != r[3] + s or u[8] != r[8] + f.acc_elems.get(id(r[7]), 0) * p
                    or u[9] != r[9] or u[10] != r[10] or u[11] - r[11] != ds
                    or not _near(u[4] - r[4], D) or not _near(u[5] - r[5], D)):
                return None
    return D


def _roles(m, a: Snapshot, b: Snapshot) -> list:
    """to[e]: the engine in state b that is in the state engine e was in at a. Rotating DMAs are
    dealt round the queues, so where a period deals them a number of times that is not a multiple
    of the queues, each queue's part passes to the queue that many places on; every other engine
    keeps its own."""
    to = list(range(len(a.efree)))
    keys = m._rot_keys
    r = (b.rot - a.rot) % len(keys) if keys else 0
    for j, e in enumerate(keys if r else ()):
        to[e] = keys[(j + r) % len(keys)]
    return to


def skip(m, f: LoopFacts, a: Snapshot, b: Snapshot, p: int, D: float, k: int) -> None:
    """Advance the machine's timing state from b by k periods of p iterations."""
    n = k * p
    dt = k * D
    to = _roles(m, a, b)
    # the part engine e played from a to b passes to to[e] in the next period, to[to[e]] in the one
    # after: each period's busy time and counts land on the engine playing that part then. The
    # roles come back round after `cycle` periods (1 without rotation, at most the queues), so a
    # step of the cycle is taken whole + (1 if it is among the first `rest` steps) times
    ident = list(range(len(m.efree)))
    cycle, held = 1, to
    while held != ident:
        held, cycle = [to[h] for h in held], cycle + 1
    whole, rest = divmod(k, cycle)
    for i in range(cycle):
        held = [to[h] for h in held]  # (the roles i + 1 periods on)
        times = whole + (i < rest)
        for e, h in enumerate(held):
            m.ebusy[h] += times * (b.ebusy[e] - a.ebusy[e])
            m.ecount[h] += times * (b.ecount[e] - a.ecount[e])
    for _ in range(rest):  # the roles k periods on: k % cycle steps
        held = [to[h] for h in held]
    for e, h in enumerate(held):  # (m.efree is b's now)
        m.efree[h] = b.efree[e] + dt
    for key, x, y in zip(m._hidden_keys, a.eexec, b.eexec):
        if _near(y - x, D):
            m.eexec[key] += dt
    for plan, x, y in zip(f.plans, a.counts, b.counts):
        plan.count += k * (y - x)
    dexec = k * (b.executed - a.executed)
    m.executed += dexec
    m.end_ns += dt
    fin = m.finish_of
    for key, x in a.fin.items():
        if _near(b.fin[key] - x, D):
            fin[key] += dt
    m._rot_next += k * (b.rot - a.rot)
    gb = {g: v * n for g, v in f.group_bytes.items()}
    for i, r in m._rot_fin.items():
        la = a.rf[i][0]
        if _near(r.latest_ns - la, D):
            r.latest_ns += dt
        r._fin = {(g, p0, p1, b0 + gb.get(g, 0), b1 + gb.get(g, 0)): t + dt
                  for (g, p0, p1, b0, b1), t in b.rf[i][2].items()}
    fab = m.fabric
    fab._busy = [[lo + dt, hi + dt] for lo, hi in b.fab]
    act = m.dma_activity
    total = b.act_total + k * (b.act_total - a.act_total)
    act._pending = [(lo + dt, hi + dt) for lo, hi in b.act_live]
    act.closed_ns = total - sum(hi - lo for lo, hi in b.act_live)
    for g, d, live in zip(m._hz_groups, m._hz_dicts, b.hz):
        s = gb.get(g, 0)
        d.clear()
        latest = -float("inf")
        for key, r in live:
            r2 = _rec(r, s, f.acc_elems.get(id(r[7]), 0) * n, dt, dexec)
            d[_box(key, s, f.acc_elems, n)] = r2
            if r2[5] > latest:
                latest = r2[5]
        d.maxfin = latest


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
