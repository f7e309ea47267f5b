"""Waits on a rotating DMA (simulator/pending.py): an instruction waits for
the executions that touched its memory, not for every execution so far.
Oracles: a brute-force overlap search for RegionFinishes, and the hand
computed start of each matmul of a kernel whose loads rotate over queues."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.simulator.machine import MachineSimulator
from nkicc.simulator.pending import RegionFinishes
from nkicc.plugins.targets import TRN2


def _overlap(a, b):
    return a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2] and a[3] < b[4] and b[3] < a[4]


@pytest.mark.parametrize("seed", range(4))
def test_latest_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    rf = RegionFinishes()
    recorded = []  # (box, finish)
    t = 0.0
    for _ in range(300):
        t += float(rng.uniform(0, 5))
        boxes = []
        for _ in range(int(rng.integers(1, 3))):
            p0 = int(rng.integers(0, 128)); b0 = int(rng.integers(0, 4096))
            boxes.append((int(rng.integers(0, 3)), p0, p0 + int(rng.integers(0, 16)), b0, b0 + int(rng.integers(1, 512))))
        finish = t + float(rng.uniform(0, 50))
        rf.record(boxes, finish, lambda: 0.0)  # no horizon: nothing may be dropped
        recorded += [(b, finish) for b in boxes]
        q0 = int(rng.integers(0, 128)); c0 = int(rng.integers(0, 4096))
        query = [(int(rng.integers(0, 3)), q0, q0 + 8, c0, c0 + 256)]
        after = t - 20
        want = max([f for b, f in recorded if f > after and _overlap(b, query[0])], default=after)
        assert rf.latest(query, after) == want


def test_pruned_boxes_still_bound_every_wait():
    rf = RegionFinishes()
    for i in range(200):  # disjoint boxes; the horizon lets all but the newest few go
        rf.record([(0, 0, 0, 10 * i, 10 * i + 10)], float(i), lambda i=i: float(i - 3))
    # a box recorded long ago and pruned: its finish still bounds a wait on it
    assert rf.latest([(0, 0, 0, 0, 10)], -1.0) >= 0.0
    assert rf.latest([(0, 0, 0, 1990, 2000)], -1.0) == 199.0


@nkicc.jit
def staged(a, b):
    """Eight tiles loaded into one tensor by a rotating DMA, then one matmul per tile."""
    K, M = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    xa = nl.ndarray((128, K // 128, M), dtype=a.dtype, buffer=nl.sbuf)
    xb = nl.ndarray((128, K // 128, N), dtype=b.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(K // 128):
        nisa.dma_copy(xa[:, k, :], a[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(xb[:, k, :], b[k * 128:(k + 1) * 128, :])
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        nisa.nc_matmul(acc, xa[:, k, :], xb[:, k, :])
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, acc)
    nisa.dma_copy(out, res)
    return out


def test_each_matmul_waits_for_its_own_tiles_only(rng):
    a = rng.standard_normal((1024, 128)).astype(np.float32)
    b = rng.standard_normal((1024, 512)).astype(np.float32)
    c = nkicc.compile(staged, a, b, passes={"target": "trn2"}, cache=False)
    ms = MachineSimulator(c.ir, TRN2, trace=True)
    out, rep = ms.run({"a": a, "b": b})
    np.testing.assert_allclose(out[c.ir.outputs[0]], a.T.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)
    ev = sorted((e for e in ms.trace_dict()["traceEvents"] if e.get("ph") == "X" and e["name"] in
                 ("dma_copy", "nc_matmul")), key=lambda e: e["ts"])
    loads = [e for e in ev if e["name"] == "dma_copy"][:16]
    mms = [e for e in ev if e["name"] == "nc_matmul"]
    assert len(mms) == 8
    ends = sorted(l["ts"] + l["dur"] for l in loads)
    # matmul k starts once two more loads (its pair) are done than matmul k - 1 needed: never before
    # the 2(k+1)-th load finished, and the first one well before the last load finished
    for k, m in enumerate(mms):
        assert m["ts"] >= ends[2 * k + 1] - 1e-6
    assert mms[0]["ts"] < ends[-1] - 1e-6


def test_memory_stays_bounded_when_the_horizon_is_stuck():
    rf = RegionFinishes()
    for i in range(5000):  # the horizon never moves: an engine idle since the start
        rf.record([(0, 0, 0, 10 * i, 10 * i + 10)], float(i), lambda: 0.0)
    assert len(rf._fin) <= 1024
    # the newest boxes are exact; an old one is bounded by what was dropped, never below its finish
    assert rf.latest([(0, 0, 0, 49990, 50000)], -1.0) == 4999.0
    assert rf.latest([(0, 0, 0, 0, 10)], -1.0) >= 0.0


@nkicc.jit
def zeroed_then_loaded(f):
    """A tile zeroed, then filled row block by row block by rotating DMAs (the NKI Library's
    conv1d stacks its filters so: the memset orders before each DMA only through the DMA
    before it), then read whole."""
    R3, C = f.shape
    R = R3 // 3
    out = nl.ndarray((R3, C), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((R3, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    nisa.dma_copy(dst=t[0:R, :], src=f[0:R, :])  # three instructions, as the library's unrolled loop makes
    nisa.dma_copy(dst=t[R:2 * R, :], src=f[R:2 * R, :])
    nisa.dma_copy(dst=t[2 * R:R3, :], src=f[2 * R:R3, :])
    res = nl.ndarray((R3, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=res)
    return out


@nkicc.jit
def loaded_then_overwritten_beside(f):
    """Rows 0..R of a tile loaded by a rotating DMA; an engine writes the other rows (it
    waits for the DMA: they share the tile); then a read of the loaded rows, which the
    schedule must not order after the DMA only through that engine write."""
    R, C = f.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((2 * R, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:R, :], src=f)
    nisa.dma_copy(dst=t[0:R, :], src=f)  # (a second execution: the DMA's rows stay busy longer)
    nisa.memset(dst=t[R:2 * R, :], value=1.0)
    res = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=t[0:R, :], op0=nl.multiply, operand0=3.0)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("kernel,scale", [(zeroed_then_loaded, 2.0), (loaded_then_overwritten_beside, 3.0)])
def test_waits_that_a_rotating_dma_only_implied_are_kept(kernel, scale, rng):
    """A wait on a rotating DMA covers only its executions that touched the waiter's memory,
    so it implies nothing about what those executions themselves waited for: the schedule
    must name every dependence through one itself. Oracle: the hazard checker (E171 on any
    access before its writer finished) and numpy."""
    f = rng.standard_normal((96 if kernel is zeroed_then_loaded else 32, 32)).astype(np.float32)
    c = nkicc.compile(kernel, f, passes={"target": "trn2"}, cache=False)
    out, _ = MachineSimulator(c.ir, TRN2).run({"f": f})
    np.testing.assert_allclose(out[c.ir.outputs[0]], scale * f, rtol=1e-6)


def test_a_rotating_write_drops_only_what_its_one_execution_covers():
    """The schedule's tracker (plugins/schedule.py) forgets an access that a later write covers,
    when the writer or the access is a rotating DMA, only if the writer runs once and touches
    all of a box that holds the access: loads into one tile, unrolled, keep one access each,
    not one per load ever made (a quadratic schedule on an unrolled program); a write of part
    of a tile keeps what it does not cover."""
    from nkicc.plugins.schedule import _Tracker
    row = (0, 4095)
    whole = ("sbuf", *row, True, (0, 127, *row), True)          # a write of the whole tile, once
    tr = _Tracker(rotating=set(range(1000)))
    deps = []
    for i in range(500):
        deps.append(tr.visit(i, [whole]))
    assert len(tr.recent["sbuf"].entries()) == 1 and deps[-1] == {498}
    part = ("sbuf", *row, True, (0, 31, *row), True)            # rows 0..31 only
    tr.visit(500, [part])
    assert sorted(e[0] for e in tr.recent["sbuf"].entries()) == [499, 500]
    in_loop = ("sbuf", *row, True, (0, 127, *row), False)       # the whole tile, but not exactly known
    tr.visit(1000, [in_loop])                                   # (not rotating, inside a loop)
    assert sorted(e[0] for e in tr.recent["sbuf"].entries()) == [499, 500, 1000]
    plain = _Tracker(rotating=set())                            # no rotating DMA: covered is dropped
    plain.visit(1, [part])
    plain.visit(2, [in_loop])
    assert [e[0] for e in plain.recent["sbuf"].entries()] == [2]


def test_the_trackers_range_groups_find_what_a_scan_of_every_access_finds():
    """The tracker groups accesses by range (plugins/schedule.py, _Ranges); oracle: a scan of
    every access kept, with the same rules, on random accesses to a few tiles, parts of them,
    rotating and not, some visited twice (a loop body)."""
    import random

    from nkicc.plugins.schedule import _Tracker, _within

    def scan(recent, rotating, op_id, resources):
        deps = set()
        for res, lo, hi, is_write, _, _ in resources:
            for other, lo2, hi2, w2, _ in recent.get(res, ()):
                if other != op_id and (is_write or w2) and lo <= hi2 and lo2 <= hi:
                    deps.add(other)
        for res, lo, hi, is_write, box, exact in resources:
            entries = recent.setdefault(res, [])
            if is_write:
                entries[:] = [e for e in entries if e[0] == op_id or not (lo <= e[1] and e[2] <= hi) or (
                    (op_id in rotating or e[0] in rotating) and not (exact and _within(e[4], box)))]
            entry = (op_id, lo, hi, is_write, box)
            if entry not in entries:
                entries.append(entry)
        return deps

    rnd = random.Random(7)
    tiles = [(a, a + 2047) for a in range(0, 16384, 2048)] + [(0, 8191), (4096, 6143)]
    rotating = set(range(0, 600, 3))
    tracker, recent = _Tracker(rotating), {}
    ops = []
    for op_id in range(600):
        resources = []
        for _ in range(rnd.randint(1, 3)):
            lo, hi = rnd.choice(tiles)
            p0 = rnd.choice((0, 0, 32))
            resources.append((rnd.choice(("sbuf", "psum")), lo, hi, rnd.random() < 0.4, (p0, 127, lo, hi),
                              rnd.random() < 0.5))
        ops.append((op_id, resources))
        if rnd.random() < 0.2:  # a loop body's second visit
            ops.append((op_id, resources))
    for op_id, resources in ops:
        assert tracker.visit(op_id, resources) == scan(recent, rotating, op_id, resources)
        for res in recent:
            assert sorted(tracker.recent[res].entries()) == sorted(recent[res])
