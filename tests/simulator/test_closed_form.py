"""Closed-form timing of repeating loops (simulator/periodic.py, issue 14).

Oracle: the same simulator walking every instruction (closed_form=False).
The closed form must give the same estimate (total time, per-engine and per-
queue busy time and instruction counts, active percentages) up to float
rounding, the same outputs, and the same hazard verdicts (E171) when a
semaphore is deleted, on random inputs."""
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

from tests.support.bench import load_bench
from tests.support.compare import close_rel
from tests.support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import fused_matmul as fm  # noqa: E402
import matmul as mmx  # noqa: E402
from tests.simulator.test_batched import scaled_tiles  # noqa: E402
from tests.simulator.test_machine import exp_add, matmul_acc  # noqa: E402
from tests.language.test_runtime_loops import prefix_copy  # noqa: E402

REL = 1e-9  # a skipped period adds its time once instead of instruction by instruction: rounding only


def _blocks_through_offset(a, advance):
    """128-row blocks of a, visited by a hardware loop through a runtime offset that advance(row)
    moves on, each block in four column quarters: x + exp(x). The loop is not batched (it
    writes the offset it reads): data and timing per iteration."""
    rows, cols = a.shape
    q = cols // 4
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    row = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    for i in nl.dynamic_range(rows // 128):
        for h in nl.static_range(4):
            view = dict(pattern=[[cols, 128], [1, q]], offset=h * q, scalar_offset=row, indirect_dim=0)
            x = nl.load(a.ap(**view))
            nl.store(out.ap(**view), value=nl.add(x, nl.exp(x)))
        advance(row)
    return out


@nkicc.jit
def offset_walk(a):
    """The offset advanced by a constant (nisa.tensor_scalar): the accesses it moves move by a
    constant per iteration."""
    return _blocks_through_offset(a, lambda row: nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=128))


@nkicc.jit
def offset_walk_by_data(a):
    """The offset advanced by a value in memory (a tile set to 128 before the loop): the same
    steps, but not a constant the IR shows."""
    by = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=by, data=by, op0=nl.add, operand0=128)
    return _blocks_through_offset(a, lambda row: nisa.tensor_tensor(dst=row, data1=row, data2=by, op=nl.add))


@nkicc.jit
def three_loads_then_a_burst(a, b):
    """Each step loads three tiles of a, so the DMAs' rotation over the 16 queues moves three
    places a step: a period holds up to that rotation. Then 16 loads of b that wait for nothing
    but their queues: each starts when its queue frees, so a closed form that leaves a queue
    another queue's state shows in the estimate."""
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(a.shape[0] // 384):
        for j in nl.static_range(3):
            x = nl.load(a[(3 * i + j) * 128:(3 * i + j + 1) * 128, :])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
    ys = [nl.load(b[j * 128:(j + 1) * 128, :]) for j in range(16)]  # all live at once: no WAR between them
    for y in ys:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=y, op=nl.add)
    nl.store(out, value=acc)
    return out


def _arrays(rng, shapes, dtype=np.float32):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _close(a: float, b: float, what: str) -> None:
    close_rel(a, b, REL, what)


def _same_estimate(r1, r0) -> None:
    _close(r1.total_ns, r0.total_ns, "total_ns")
    assert r1.executed == r0.executed
    for group in ("engines", "dma_queues"):
        one, zero = getattr(r1, group), getattr(r0, group)
        assert one.keys() == zero.keys(), group
        for name in one:
            assert one[name].instructions == zero[name].instructions, (group, name)
            _close(one[name].busy_ns, zero[name].busy_ns, f"{group} {name} busy")
            _close(one[name].active_pct, zero[name].active_pct, f"{group} {name} active")
    assert r1.dma_bytes == r0.dma_bytes and r1.dma_transfers == r0.dma_transfers


def _both(kernel, arrays, **kw):
    c = nkicc.compile(kernel, *arrays)
    inputs = dict(zip(c.ir.args, arrays))
    on = MachineSimulator(c.ir, TRN2, **kw).run(inputs)
    off = MachineSimulator(c.ir, TRN2, closed_form=False, **kw).run(inputs)
    return c.ir, on, off


