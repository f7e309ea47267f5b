"""The machine simulator's timing model: instruction costs and the clock state.

Costs: each instruction's own cost rule (its definition in nkicc.ir.ops)
applied to the constants of the target's table (`target.costs`, nkicc.ir.target).
ESTIMATES, NOT MEASUREMENTS. Cycle counts are engine cycles; an engine's clock
comes from the Target (pe_ghz, dve_ghz, act_ghz, pool_ghz). DMA costs are in
nanoseconds, from the table's DMA engine and HBM bandwidths (docs/fidelity.md
lists every constant).

The clock (`TimingModel`): every engine (pe, dve, act, pool) and every DMA
queue runs its instructions in program order, one at a time; an instruction
starts when its engine is free and the most recent executed instance of every
op in its "wait" attribute has finished; it lasts its cost. The model owns
everything a later instruction's start, or the report, reads: the engines'
frees, busy times and counts, the finishes, the per-box finishes of rotating
DMAs (pending.py), the DMA fabric's busy intervals (fabric.py), the DMA
activity (activity.py), the live hazard records (hazards.py, whose checks the
machine runs) and the loops timed in closed form. MachineSimulator walks the
program and asks the model to time each instruction (`time`).

Three operations work on the state as a whole: `snapshot` (a ClockState: the
part of it a later instruction can read, times before any engine can start
again dropped), `restore` (back to a snapshot: a program whose timing does
not depend on its data reuses its first run's) and `shift_of` / `shift`
(whether one snapshot is another later by D, and advancing the clock by k
such periods: the closed form of simulator/periodic.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

from ..ir import Op, TensorDecl, ops
from ..ir.ops.costs import cost_ns
from ..ir.target import CostTable
from .activity import DmaActivity, percent
from .fabric import Fabric
from .hazards import Records
from .pending import RegionFinishes
from .report import EngineStats

# engines that run compute instructions; DMA queues are separate resources
COMPUTE_ENGINES = ("pe", "dve", "act", "pool")

# engines on which an instruction that reads the output of the instruction before it cannot hide
# its static overhead (fixed_cycles) while that one executes: ARCH1 "Vector Engine" > "Cost Model" (add the 100-cycle
# overhead "with every instruction depending on the output tile of the previous instruction") and
# fused_mamba.rst (that overhead dominates such sequences "on ScalarE/VectorE"). Reads are matched
# by tensor, not by bytes.
CHAINED_ENGINES = ("dve", "act", "pool")
_NOTHING = frozenset()

# the critical path's parts, by the engine that spent them (critical_path below); the last slot
# holds the path's end (its total)
PATH_ENGINES = COMPUTE_ENGINES + ("dma", "other")
_PATH_SLOT = {e: i for i, e in enumerate(PATH_ENGINES)}
_NO_PATH = (0.0,) * (len(PATH_ENGINES) + 1)

_TOL = 1e-6  # ns: two times this close are the same time
_NO_FINISH = repeat(-float("inf"))  # fin.get's default for every wait (map(fin.get, waits, _NO_FINISH))


def traffic_bytes(op: Op, decls: dict[str, TensorDecl]) -> int:
    """Bytes a DMA moves (0 for compute instructions)."""
    rule = ops.of(op).traffic
    return rule(op, decls) if rule is not None else 0


class ClockState:
    """A snapshot of the clock, as far as a later instruction or the report can read it.

    T, H: the latest and earliest engine free; Hw = H less the largest overhead an instruction
    hides behind its predecessor (no instruction not yet timed begins waiting before it); floor:
    the earliest start of a DMA not yet timed. fin: finishes by op id; rf: per rotating DMA,
    (latest finish, latest pruned finish, {box: finish} after Hw); fab: the fabric's busy
    intervals after the floor (clipped there), blocked: before this all counts busy; act_total,
    act_live: the DMA active time so far and its intervals still open after the floor (act: the
    activity itself, for restore); hz: per record group, the hazard records finishing after H."""
    __slots__ = ("T", "H", "Hw", "floor", "efree", "eexec", "ebusy", "ecount", "end_ns", "fin", "rot", "rf",
                 "fab", "blocked", "act_total", "act_live", "act", "hz", "forgotten", "closed_loops",
                 "epath", "fpath", "end_path", "elast")


@dataclass(frozen=True)
class Moved:
    """How memory moved between two snapshots `iterations` iterations of a loop apart:
    group_bytes, the bytes per iteration by memory group; acc_elems, the elements per iteration
    by id(access); executed, the instructions run in between (hazard records' serials)."""
    group_bytes: dict
    acc_elems: dict
    iterations: int
    executed: int


class TimingModel:
    """The clock of one MachineSimulator (see the module docstring). engines: the engine and
    queue names by key; rot_keys: the queues rotating DMAs take in turn; plans: the compiled ops
    (their hidden overheads); boxes(plan): the memory boxes of an op's accesses now; groups: the
    memory groups hazard records are kept by."""

    def __init__(self, engines: list[str], rot_keys: list[int], plans, costs: CostTable, boxes, groups) -> None:
        self.engines = engines
        self.rot_keys = rot_keys
        self.costs = costs
        self.boxes = boxes
        self.groups = sorted(groups)
        self.dma_keys = [k for k, name in enumerate(engines) if name.startswith("dma.q")]
        # an instruction's overhead hidden behind the one before it: the engines that hide some
        # (their last execution start is state), and the largest (how early a wait may begin)
        self.max_hidden = max((p.hidden for p in plans), default=0.0)
        self.hidden_keys = sorted({p.ekey for p in plans if p.hidden > 0})
        # waits on rotating DMAs look at the memory boxes their executions touched (pending.py);
        # the others only at the latest finish
        rot_ids = {p.id for p in plans if p.rotate}
        for p in plans:
            p.wait_rot = () if p.tokens else tuple(w for w in p.waits if w in rot_ids)
            rot = set(p.wait_rot)  # (an op may wait on thousands: a tuple scan was 57 s of attention_cte at 16 K under py-spy)
            p.wait_plain = tuple(w for w in p.waits if w not in rot)
        self.reset()

    def reset(self) -> None:
        """The clock at the start of a run: every engine free at 0."""
        n = len(self.engines)
        self.efree = [0.0] * n
        self.eexec = [0.0] * n  # when the engine's last instruction began executing (past its overhead)
        self.ebusy = [0.0] * n
        self.ecount = [0] * n
        self.rot_next = 0
        self.fabric = Fabric()  # the core's HBM bandwidth, shared by the DMA queues (fabric.py)
        self.finish_of: dict[int, float] = {}
        self.rot_fin: dict[int, RegionFinishes] = {}  # rotating DMA id -> its executions' finishes by memory
        self.end_ns = 0.0
        self.dma_activity = DmaActivity()  # the union of the DMA queues' busy time (activity.py)
        # hazard records per memory group, writes and reads (hazards.py); `records` lists them all,
        # record_groups their groups
        self.writes = {g: Records() for g in self.groups}
        self.reads = {g: Records() for g in self.groups}
        self.records = list(self.writes.values()) + list(self.reads.values())
        self.record_groups = self.groups + self.groups
        self.forgotten = 0  # hazard records forgotten to bound memory
        self.closed_loops: dict[str, int] = {}  # loop label -> iterations timed in closed form
        # the critical path (longest chain of instructions, each started by the one before it: its
        # engine's previous instruction or the wait that finished last), as time per engine: the
        # chain ending at each engine's last instruction, at each op's latest finish, and at the end
        self.epath = [_NO_PATH] * n
        self.fpath: dict[int, tuple] = {}
        self.elast = [_NOTHING] * n  # the tensors each engine's last instruction wrote
        self.end_path = _NO_PATH

    def release(self) -> None:
        """Drop the hazard records (MachineSimulator.release_memory)."""
        self.records = []
        self.writes, self.reads = {}, {}

    # --- one instruction -------------------------------------------------------------------

    def time(self, p, meet=None) -> tuple[float, float]:
        """Time the op of plan p: (start, finish). meet(ready): a collective's start, when the last
        rank of its group is ready."""
        if p.rotate:
            k = p.ekey = self.rot_keys[self.rot_next % len(self.rot_keys)]
            self.rot_next += 1
        else:
            k = p.ekey
        self.ecount[k] += 1
        free = self.efree[k]
        # A compute engine decodes an instruction's static overhead (and TensorE loads the next
        # stationary) while the one before it executes (ARCH1 "Cost Model", "Background
        # LoadStationary": back-to-back instructions pay only their execution); that part is
        # exposed when the instruction waits for its inputs or its predecessor is short.
        hidden = p.hidden
        chain = getattr(p, "chain_reads", None)
        if hidden and chain and not chain.isdisjoint(self.elast[k]):
            hidden = p.chain_hidden  # it reads what the one before it writes: its static overhead shows
        start = free - hidden
        fin = self.finish_of
        src = None  # the op whose finish set the start (None: the engine's previous instruction)
        if p.wait_plain:
            f = max(map(fin.get, p.wait_plain, _NO_FINISH))
            if f > start:
                start = f
                src = max(p.wait_plain, key=lambda w: fin.get(w, -float("inf")))
        boxes = None
        for w in p.wait_rot:  # a rotating DMA: only its executions that touched this op's memory
            f = fin.get(w)
            if f is not None and f > start:
                if boxes is None:
                    boxes = self.boxes(p)
                was = start
                start = self.rot_fin[w].latest(boxes, start)  # max(start, those executions' finish)
                if start > was:
                    src = w
        if meet is not None:  # a collective: it starts when the last rank of its group is ready
            start = meet(start)
        if p.hidden:
            if start < self.eexec[k]:  # one instruction in decode while the one before it executes
                start = self.eexec[k]
                src = None
            self.eexec[k] = start + hidden
        if chain is not None:
            self.elast[k] = p.chain_writes
        finish = start + p.cost
        if start < free:
            start = free  # the engine's span begins when it is free: the overhead ran before that
        if p.fabric_ns:  # the queues share the core's DMA engines: overlapping transfers queue for them
            f = self.fabric.reserve(start + self.costs.dma_fixed_ns, p.fabric_ns, self.dma_floor)
            if f > finish:
                finish = f
        self.efree[k] = finish
        self.ebusy[k] += finish - start  # a DMA is in flight while it waits for the shared engines too
        if p.rotate:  # executions on different queues finish out of order: kept per memory box (pending.py)
            rot = self.rot_fin.get(p.id)
            if rot is None:
                rot = self.rot_fin[p.id] = RegionFinishes()
            rot.record(self.boxes(p), finish, self.horizon)
            fin[p.id] = rot.latest_ns
        else:
            fin[p.id] = finish
        # the chain that led here, and this instruction's part: from its predecessor's finish to its own
        path = list(self.epath[k] if src is None else self.fpath.get(src, _NO_PATH))
        path[_PATH_SLOT.get(p.engine, -2)] += finish - path[-1]
        path[-1] = finish
        path = tuple(path)
        self.epath[k] = path
        if fin[p.id] == finish:
            self.fpath[p.id] = path
        if finish > self.end_ns:
            self.end_ns = finish
            self.end_path = path
        if p.engine == "dma":
            self.dma_activity.add(start, finish, self.dma_floor)
        return start, finish

    def horizon(self) -> float:
        """No instruction not yet timed, on an engine or queue that has run
        one, can begin waiting before this: the earliest such an engine frees,
        less the largest overhead an instruction hides behind its predecessor
        (so that what is pruned before it can never change a later start)."""
        return min((f for f, n in zip(self.efree, self.ecount) if n), default=0.0) - self.max_hidden

    def dma_floor(self) -> float:
        """The earliest start a DMA not yet timed can have: when the first queue frees."""
        efree = self.efree
        return min(efree[k] for k in self.dma_keys)

    def critical_path(self) -> dict[str, float]:
        """Engine -> its share (percent) of the critical path: the chain of instructions that ends
        last, each started by its predecessor on the chain (its engine's previous instruction or the
        input it waited for last). An instruction's part runs from its predecessor's finish to its
        own, so a wait for the shared DMA engines counts as DMA and an exposed overhead as the
        engine's; the parts add up to the estimated time."""
        path = self.end_path
        if not path[-1] > 0:
            return {}
        return {e: round(100.0 * t / path[-1], 2) for e, t in zip(PATH_ENGINES, path) if t > _TOL}

    def fill(self, engines: dict, queues: dict, total: float | None) -> None:
        """Put the busy times and counts of the engines and of the DMA queues as executed into
        the report's EngineStats (by name), and their active time as a share of `total`."""
        for k, name in enumerate(self.engines):
            if name.startswith("dma.q") and self.ecount[k]:  # queues as executed: rotating DMAs move between them
                q = queues.setdefault(f"q{name[5:]}", EngineStats())
                q.instructions += self.ecount[k]
                q.busy_ns += self.ebusy[k]
            elif name in COMPUTE_ENGINES:  # its instructions' spans: overheads it hid are not counted
                engines[name].busy_ns = self.ebusy[k]
        if total:  # active time as neuron-profile counts it (activity.py)
            for name, s in engines.items():
                s.active_pct = percent(self.dma_activity.active_ns() if name == "dma" else s.busy_ns, total)
            for s in queues.values():
                s.active_pct = percent(s.busy_ns, total)

    # --- the state as a whole --------------------------------------------------------------

    def snapshot(self) -> ClockState:
        s = ClockState()
        efree = self.efree
        s.T = max(efree, default=0.0)
        s.H = min(efree, default=0.0)  # no instruction not yet timed starts before this
        s.Hw = s.H - self.max_hidden   # nor does its wait begin before this
        s.floor = self.dma_floor() if self.dma_keys else s.H
        s.efree = list(efree)
        s.eexec = [self.eexec[k] for k in self.hidden_keys]
        s.ebusy = list(self.ebusy)
        s.ecount = list(self.ecount)
        s.end_ns = self.end_ns
        s.fin = dict(self.finish_of)
        s.rot = self.rot_next
        s.rf = {i: (r.latest_ns, r.dropped_ns, r.live(s.Hw)) for i, r in self.rot_fin.items()}
        # no later transfer starts before the floor: what lies before it is history (clipped off)
        s.fab = self.fabric.live(s.floor)
        s.blocked = self.fabric.blocked
        s.act_total, s.act_live = self.dma_activity.state(s.floor)
        s.act = self.dma_activity.copy()
        s.hz = [[(k, r) for k, r in d.items() if r[5] > s.H] for d in self.records]
        s.forgotten = self.forgotten
        s.closed_loops = dict(self.closed_loops)
        s.epath, s.fpath, s.end_path = list(self.epath), dict(self.fpath), self.end_path
        s.elast = list(self.elast)
        return s

    def restore(self, s: ClockState) -> None:
        """The clock as it was at snapshot s, as far as a later instruction or the report can tell."""
        self.efree, self.ebusy, self.ecount = list(s.efree), list(s.ebusy), list(s.ecount)
        self.eexec = [0.0] * len(self.engines)
        for k, t in zip(self.hidden_keys, s.eexec):
            self.eexec[k] = t
        self.end_ns = s.end_ns
        self.finish_of = dict(s.fin)
        self.rot_next = s.rot
        self.rot_fin = {}
        for i, (latest, dropped, boxes) in s.rf.items():
            r = self.rot_fin[i] = RegionFinishes()
            r.load(dict(boxes), latest, dropped)
        self.fabric = Fabric()
        self.fabric.load(s.fab, s.blocked)
        self.dma_activity = s.act.copy()
        for d, live in zip(self.records, s.hz):
            _refill(d, live)
        self.forgotten = s.forgotten
        self.closed_loops = dict(s.closed_loops)
        self.epath, self.fpath, self.end_path = list(s.epath), dict(s.fpath), s.end_path
        self.elast = list(s.elast)

    def roles(self, a: ClockState, b: ClockState) -> list:
        """to[e]: the engine in state b that is in the state engine e was in at a. Rotating DMAs are
        dealt round the queues, so where a period deals them a number of times that is not a multiple
        of the queues, each queue's part passes to the queue that many places on; every other engine
        keeps its own."""
        to = list(range(len(a.efree)))
        keys = self.rot_keys
        r = (b.rot - a.rot) % len(keys) if keys else 0
        for j, e in enumerate(keys if r else ()):
            to[e] = keys[(j + r) % len(keys)]
        return to

    def shift_of(self, a: ClockState, b: ClockState, moved) -> float | None:
        """D when state b is state a later by D (and moved in memory); else None. moved(): a Moved,
        or None where memory did not move evenly (asked once the cheap checks have passed)."""
        D = b.T - a.T
        if not D > 0 or a.forgotten != b.forgotten or self.forgotten:
            return None
        mv = moved()
        if mv is None:
            return None
        p = mv.iterations
        to = self.roles(a, b)
        if not all(_near(b.efree[to[e]] - x, D) for e, x in enumerate(a.efree)):
            return None
        # an engine's last execution start matters to an instruction that hides its overhead behind it,
        # which begins no earlier than Hw
        if any(to[key] != key or a.elast[key] != b.elast[key] for key in self.hidden_keys):
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
        gb = {g: v * p for g, v in mv.group_bytes.items()}
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
        ds = mv.executed
        elems = mv.acc_elems
        for g, ra, rb in zip(self.record_groups, a.hz, b.hz):
            if len(ra) != len(rb):
                return None
            s = gb.get(g, 0)
            want = dict(rb)
            for k, r in ra:
                u = want.get(_box(k, s, elems, p))
                if (u is None or u[6] is not r[6] or u[7] is not r[7] or u[0] != r[0] or u[1] != r[1]
                        or u[2] != r[2] + s or u[3] != r[3] + s or u[8] != r[8] + elems.get(id(r[7]), 0) * p
                        or u[9] != r[9] or u[10] != r[10] or u[11] - r[11] != ds
                        or not _near(u[4] - r[4], D) or not _near(u[5] - r[5], D)):
                    return None
        return D

    def shift(self, a: ClockState, b: ClockState, mv: Moved, D: float, k: int) -> None:
        """Advance the clock, in state b now, by k periods: b is a later by D (shift_of), memory
        moved by mv."""
        n = k * mv.iterations
        dt = k * D
        to = self.roles(a, b)
        # the part engine e played from a to b passes to to[e] in the next period, to[to[e]] in the one
        # after: each period's busy time and counts land on the engine playing that part then. The
        # roles come back round after `cycle` periods (1 without rotation, at most the queues), so a
        # step of the cycle is taken whole + (1 if it is among the first `rest` steps) times
        ident = list(range(len(self.efree)))
        cycle, held = 1, to
        while held != ident:
            held, cycle = [to[h] for h in held], cycle + 1
        whole, rest = divmod(k, cycle)
        for i in range(cycle):
            held = [to[h] for h in held]  # (the roles i + 1 periods on)
            times = whole + (i < rest)
            for e, h in enumerate(held):
                self.ebusy[h] += times * (b.ebusy[e] - a.ebusy[e])
                self.ecount[h] += times * (b.ecount[e] - a.ecount[e])
        for _ in range(rest):  # the roles k periods on: k % cycle steps
            held = [to[h] for h in held]
        # the critical path over k periods: each period adds what one period added to the path that
        # ends last (its parts sum to D, as the end moves by D)
        step = tuple(k * (y - x) for x, y in zip(a.end_path, b.end_path))
        epath = list(self.epath)
        for e, h in enumerate(held):  # (self.efree is b's now)
            self.efree[h] = b.efree[e] + dt
            epath[h] = _plus(b.epath[e], step)
        self.epath = epath
        self.end_path = _plus(b.end_path, step)
        for key, x, y in zip(self.hidden_keys, a.eexec, b.eexec):
            if _near(y - x, D):
                self.eexec[key] += dt
        dexec = k * mv.executed
        self.end_ns += dt
        fin = self.finish_of
        fpath = self.fpath
        for key, x in a.fin.items():
            if _near(b.fin[key] - x, D):
                fin[key] += dt
                if key in fpath:
                    fpath[key] = _plus(fpath[key], step)
        self.rot_next += k * (b.rot - a.rot)
        gb = {g: v * n for g, v in mv.group_bytes.items()}
        for i, r in self.rot_fin.items():
            la = a.rf[i][0]
            latest = r.latest_ns + dt if _near(r.latest_ns - la, D) else r.latest_ns
            r.load({(g, p0, p1, b0 + gb.get(g, 0), b1 + gb.get(g, 0)): t + dt
                    for (g, p0, p1, b0, b1), t in b.rf[i][2].items()}, latest, r.dropped_ns)
        self.fabric.load(b.fab, self.fabric.blocked, dt)
        self.dma_activity.load(b.act_total + k * (b.act_total - a.act_total), b.act_live, dt)
        elems = mv.acc_elems
        for g, d, live in zip(self.record_groups, self.records, b.hz):
            s = gb.get(g, 0)
            _refill(d, [(_box(key, s, elems, n), _rec(r, s, elems.get(id(r[7]), 0) * n, dt, dexec))
                        for key, r in live])


def _plus(path: tuple, step: tuple) -> tuple:
    return tuple(x + y for x, y in zip(path, step))


def _near(x: float, y: float) -> bool:
    return abs(x - y) <= _TOL


def _box(key, db: int, acc_elems, n: int):
    """A hazard record's key moved n iterations on: (p_lo, p_hi, b_lo, b_hi[, id(acc), e])."""
    if len(key) == 4:
        return (key[0], key[1], key[2] + db, key[3] + db)
    return (key[0], key[1], key[2] + db, key[3] + db, key[4], key[5] + acc_elems.get(key[4], 0) * n)


def _rec(r, db: int, de: int, dt: float, ds: int):
    """A hazard record (hazards.py) moved db bytes, de elements, dt ns and ds instructions on."""
    return (r[0], r[1], r[2] + db, r[3] + db, r[4] + dt, r[5] + dt, r[6], r[7], r[8] + de, r[9], r[10], r[11] + ds)


def _refill(d: Records, live) -> None:
    """Hold exactly the (key, record) pairs `live` in d."""
    d.clear()
    latest = -float("inf")
    for key, r in live:
        d[key] = r
        if r[5] > latest:
            latest = r[5]
    d.maxfin = latest


__all__ = ["CostTable", "cost_ns", "traffic_bytes", "COMPUTE_ENGINES", "ClockState", "Moved", "TimingModel"]
