"""The critical path in the simulation report (SimReport.critical_path, .bound).

Oracles: kernels whose bound is known by construction (a chain of VectorE
instructions each reading the one before; a train of large loads each
followed by a short VectorE op), the engines' busy times of the same run
(on a serial chain every instruction of the engine is on the path), and the
instruction-by-instruction walk for the closed form of repeating loops."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.plugins.targets import TRN2
from nkicc.simulator.machine import MachineSimulator
from tests.simulator.test_timing_model import _loop_body, _model, closed_form


@nkicc.jit
def vector_chain(x, y):
    """One load each, then 24 VectorE ops, each reading the one before: VectorE-bound."""
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    for _ in range(24):
        c = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)
        a = c
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


@nkicc.jit
def load_train(x):
    """Sixteen 128 x 2048 fp32 loads (1 MiB each), each followed by one VectorE op on a 4-element
    slice of it: DMA-bound."""
    out = nl.ndarray((128, 4 * 16), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(16):
        t = nl.ndarray((128, 2048), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        r = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r, data1=t[:, 0:4], data2=t[:, 4:8], op=nl.multiply)
        nisa.dma_copy(dst=out[:, i * 4:(i + 1) * 4], src=r)
    return out


def _simulate(kernel, *arrays, target="trn2"):
    c = nkicc.compile(kernel, *arrays, passes={"target": target}, cache=False)
    c.run(*arrays)
    return c.sim


def test_a_vector_chain_is_bound_by_vectore(rng):
    x, y = (rng.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    r = _simulate(vector_chain, x, y)
    assert r.bound == "dve"
    assert sum(r.critical_path.values()) == pytest.approx(100.0, abs=0.05)
    # every VectorE instruction is on the chain: its part of the path is its busy time
    assert r.critical_path["dve"] == pytest.approx(100 * r.engines["dve"].busy_ns / r.total_ns, abs=0.05)
    assert r.critical_path["dve"] > 80
    assert set(r.critical_path) <= {"dve", "dma"}
    assert "bound by VectorE" in r.summary()


def test_a_load_train_is_bound_by_dma(rng):
    x = rng.standard_normal((16, 128, 2048)).astype(np.float32)
    r = _simulate(load_train, x)
    assert r.bound == "dma"
    assert sum(r.critical_path.values()) == pytest.approx(100.0, abs=0.05)
    assert r.critical_path["dma"] > 90
    assert r.critical_path.get("dve", 0.0) < 100 * r.engines["dve"].busy_ns / r.total_ns + 0.05
    assert r.to_dict()["critical_path"] == r.critical_path


def test_the_closed_form_gives_the_walks_critical_path(rng):
    """A loop timed in closed form (whole periods skipped) ends on the path the walk finds."""
    x = rng.standard_normal((16, 128, 2048)).astype(np.float32)
    c = nkicc.compile(load_train, x, passes={"target": "trn2"}, cache=False)
    on, off = (MachineSimulator(c.ir, TRN2, closed_form=closed).run(dict(zip(c.ir.args, [x])))[1]
               for closed in (True, False))
    assert on.closed_form_loops and not off.closed_form_loops
    assert on.total_ns == pytest.approx(off.total_ns, rel=1e-9)
    assert on.critical_path.keys() == off.critical_path.keys()
    for e in off.critical_path:
        assert on.critical_path[e] == pytest.approx(off.critical_path[e], abs=0.02)


@pytest.mark.parametrize("seed", range(4))
def test_shifting_whole_periods_moves_the_path_as_the_walk_does(seed):
    """The timing model alone (random loop bodies over every engine and rotating DMAs): k periods
    shifted in closed form end on the path composition the walk of those k periods ends on."""
    r = np.random.default_rng(seed)
    body = _loop_body(r)
    trips = 40
    walk = _model(body)
    for _ in range(trips):
        for p in body:
            walk.time(p)
    closed = closed_form(body, trips)
    np.testing.assert_allclose(closed.end_path, walk.end_path, rtol=1e-9, atol=1e-6)
    assert sum(walk.end_path[:-1]) == pytest.approx(walk.end_ns, rel=1e-12)
