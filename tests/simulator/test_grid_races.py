"""Programs of a launch that write the same elements of a shared tensor (W191).

The NKI Library's cascaded_max tests launch a kernel on two programs that each
fill the whole output with zeros and then store their own rows. Run one
program after the other, the second program's fill erases the first one's
rows; cores that start together both fill before either stores. nkicc warns
(W191) and runs such a launch's programs side by side, a top-level statement
of each in turn. Oracle: numpy (the rows the programs store); a launch without
the race keeps the ordinary rolled-grid path."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


def _exp_of_my_rows(x, out):
    """This program's share of the rows of `out`: exp of the same rows of x."""
    pid, n_prgs = nl.program_id(0), nl.num_programs(0)
    rows = x.shape[0] // n_prgs
    mine = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[nl.ds(pid * rows, rows), :])
    nisa.activation(dst=mine, op=nl.exp, data=mine)
    nisa.dma_copy(dst=out[nl.ds(pid * rows, rows), :], src=mine)


@nkicc.jit
def fill_then_store(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(zeros, 0)
    nisa.dma_copy(dst=out, src=zeros)
    _exp_of_my_rows(x, out)
    return out


@nkicc.jit
def own_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _exp_of_my_rows(x, out)
    return out


@nkicc.jit
def same_fill_only(x):
    b, n = x.shape
    out = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("programs", [2, 4])
@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_programs_that_fill_then_store_keep_every_programs_rows(rng, programs, simulator):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    ck = fill_then_store[programs].compile(x)
    assert [w.split("]")[0] for w in ck.report["warnings"]] == ["warning[W191"]
    assert ":33:" in ck.report["warnings"][0]  # the fill of the whole output
    assert ck.report["cores"] == programs and ck.lockstep
    outputs, _ = ck.simulate({"x": x}, simulator=simulator, timing=False)
    np.testing.assert_allclose(outputs[ck.ir.outputs[0]], np.exp(x), rtol=1e-6)


def test_the_lockstep_run_times_every_core(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    ck = fill_then_store[2].compile(x)
    outputs, report = ck.simulate({"x": x}, timing=True)
    np.testing.assert_allclose(outputs[ck.ir.outputs[0]], np.exp(x), rtol=1e-6)
    assert report.total_ns > 0 and len(ck.report["ranks"]) == 2


def test_programs_that_write_their_own_rows_stay_one_rolled_program(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    ck = own_rows[2].compile(x)
    assert not ck.report["warnings"] and "cores" not in ck.report and not ck.lockstep
    np.testing.assert_allclose(ck.run(x), np.exp(x), rtol=1e-6)


def test_one_write_the_same_for_every_program_is_no_race(rng):
    x = rng.standard_normal((8, 32)).astype(np.float32)
    ck = same_fill_only[2].compile(x)
    assert not ck.report["warnings"] and "cores" not in ck.report
    np.testing.assert_array_equal(ck.run(x), x)
