"""Two VectorE cost rules of the timing model, against the cost table's own constants.

- a tensor_tensor input broadcast over partitions streams as from PSUM (N cycles, not 2N): the
  vendor's compiler broadcasts it with a TensorE instruction into PSUM (ir/ops/elementwise.py);
- an instruction that reads what the instruction before it on its engine wrote shows its static
  overhead (fixed_cycles), which an independent one hides behind its predecessor (timing.py).
Oracle: the estimate's difference between two kernels that differ in that one respect, computed
from the cost table (ir/target.py)."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir.target import TRN1

N, OPS = 512, 12


def _kernel(broadcast: bool, chained: bool):
    @nkicc.jit
    def k(x, y):
        a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        b = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=y)
        other = b.broadcast_to(x.shape) if broadcast else b
        res = nl.ndarray((128, OPS * N), dtype=x.dtype, buffer=nl.sbuf)  # one tile: no buffer is reused
        prev = a
        for i in range(OPS):
            c = res[:, i * N:(i + 1) * N]
            nisa.tensor_tensor(dst=c, data1=prev if chained else a, data2=other, op=nl.add)
            prev = c
        out = nl.ndarray((128, OPS * N), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out
    return k


def _time(broadcast, chained, rng):
    x = rng.standard_normal((128, N)).astype(np.float32)
    y = rng.standard_normal((1 if broadcast else 128, N)).astype(np.float32)
    c = nkicc.compile(_kernel(broadcast, chained), x, y, passes={"target": "trn1"}, cache=False)
    got = c.run(x, y)
    want = np.concatenate([x + (i + 1 if chained else 1) * y for i in range(OPS)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return c.sim.engines["dve"].busy_ns, c.sim


def test_a_partition_broadcast_input_streams_as_from_psum(rng):
    full, _ = _time(False, True, rng)
    bcast, _ = _time(True, True, rng)
    per_op = TRN1.costs.tensor_tensor_factor * N - N  # 2N -> N cycles
    assert full - bcast == pytest.approx(OPS * per_op / TRN1.dve_ghz, rel=1e-6)


def test_a_chain_shows_the_static_overhead_an_independent_run_hides(rng):
    chained, _ = _time(False, True, rng)
    independent, _ = _time(False, False, rng)
    # every instruction after the first reads the one before: each shows fixed_cycles more
    assert chained - independent == pytest.approx((OPS - 1) * TRN1.costs.fixed_cycles / TRN1.dve_ghz, rel=1e-6)
