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
