"""The timing model (simulator/timing.py): the clock state has one owner.

Oracles: the instruction-by-instruction walk of the same model (a restored
snapshot, or a shifted one, must time what follows as the walk does), and
the source of periodic.py and timing.py (they read no private attribute of
another class)."""
import ast
import copy
import pathlib
from dataclasses import dataclass

import numpy as np
import pytest

from nkicc.plugins.targets import TRN2
from nkicc.simulator.timing import Moved, TimingModel

SIM = pathlib.Path(__file__).resolve().parents[2] / "simulator"
ENGINES = ["pe", "dve", "act", "pool"] + [f"dma.q{q}" for q in range(4)]
QUEUES = [4, 5, 6, 7]


@dataclass(eq=False)
class Plan:
    """The parts of a compiled op (program.Plan) the model reads."""
    id: int
    engine: str
    ekey: int
    cost: float
    hidden: float = 0.0
    fabric_ns: float = 0.0
    waits: tuple = ()
    rotate: bool = False
    tokens: bool = False


def _plans(rng, n: int, rotating: int = 0) -> list[Plan]:
    """n ops, one on each engine and then on random ones, waiting for random others; the first
    `rotating` DMAs rotate."""
    plans, rot = [], 0
    for i in range(n):
        k = i if i < len(ENGINES) else int(rng.integers(len(ENGINES)))
        engine = ENGINES[k] if k < 4 else "dma"
        cost = float(rng.uniform(50, 900))
        p = Plan(i + 1, engine, k, cost)
        if engine != "dma":
            p.hidden = float(rng.uniform(0, 0.9)) * cost
        else:
            p.fabric_ns = float(rng.uniform(0.2, 1.0)) * cost
            p.rotate = rot < rotating
            rot += p.rotate
        p.waits = tuple(sorted({int(w) + 1 for w in rng.integers(0, n, int(rng.integers(0, 3)))}))
        plans.append(p)
    return plans



def closed_form(body, trips: int):
    """A model timed over `trips` iterations of `body` as periodic.py does: iteration by
    iteration until the state at the end of one is the state a period before, later by D; then
    whole periods shifted at once, and the rest walked. Shifting must cover half the trips at
    least (else a comparison with the walk compares nothing)."""
    closed = _model(body)
    snaps, t, shifted = [], 0, 0
    while t < trips:
        for p in body:
            closed.time(p)
        t += 1
        snaps.append(closed.snapshot())
        for per in range(1, min(4, len(snaps) - 1) + 1):
            k = (trips - t) // per
            mv = Moved({}, {}, per, per * len(body))
            D = closed.shift_of(snaps[-1 - per], snaps[-1], lambda: mv) if k and not shifted else None
            if D is not None:
                closed.shift(snaps[-1 - per], snaps[-1], mv, D, k)
                t += k * per
                shifted = k * per
                break
    assert shifted >= trips // 2, shifted  # (else this compares nothing)
    return closed

def _loop_body(rng) -> list[Plan]:
    """A loop body: ops on every engine, each waiting for the op after it (its instance of the
    iteration before: a wait names an op, its latest instance) and for random others, then three
    rotating DMAs. Iterations overlap; each waits for the one before."""
    body = _plans(rng, 10)
    for i, p in enumerate(body):
        p.waits = tuple({body[(i + 1) % len(body)].id} | {q.id for q in body if q.id != p.id and rng.random() < 0.2})
    for i in range(3):
        cost = float(rng.uniform(200, 600))  # (mostly moving bytes: transfers in flight at the period's end)
        body.append(Plan(100 + i, "dma", QUEUES[0], cost, fabric_ns=0.9 * cost, rotate=True, waits=(body[i].id,)))
    return body


def _model(plans) -> TimingModel:
    boxes = {p.id: [("g", 0, 127, 64 * p.id, 64 * p.id + 512)] for p in plans}
    return TimingModel(ENGINES, QUEUES, plans, TRN2.costs, lambda p: boxes[p.id], {"g"})


def _clock(m: TimingModel):
    return (m.end_ns, list(m.efree), list(m.ebusy), list(m.ecount), dict(m.finish_of),
            m.dma_activity.active_ns(), m.rot_next)


