"""A simulator runs a program that reads no register again without timing it again: the
first timed run's timing is kept (a snapshot of its clock, simulator/timing.py) and later runs run only
the data. The oracle is a new simulator, which times every run: reports must be equal, field by
field, on new random data each time; a program whose timing depends on its data (a runtime
loop bound) is timed again on every run."""
import dataclasses
import sys

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError, Op
from nkicc.plugins.targets import TRN2
from nkicc.simulator.machine import MachineSimulator
from nkicc.simulator.testing import edit_op

from tests.support.paths import EXAMPLES
from tests.simulator.test_machine import exp_add
from tests.language.test_runtime_loops import load_register, prefix_copy

sys.path.insert(0, str(EXAMPLES))
import fused_matmul as fm  # noqa: E402


def _fields(report) -> dict:
    return {k: v for k, v in dataclasses.asdict(report).items() if k != "wall_s"}


# mm2 at 1/8 of the seed per dimension: its m0 loop is timed in closed form (11 of 13 iterations)
SPECS = {"mm2": ("float32[512,4096]", "float32[512,2048]", "float32[2048,512]"),
         "einsum": ("float32[384,512]", "float32[512,512]", "float32[1,1]", "float32[512,1024]")}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_later_runs_report_what_a_new_simulator_times(rng, name):
    c = nkicc.compile(getattr(fm, name), *SPECS[name], passes={"target": "trn2"})
    kept = MachineSimulator(c.ir, TRN2, timing=True)
    assert kept._timing_static
    for _ in range(3):
        inputs = {a: rng.standard_normal(c.ir.tensor(a).shape).astype(np.float32) for a in c.ir.args}
        got, report = kept.run(inputs)
        want, fresh = MachineSimulator(c.ir, TRN2, timing=True).run(inputs)
        assert _fields(report) == _fields(fresh)
        for out in want:
            np.testing.assert_array_equal(got[out], want[out])
    assert kept._timing_memo is not None and report.total_ns > 0 and report.engines["pe"].active_pct > 0
    every = MachineSimulator(c.ir, TRN2, timing=True, reuse_timing=False)  # (the bench's timed-run rows)
    every.run(inputs)
    assert every._timing_memo is None and _fields(every.run(inputs)[1]) == _fields(report)
    assert bool(report.closed_form_loops) == (name == "mm2")


def test_a_runtime_loop_bound_is_timed_on_every_call(rng):
    d = rng.standard_normal((1, 64)).astype(np.float32)
    c = nkicc.compile(prefix_copy, d, np.array([[1]], np.int32))
    totals = []
    for n in (5, 60, 5):
        inputs = {"data": d, "ub": np.array([[n]], np.int32)}
        out, report = c.simulate(inputs)  # the kept simulator, after the first call
        totals.append(report.total_ns)
        assert _fields(report) == _fields(MachineSimulator(c.ir, TRN2, timing=True).run(inputs)[1])
        np.testing.assert_array_equal(out[c.ir.outputs[0]][0, :n], d[0, :n])
    assert totals[1] > totals[0] == totals[2]


@nkicc.jit
def count_up(ub):
    """out = ub (as float) by ub adds of 1: a runtime loop whose body reads no register, so only its
    trip count is data."""
    out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    ub_reg = load_register(ub)
    acc = nl.zeros((128, 32), dtype=nl.float32, buffer=nl.sbuf)
    one = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1.0)

    def body(i):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=one, op=nl.add)

    nl.fori_loop(0, ub_reg, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_a_runtime_trip_count_alone_is_timed_on_every_call():
    c = nkicc.compile(count_up, np.array([[1]], np.int32))
    assert not any(a.scalar is not None or a.reg is not None for a in MachineSimulator(c.ir, TRN2)._all_accs)
    totals = []
    for n in (3, 40, 3):
        inputs = {"ub": np.array([[n]], np.int32)}
        out, report = c.simulate(inputs)  # the kept simulator, after the first call
        np.testing.assert_array_equal(out[c.ir.outputs[0]], np.full((128, 32), n, np.float32))
        assert _fields(report) == _fields(MachineSimulator(c.ir, TRN2, timing=True).run(inputs)[1])
        totals.append(report.total_ns)
    assert totals[1] > totals[0] == totals[2]


def test_a_hazard_is_raised_on_every_run(rng):
    """A timed run that raises keeps nothing: the next run is timed, and raises again."""
    a = rng.standard_normal((128, 64)).astype(np.float32)
    c = nkicc.compile(exp_add, a)
    ops = [s for s in c.ir.body.walk() if isinstance(s, Op)]
    add = next(op for op in ops if op.opcode == "tensor_tensor")
    act = next(op for op in ops if op.opcode == "activation")
    broken = edit_op(c.ir, add.attr("id"), wait=tuple(w for w in add.attr("wait") if w != act.attr("id")))
    sim = MachineSimulator(broken, TRN2, timing=True)
    for _ in range(2):
        with pytest.raises(NkiccError) as ei:
            sim.run({c.ir.args[0]: a})
        assert ei.value.code == "E171"
    assert sim._timing_memo is None