def _scale8():
    return load_bench("sim_throughput")._scaled_inputs(8)[1]  # random At, B, D of mm2 at 1/8 of the seed per dimension


# (kernel, input arrays from rng, iterations the closed form must skip at least: 0 = none required)
CASES = {
    # the seed's loop nest with DMAs rotating over the queues: of 13 m blocks, the timing repeats
    # from the second on (11 skipped); the ragged last block's n0 loop repeats up to the queues'
    # rotation (its iterations deal the DMAs a number of times that is not a multiple of 16)
    "mm2 scale 8": (fm.mm2, lambda rng: _scale8(), 12),
    "exp_add, 40 tiles": (exp_add, lambda rng: _arrays(rng, [(128 * 40, 96)]), 1),
    "scaled_tiles, 32 tiles": (scaled_tiles, lambda rng: _arrays(rng, [(128 * 32, 64)]), 1),
    "mm2 small": (fm.mm2, lambda rng: _arrays(rng, [(256, 420), (256, 512), (512, 256)]), 0),
    "mm2_dynamic (runtime loops)": (fm.mm2_dynamic, lambda rng: _arrays(rng, [(256, 2400), (256, 256), (256, 256)]),
                                    0),
    "matmul_acc, 40 k tiles": (matmul_acc, lambda rng: _arrays(rng, [(128 * 40, 128), (128 * 40, 256)]), 0),
    "matmul_tiled": (mmx.matmul_tiled, lambda rng: _arrays(rng, [(512, 256), (512, 1024)]), 0),
    "matmul_hoisted": (mmx.matmul_hoisted, lambda rng: _arrays(rng, [(512, 256), (512, 1024)]), 0),
    # a runtime offset the loop advances by a constant: the accesses it moves move by a constant too
    "offset_walk, 40 blocks": (offset_walk, lambda rng: _arrays(rng, [(128 * 40, 64)]), 30),
    # the seed's hardware loops over n0 blocks, 32 of them (the ragged block's loop repeats)
    "mm2_dynamic, 32 n0 blocks": (fm.mm2_dynamic, lambda rng: _arrays(rng, [(512, 420), (512, 16384), (16384, 384)]),
                                  10),
    "three loads a step, then a burst": (three_loads_then_a_burst,
                                         lambda rng: _arrays(rng, [(384 * 48, 512), (128 * 16, 512)]), 8),
    "prefix_copy (fori)": (prefix_copy, lambda rng: [rng.standard_normal((128, 64)).astype(np.float32),
                                                      np.array([[37]], np.int32)], 0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_closed_form_equals_the_instruction_level_walk(rng, name):
    kernel, make, least = CASES[name]
    k, (out1, r1), (out0, r0) = _both(kernel, make(rng))
    _same_estimate(r1, r0)
    for n in out0:
        np.testing.assert_array_equal(out1[n], out0[n])
    assert not r0.closed_form_loops
    if least:  # the kernel's main loop did skip iterations (else this test compares nothing)
        assert sum(r1.closed_form_loops.values()) >= least, r1.closed_form_loops
        assert r1.to_dict()["closed_form_loops"] == r1.closed_form_loops


def test_tracing_walks_every_instruction(rng, tmp_path):
    """A trace holds every instruction as an event: no iteration is skipped."""
    a = _arrays(rng, [(128 * 40, 96)])
    k, (_, r1), (_, r0) = _both(exp_add, a, trace=True)
    assert not r1.closed_form_loops and r1.total_ns == r0.total_ns
    assert r1.trace_events == r0.trace_events > r1.executed


@pytest.mark.parametrize("kernel,make", [(scaled_tiles, lambda rng: _arrays(rng, [(128 * 32, 64)])),
                                         (exp_add, lambda rng: _arrays(rng, [(128 * 40, 96)])),
                                         (offset_walk, lambda rng: _arrays(rng, [(128 * 32, 64)]))])
def test_deleted_semaphores_give_the_same_verdict_in_closed_form(rng, kernel, make):
    """Every semaphore of the loop deleted in turn: the closed form raises the
    same E171 (naming the same instructions, iteration and times) as the
    instruction-level walk, or neither raises and the estimates agree. A hazard
    in a skipped iteration would have shown in the period it copies."""
    a = make(rng)
    c = nkicc.compile(kernel, *a)
    k, inputs = c.ir, dict(zip(c.ir.args, a))
    caught = closed = 0
    for op in [s for s in k.body.walk() if isinstance(s, Op)]:
        for w in op.attr("wait") or ():
            broken = edit_op(k, op.attr("id"), wait=tuple(x for x in op.attr("wait") if x != w))
            verdicts = []
            for cf in (True, False):
                try:
                    verdicts.append(MachineSimulator(broken, TRN2, closed_form=cf).run(inputs)[1])
                except NkiccError as err:
                    assert err.code == "E171"
                    verdicts.append(str(err))
            on, off = verdicts
            if isinstance(off, str):
                assert on == off
                caught += 1
            else:
                assert not isinstance(on, str), on
                _same_estimate(on, off)
                closed += bool(on.closed_form_loops)
    assert caught >= 1 and closed >= 1, (caught, closed)


def test_an_offset_advanced_by_data_gives_no_period(rng):
    """Whether an offset moves by a constant is read from the IR (an add of a constant, once per
    iteration), never from values seen at run time: advanced by a value from memory, the loop
    is timed instruction by instruction, with the same estimate."""
    a = _arrays(rng, [(128 * 24, 64)])
    k, (out1, r1), (out0, r0) = _both(offset_walk_by_data, a)
    assert not r1.closed_form_loops
    _same_estimate(r1, r0)
    np.testing.assert_allclose(out1[k.outputs[0]], a[0] + np.exp(a[0]), rtol=1e-6)


def test_a_period_needs_the_whole_state_to_repeat(rng, monkeypatch):
    """The comparison behind a skip is strict: the state it accepted, changed in
    any one part a later instruction reads (a live hazard record, a finish, a
    rotating DMA's finish per memory box, an engine's free time, the fabric's
    busy time, the DMA activity), is not a period any more."""
    import copy

    from nkicc.simulator import periodic

    seen = []
    real_skip = periodic.skip

    def spy(m, f, a, b, p, D, k):
        seen.append((m, f, copy.copy(a), copy.copy(b), p, D))
        return real_skip(m, f, a, b, p, D, k)

    monkeypatch.setattr(periodic, "skip", spy)
    a_in = _arrays(rng, [(128 * 32, 64)])
    c = nkicc.compile(scaled_tiles, *a_in)
    MachineSimulator(c.ir, TRN2).run(dict(zip(c.ir.args, a_in)))
    (m, f, a, b, p, D), = seen
    assert periodic.shift_of(m, f, a, b, p) == D

    def changed(part, edit):  # (the parts are the clock's: simulator/timing.py ClockState)
        s = copy.copy(b)
        s.clock = copy.copy(b.clock)
        setattr(s.clock, part, copy.deepcopy(getattr(b.clock, part)))
        edit(getattr(s.clock, part))
        return periodic.shift_of(m, f, a, s, p)

    def hz_record(edit):
        def go(hz):
            g = next(i for i, recs in enumerate(hz) if recs)
            key, r = hz[g][0]
            hz[g][0] = (key, edit(list(r)))
        return go

    def later(r):
        r[5] += 1.0
        return tuple(r)

    def moved(r):
        r[2] += 4
        return tuple(r)

    def rf_box(rf):
        i = next(i for i, (_, _, boxes) in rf.items() if boxes)
        box = next(iter(rf[i][2]))
        rf[i][2][box] += 1.0

    def fin(d):
        key = max(d, key=d.get)
        d[key] += 1.0

    def first(lst):
        lst[0] = (lst[0][0], lst[0][1] + 1.0) if isinstance(lst[0], tuple) else lst[0] + 1.0

    def extra(hz):  # one more live record
        g = next(i for i, recs in enumerate(hz) if recs)
        key, r = hz[g][0]
        hz[g].append((key + ("extra",), r))

    c = b.clock
    assert any(c.hz) and any(boxes for _, _, boxes in c.rf.values()) and c.fab and c.act_live
    for part, edit in [("hz", hz_record(later)), ("hz", hz_record(moved)), ("hz", extra), ("rf", rf_box),
                       ("fin", fin), ("efree", first), ("fab", first), ("act_live", first)]:
        assert changed(part, edit) is None, part