@pytest.mark.parametrize("seed", range(6))
def test_a_restored_snapshot_times_what_follows_as_the_walk_does(seed):
    """Everything a later instruction reads is in the snapshot: a fresh model restored from it
    gives every later instruction the times the model it was taken from gives, bit for bit."""
    rng = np.random.default_rng(seed)
    plans = _plans(rng, 24, rotating=2)
    program = [plans[int(i)] for i in rng.integers(0, len(plans), 240)]
    walk = _model(plans)
    for p in program[:150]:
        walk.time(p)
    state = walk.snapshot()
    restored = _model(plans)
    restored.restore(state)
    assert _clock(restored) == _clock(walk)
    for p in program[150:]:
        assert restored.time(p) == walk.time(p)
    assert _clock(restored) == _clock(walk) and restored.end_ns > state.end_ns


def test_a_restore_does_not_share_the_snapshot():
    """Timing after a restore leaves the snapshot as it was (it can be restored again)."""
    rng = np.random.default_rng(7)
    plans = _plans(rng, 12, rotating=1)
    m = _model(plans)
    for p in plans:
        m.time(p)
    state = m.snapshot()
    before = (list(state.efree), list(state.ebusy), dict(state.fin), list(state.fab), state.act.active_ns())
    m.restore(state)
    for p in plans:
        m.time(p)
    assert (list(state.efree), list(state.ebusy), dict(state.fin), list(state.fab), state.act.active_ns()) == before


@pytest.mark.parametrize("seed", range(6))
def test_shifting_whole_periods_gives_the_walk_up_to_rounding(seed):
    """An iteration of the same ops repeated: once the state at the end of one iteration is the
    state a period before later by D, shifting the clock k periods leaves it where walking those
    k periods does (times to rounding, counts exactly), and timing goes on from there alike.
    Three rotating DMAs an iteration over four queues: each period hands a queue's part on."""
    rng = np.random.default_rng(seed)
    body = _loop_body(rng)
    trips = 40
    walk = _model(body)
    for _ in range(trips):
        for p in body:
            walk.time(p)
    closed = closed_form(body, trips)
    assert closed.ecount == walk.ecount and closed.rot_next == walk.rot_next
    np.testing.assert_allclose(closed.efree, walk.efree, rtol=1e-12)
    np.testing.assert_allclose(closed.ebusy, walk.ebusy, rtol=1e-12)
    np.testing.assert_allclose(closed.end_ns, walk.end_ns, rtol=1e-12)
    np.testing.assert_allclose(closed.dma_activity.active_ns(), walk.dma_activity.active_ns(), rtol=1e-12)
    a, b = closed.snapshot(), walk.snapshot()  # and so is what a later instruction reads
    assert a.fin.keys() == b.fin.keys() and a.rf.keys() == b.rf.keys() and len(a.fab) == len(b.fab) > 0
    np.testing.assert_allclose(list(a.fin.values()), list(b.fin.values()), rtol=1e-12)
    np.testing.assert_allclose(a.fab, b.fab, rtol=1e-12)
    np.testing.assert_allclose(a.act_live, b.act_live, rtol=1e-12)
    np.testing.assert_allclose(a.eexec, b.eexec, rtol=1e-12)
    for i in a.rf:
        assert a.rf[i][2].keys() == b.rf[i][2].keys()
        np.testing.assert_allclose([a.rf[i][0]] + list(a.rf[i][2].values()), [b.rf[i][0]] + list(b.rf[i][2].values()),
                                   rtol=1e-12)
    for p in body:  # and the next iteration starts alike
        np.testing.assert_allclose(closed.time(p), walk.time(p), rtol=1e-12)


def test_a_state_changed_in_one_engine_is_no_period():
    """shift_of compares every engine: any one engine free a little later is not the same state."""
    body = _loop_body(np.random.default_rng(3))
    m = _model(body)
    snaps = []
    for _ in range(16):
        for p in body:
            m.time(p)
        snaps.append(m.snapshot())
    per, D = next((per, D) for per in range(1, 5)
                  if (D := m.shift_of(snaps[-1 - per], snaps[-1], lambda: Moved({}, {}, per, 0))) is not None)
    assert D > 0
    for k in range(len(ENGINES)):
        late = copy.copy(snaps[-1])
        late.efree = list(late.efree)
        late.efree[k] += 1.0
        assert m.shift_of(snaps[-1 - per], late, lambda: Moved({}, {}, per, 0)) is None, ENGINES[k]


def _foreign_private(path: pathlib.Path) -> list[str]:
    """`x._name` for an x other than self, and `from m import _name`, in a module's source."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if a.name.startswith("_")]
    return found


@pytest.mark.parametrize("module", ["periodic.py", "timing.py"])
def test_the_closed_form_reads_no_private_attribute_of_another_class(module):
    assert _foreign_private(SIM / module) == []


def test_the_check_sees_a_private_attribute():
    assert _foreign_private(SIM / "machine.py")  # (machine.py reads its plans' and accesses' own)
