"""The machine simulator's batched path (simulator/batched.py) against its
per-instruction path, on random data: the same results except for the order
of floating-point sums, the same times and hazards, the same errors."""
import dataclasses
import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import Alloc, Block, Loop, NkiccError, Op
from nkicc.plugins.targets import TRN2
from nkicc.simulator.machine import MachineSimulator
from nkicc.simulator.testing import edit_op

from tests.support import fuzz_kernels as fk
from tests.support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import fused_matmul as fm  # noqa: E402

SUM_TOL = 1e-6  # |batched - per instruction| <= SUM_TOL * (the same sums over |terms|)
EXAMPLES_PER_FAMILY = 12
batched_runs: dict = {}


def both(kernel, inputs, **kw):
    """(batched, per-instruction) runs: each (outputs, report)."""
    return (MachineSimulator(kernel, TRN2, **kw).run(inputs),
            MachineSimulator(kernel, TRN2, batch=False, **kw).run(inputs))


def assert_same_up_to_sums(kernel, inputs, fast, slow, name="E") -> None:
    """The batched output within SUM_TOL of the per-instruction one, relative to the same sums
    over |inputs| (what reordering a sum can change)."""
    mag = MachineSimulator(kernel, TRN2, timing=False, batch=False).run(
        {k: np.abs(v) for k, v in inputs.items()})[0][name].astype(np.float64)
    assert np.all(np.abs(fast[name].astype(np.float64) - slow[name]) <= SUM_TOL * mag)


def check_case(case) -> None:
    c = nkicc.compile(case.kernel, *case.arrays, **case.consts)
    inputs = dict(zip(c.ir.args, case.arrays))
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    name = c.ir.outputs[0]
    got, want = fast[name].astype(np.float64), slow[name].astype(np.float64)
    if case.family in ("matmul", "row_reduce"):
        # sums of products of the inputs: the same sums over |inputs| bound what reordering can change
        mag = MachineSimulator(c.ir, TRN2, timing=False, batch=False).run(
            {k: np.abs(v) for k, v in inputs.items()})[0][name].astype(np.float64)
        assert np.all(np.abs(got - want) <= SUM_TOL * np.abs(mag) + 1e-30), case
    else:  # no sums: bit for bit
        np.testing.assert_array_equal(got, want, err_msg=repr(case))
    # the same instructions, the same event-level times (timing runs per iteration, without data)
    assert frep.executed == srep.executed and frep.total_ns == srep.total_ns, case
    assert {e: s.busy_ns for e, s in frep.engines.items()} == {e: s.busy_ns for e, s in srep.engines.items()}
    assert not srep.batched_loops
    batched_runs[case.family] = batched_runs.get(case.family, 0) + bool(frep.batched_loops)


# the fuzz templates (tests/support/fuzz_kernels.py) with enough tiles that loops stay rolled after the passes
@st.composite
def matmul_loops(draw):
    K, M, N = draw(st.integers(200, 1100)), draw(st.integers(1, 260)), draw(st.integers(1, 1100))
    consts = dict(TK=draw(st.sampled_from([32, 64, 100, 128])), TM=draw(st.sampled_from([64, 128])),
                  TN=draw(st.sampled_from([128, 256, 512])), LOOP=draw(st.integers(0, 3)))
    at, b = fk._arrays(draw, (K, M), (K, N))
    return fk.Case("matmul", fk.matmul, (at, b), consts, fk.matmul_ref)


@st.composite
def elementwise_loops(draw):
    B, R, C = draw(st.integers(1, 3)), draw(st.integers(100, 600)), draw(st.integers(100, 2000))
    consts = dict(P=draw(st.sampled_from([32, 64, 128])), F=draw(st.sampled_from([64, 128, 333, 512])),
                  KIND=draw(st.integers(0, 2)), OP=draw(st.integers(0, 20)),
                  SCALAR=draw(st.sampled_from([0.5, -2.0, 3.25])), LOOP=draw(st.integers(0, 3)))
    a, b = fk._arrays(draw, (B, R, C), (B, R, C))
    return fk.Case("elementwise", fk.elementwise, (a, b), consts, fk.elementwise_ref)


@st.composite
def row_reduce_loops(draw):
    R, C = draw(st.integers(100, 600)), draw(st.integers(200, 3000))
    consts = dict(P=draw(st.sampled_from([32, 64, 128])), F=draw(st.sampled_from([64, 100, 256])),
                  MAX=draw(st.booleans()), LOOP=draw(st.integers(0, 3)))
    (a,) = fk._arrays(draw, (R, C))
    return fk.Case("row_reduce", fk.row_reduce, (a,), consts, fk.row_reduce_ref)


FAMILIES = {"matmul": matmul_loops, "elementwise": elementwise_loops, "row_reduce": row_reduce_loops,
            "offset_rows": fk.offset_rows_cases}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_batched_equals_per_instruction_on_generated_kernels(family):
    @settings(max_examples=EXAMPLES_PER_FAMILY, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(FAMILIES[family]())
    def prop(case):
        check_case(case)

    prop()
    if family in ("elementwise", "matmul", "offset_rows"):  # loops of these run batched (else this test is empty)
        assert batched_runs.get(family, 0) >= 1, batched_runs


def test_mm2_runs_batched_with_accumulations_summed(rng):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(256, 420), (256, 512), (512, 256)]]
    c = nkicc.compile(fm.mm2, *arrays)
    inputs = dict(zip(c.ir.args, arrays))
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    assert_same_up_to_sums(c.ir, inputs, fast, slow)
    assert frep.batched_loops and frep.total_ns == srep.total_ns
    # inputs the kernel does not write are read where the caller keeps them, not copied
    sim = MachineSimulator(c.ir, TRN2, timing=False)
    sim.run(inputs)
    assert all(np.shares_memory(sim.hbm[n], inputs[n]) for n in ("At", "B", "D"))


@nkicc.jit
def scaled_tiles(a):
    """out tile i = exp(a tile i) + a tile i: a loop the batched path runs."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, nl.exp(x)))
    return out


def test_hazards_are_found_in_batched_loops(rng):
    """Deleting a semaphore inside a loop that runs batched is still E171
    (times and hazards are checked per iteration), naming both instructions."""
    a = rng.standard_normal((512, 64)).astype(np.float32)
    c = nkicc.compile(scaled_tiles, a)
    k, inputs = c.ir, {c.ir.args[0]: a}
    _, rep = MachineSimulator(k, TRN2).run(inputs)
    assert rep.batched_loops
    ops = [s for s in k.body.walk() if isinstance(s, Op)]
    caught = 0
    for op in ops:
        for w in op.attr("wait") or ():
            broken = edit_op(k, op.attr("id"), wait=tuple(x for x in op.attr("wait") if x != w))
            try:
                MachineSimulator(broken, TRN2).run(inputs)
            except NkiccError as err:
                assert err.code == "E171" and f"(id {op.attr('id')}," in str(err) and f"(id {w}," in str(err)
                caught += 1
    assert caught >= 1
    out, _ = MachineSimulator(k, TRN2, timing=False).run(inputs)
    np.testing.assert_allclose(out[k.outputs[0]], a + np.exp(a), rtol=1e-5)


@nkicc.jit
def never_zeroed(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nl.store(out, value=acc)
    return out


def test_poison_flows_through_a_batched_accumulation(rng):
    """An accumulator nobody zeroed is NaN poison after the batched sum too
    (the driver reports it as E173); zeroed, the sum is right."""
    a = rng.standard_normal((512, 64)).astype(np.float32)
    c = nkicc.compile(never_zeroed, a)
    (fast, frep), (slow, _) = both(c.ir, {c.ir.args[0]: a})
    assert frep.batched_loops
    name = c.ir.outputs[0]
    assert np.isnan(fast[name]).all() and np.isnan(slow[name]).all()
    with pytest.raises(NkiccError) as ei:
        c.run(a)
    assert ei.value.code == "E173"


def test_out_of_bounds_runtime_offsets_still_raise():
    """An offset advanced inside the loop that reads through it (no nest runs batched there): E170 as before."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parents[1] / "driver" / "bad_kernels" / "runtime_bounds.py"
    spec = importlib.util.spec_from_file_location("runtime_bounds_b", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = np.random.default_rng(1).standard_normal((512, 64)).astype(np.float32)
    c = nkicc.compile(mod.offset_advanced_too_far, a)
    with pytest.raises(NkiccError) as ei:
        MachineSimulator(c.ir, TRN2).run({c.ir.args[0]: a})
    assert ei.value.code == "E170"


@nkicc.jit
def overlapping_blocks(a, R=40, T=56):
    """Block i stores T rows at row i * R: the next block rewrites the last T - R rows (as the
    seeds' ragged m blocks do), with other values (the source rows do not overlap)."""
    n = a.shape[0] // T
    out = nl.ndarray(((n - 1) * R + T, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(n):
        x = nl.load(a[i * T:(i + 1) * T, :])
        nl.store(out[i * R:i * R + T, :], value=x)
    return out


def test_rows_rewritten_by_the_next_iteration_keep_the_last_value(rng):
    """A loop whose iterations overwrite each other's rows runs batched, its stores in program
    order: bit for bit the per-instruction result and numpy's sequential loop."""
    a = rng.standard_normal((56 * 7, 96)).astype(np.float32)
    c = nkicc.compile(overlapping_blocks, a)
    (fast, frep), (slow, srep) = both(c.ir, {c.ir.args[0]: a})
    want = np.zeros(((7 - 1) * 40 + 56, 96), np.float32)
    for i in range(7):
        want[i * 40:i * 40 + 56] = a[i * 56:(i + 1) * 56]
    name = c.ir.outputs[0]
    np.testing.assert_array_equal(slow[name], want)
    np.testing.assert_array_equal(fast[name], want)
    assert frep.batched_loops and frep.total_ns == srep.total_ns and frep.executed == srep.executed


@nkicc.jit
def spilled_sum(a, ZERO=True):
    """acc (HBM) += row block k through SBUF: load, add, store back, as alloc spills an accumulator."""
    F = a.shape[1]
    out = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.hbm)
    if ZERO:
        nl.store(acc, nl.zeros((128, F), dtype=nl.float32, buffer=nl.sbuf))
    for k in nl.static_range(a.shape[0] // 128):
        x = nl.load(a[k * 128:(k + 1) * 128, :])
        t = nl.load(acc)
        nisa.tensor_tensor(dst=t, data1=t, data2=x, op=nl.add)
        nl.store(acc, value=t)
    nl.store(out, value=nl.load(acc))
    return out


def test_an_accumulator_spilled_to_hbm_is_summed_batched(rng):
    """load / add / store through HBM is an accumulation along the loop: batched, equal to the
    per-instruction path up to the order of the fp32 sum, the same instruction count and times."""
    a = rng.standard_normal((128 * 9, 80)).astype(np.float32)
    c = nkicc.compile(spilled_sum, a)
    inputs = {c.ir.args[0]: a}
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    name = c.ir.outputs[0]
    mag = np.abs(a).reshape(9, 128, 80).sum(axis=0)
    assert np.all(np.abs(fast[name].astype(np.float64) - slow[name]) <= SUM_TOL * mag)
    np.testing.assert_allclose(slow[name], a.reshape(9, 128, 80).sum(axis=0), rtol=1e-5, atol=1e-5)
    assert frep.batched_loops and not frep.unbatched_loops
    assert frep.total_ns == srep.total_ns and frep.executed == srep.executed
    # never zeroed: NaN poison through the batched sum too, E173 from the driver
    c = nkicc.compile(spilled_sum, a, ZERO=False)
    (fast, frep), (slow, _) = both(c.ir, {c.ir.args[0]: a})
    assert frep.batched_loops and np.isnan(fast[name]).all() and np.isnan(slow[name]).all()
    with pytest.raises(NkiccError) as ei:
        c.run(a)
    assert ei.value.code == "E173"


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_matmuls_of_whole_loops_equal_one_matmul_per_iteration(data):
    """nc_matmul's batched rule (ir/ops/matmul.py, with simulator/gemm.py's products) on operand
    views with broadcast loop axes (an operand the loop does not move), stacked axes and summed
    axes (along which both, one or neither operand moves), against one numpy matmul per iteration
    summed in loop order: within 1e-6 of the same sums over |terms|."""
    from nkicc.ir.ops.matmul import _matmul_batched
    from nkicc.simulator.gemm import products
    nlead = data.draw(st.integers(1, 3))
    trips = [data.draw(st.integers(1, 4)) for _ in range(nlead)]
    K, M, N = data.draw(st.integers(1, 16)), data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    st_moves = [data.draw(st.booleans()) for _ in range(nlead)]
    mv_moves = [data.draw(st.booleans()) for _ in range(nlead)]
    # summed axes: both operands moving, one (the other summed first) or neither (one product repeated)
    reduce = tuple(i for i in range(nlead) if data.draw(st.booleans()))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))

    def operand(moves, free):
        base = rng.standard_normal([t if m else 1 for t, m in zip(trips, moves)] + [K, free]).astype(np.float32)
        return np.broadcast_to(base, tuple(trips) + (K, free))  # stride 0 where it does not move

    s, m = operand(st_moves, M), operand(mv_moves, N)
    views = {"s": s, "m": m}
    op = Op("nc_matmul", (), ("s", "m"))
    got = _matmul_batched(op, lambda a: views[a], nlead, reduce, products=products)[0][1]
    keep = [i for i in range(nlead) if i not in reduce]
    want = np.zeros(tuple(trips[i] for i in keep) + (M, N), np.float64)
    mag = np.zeros_like(want)
    for idx in np.ndindex(*trips):
        out = tuple(idx[i] for i in keep)
        want[out] += s[idx].astype(np.float64).T @ m[idx]
        mag[out] += np.abs(s[idx]).astype(np.float64).T @ np.abs(m[idx])
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= 1e-6 * mag + 1e-30)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_grouped_matmuls_equal_one_matmul_per_pair_and_iteration(data):
    """simulator/gemm.py's grouped GEMM (several stationary and moving views of different free
    sizes, each the parts of a sum with their own K, as one GEMM) against numpy per pair, part
    and iteration: each cell of its result within 1e-6 of the same sums over |terms|."""
    from nkicc.simulator.gemm import grouped
    nlead = data.draw(st.integers(1, 3))
    trips = [data.draw(st.integers(1, 4)) for _ in range(nlead)]
    Ks = data.draw(st.lists(st.integers(1, 16), min_size=1, max_size=3))
    Ms = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    Ns = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    st_moves = [data.draw(st.booleans()) for _ in range(nlead)]
    mv_moves = [data.draw(st.booleans()) for _ in range(nlead)]
    reduce = tuple(i for i in range(nlead) if st_moves[i] and mv_moves[i] and data.draw(st.booleans()))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))

    def operand(moves, K, free):
        base = rng.standard_normal([t if m else 1 for t, m in zip(trips, moves)] + [K, free]).astype(np.float32)
        return np.broadcast_to(base, tuple(trips) + (K, free))

    sts = [[operand(st_moves, K, m) for K in Ks] for m in Ms]
    mvs = [[operand(mv_moves, K, n) for K in Ks] for n in Ns]
    out, mo, no = grouped(sts if len(Ks) > 1 else [x[0] for x in sts],
                          mvs if len(Ks) > 1 else [x[0] for x in mvs], nlead, reduce)()
    keep = [i for i in range(nlead) if i not in reduce]
    assert out.shape == tuple(trips[i] for i in keep) + (sum(Ms), sum(Ns))
    for i, s in enumerate(sts):
        for j, m in enumerate(mvs):
            want = np.zeros(tuple(trips[k] for k in keep) + (Ms[i], Ns[j]), np.float64)
            mag = np.zeros_like(want)
            for idx in np.ndindex(*trips):
                o = tuple(idx[k] for k in keep)
                for sp, mp in zip(s, m):
                    want[o] += sp[idx].astype(np.float64).T @ mp[idx]
                    mag[o] += np.abs(sp[idx]).astype(np.float64).T @ np.abs(mp[idx])
            got = out[..., mo[i]:mo[i + 1], no[j]:no[j + 1]]
            assert np.all(np.abs(got - want) <= 1e-6 * mag + 1e-30)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_groups_sharing_moving_operands_are_one_gemm_of_their_rows(data):
    """gemm.grouped with `subs`: groups of stationaries, each with its own extra loop
    axes, that share the moving operands, as one GEMM with their rows concatenated (mm2's E row
    tiles, split by the multi-buffer pass into a loop and its peeled tail), against numpy per
    pair, iteration and part. In half the examples every part's stationary blocks are views of
    one array laid out as the GEMM reads it: they must be read there (no stationary operand
    made) and give the same sums."""
    from nkicc.simulator import gemm
    lead0 = data.draw(st.integers(1, 3), label="trips of a loop only the stationaries move along")
    red = data.draw(st.integers(1, 3), label="trips of a summed loop")
    Ks = data.draw(st.lists(st.integers(2, 8), min_size=1, max_size=2), label="K per part")
    subs_spec = data.draw(st.lists(st.tuples(st.lists(st.integers(1, 3), max_size=1),
                                             st.lists(st.integers(1, 5), min_size=1, max_size=3)),
                                   min_size=1, max_size=3), label="(extra sizes, M per stationary) per group")
    Ns = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=2), label="N per moving operand")
    in_place = data.draw(st.booleans(), label="stationaries already where the GEMM reads them")
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    subs = [(len(ms), tuple(e)) for e, ms in subs_spec]
    Ms = [m for _, ms in subs_spec for m in ms]
    rows = sum(math.prod(e) * sum(ms) for e, ms in subs_spec)
    sts = [[None] * len(Ks) for _ in Ms]  # [entry][part]: (lead0, red, extra..., K, M)
    for p, K in enumerate(Ks):
        if in_place:  # blocks cut from one array (lead0, rows, red * K), as gemm._row_blocks places them
            whole = rng.standard_normal((lead0, rows, red * K)).astype(np.float32)
        r, i = 0, 0
        for e, ms in subs_spec:
            region = whole[:, r:r + math.prod(e) * sum(ms)].reshape((lead0, *e, sum(ms), red * K)) if in_place else None
            m0 = 0
            for m in ms:
                if in_place:
                    v = region[..., m0:m0 + m, :].reshape((lead0, *e, m, red, K))  # (lead0, extra, M, red, K)
                    n = len(e)
                    v = v.transpose([0, n + 2] + list(range(1, n + 1)) + [n + 3, n + 1])
                else:
                    v = rng.standard_normal((lead0, red, *e, m, K)).astype(np.float32).swapaxes(-1, -2)
                sts[i][p] = v
                m0, i = m0 + m, i + 1
            r += math.prod(e) * sum(ms)
    mvs = [[np.broadcast_to(rng.standard_normal((1, red, K, n)).astype(np.float32), (lead0, red, K, n))
            for K in Ks] for n in Ns]
    made = []

    def operand(shape, layout, sources, fill):
        made.append(layout[0])
        return fill(np.empty(shape, np.float32))
    fn = gemm.grouped(sts, mvs, 2, (1,), operand=operand, subs=subs)
    got = fn()
    assert "st" not in made or not in_place
    assert len(got) == len(subs)
    i = 0
    for (e, ms), (out, mo, no) in zip(subs_spec, got):
        assert out.shape == (lead0, *e, sum(ms), sum(Ns))
        for a in range(len(ms)):
            for j in range(len(Ns)):
                for idx in np.ndindex(lead0, *e):
                    want = np.zeros((ms[a], Ns[j]))
                    mag = np.zeros_like(want)
                    for r in range(red):
                        for p in range(len(Ks)):
                            s_ = sts[i + a][p][(idx[0], r) + idx[1:]].astype(np.float64)
                            m_ = mvs[j][p][idx[0], r].astype(np.float64)
                            want += s_.T @ m_
                            mag += np.abs(s_).T @ np.abs(m_)
                    cell = out[idx][mo[a]:mo[a + 1], no[j]:no[j + 1]]
                    assert np.all(np.abs(cell - want) <= 1e-6 * mag + 1e-30)
        i += len(ms)


def test_whole_loop_gemms_equal_numpy(rng):
    """The batched path's GEMM (simulator/gemm.py::multiply), stacked or not, below and above the
    size that gets BLAS threads, equals numpy's matmul up to the order of the K sums."""
    from nkicc.simulator import gemm
    for stack, m, k, n in [((), 300, 256, 1024), ((3,), 130, 128, 700), ((), 5, 7, 3), ((), 1024, 1024, 520)]:
        a = rng.standard_normal(stack + (m, k)).astype(np.float32)
        b = rng.standard_normal(stack + (k, n)).astype(np.float32)
        got = gemm.multiply(a, b)
        want = np.matmul(a.astype(np.float64), b)
        mag = np.matmul(np.abs(a).astype(np.float64), np.abs(b))
        assert got.shape == want.shape and got.dtype == np.float32
        assert np.all(np.abs(got - want) <= 1e-6 * mag + 1e-30)


@nkicc.jit
def shared_operands(a, b, REWRITE=False):
    """Per k tile, every pairing of two stationary tiles (64 and 30 columns of a) with two moving
    tiles (96 and 40 columns of b), accumulated into SBUF: four matmuls the batched path may run
    as one GEMM. With REWRITE the first moving tile is doubled in place after its first use."""
    T = a.shape[0] // 128
    out = nl.ndarray((94, 136), dtype=nl.float32, buffer=nl.shared_hbm)
    acc1 = nl.zeros((64, 136), dtype=nl.float32, buffer=nl.sbuf)
    acc2 = nl.zeros((30, 136), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.static_range(T):
        s1 = nl.load(a[k * 128:(k + 1) * 128, 0:64])
        s2 = nl.load(a[k * 128:(k + 1) * 128, 64:94])
        x1 = nl.load(b[k * 128:(k + 1) * 128, 0:96])
        x2 = nl.load(b[k * 128:(k + 1) * 128, 96:136])
        for acc, s, x, lo, hi in ((acc1, s1, x1, 0, 96), (acc1, s1, x2, 96, 136), (acc2, s2, x1, 0, 96),
                                  (acc2, s2, x2, 96, 136)):
            p = nl.ndarray((acc.shape[0], hi - lo), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(p, s, x, accumulate=False)
            nisa.tensor_tensor(dst=acc[:, lo:hi], data1=acc[:, lo:hi], data2=p, op=nl.add)
            if REWRITE and s is s1 and x is x1:
                nisa.tensor_scalar(dst=x1, data=x1, op0=nl.multiply, operand0=2.0)
    nl.store(out[0:64, :], acc1)
    nl.store(out[64:94, :], acc2)
    return out


@pytest.mark.parametrize("rewrite", [False, True])
def test_matmuls_sharing_operands_are_one_gemm(rng, rewrite):
    """Matmuls of one loop pairing distinct stationary and moving tiles are one GEMM (matmul_groups.py),
    equal to the per-instruction path up to the order of the sums; not when an instruction between
    them writes an operand (the GEMM would read it too early)."""
    a = rng.standard_normal((128 * 5, 94)).astype(np.float32)
    b = rng.standard_normal((128 * 5, 136)).astype(np.float32)
    c = nkicc.compile(shared_operands, a, b, REWRITE=rewrite)
    inputs = dict(zip(c.ir.args, (a, b)))
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    name = c.ir.outputs[0]
    assert_same_up_to_sums(c.ir, inputs, fast, slow, name)
    x = np.abs(a).astype(np.float64).T @ np.abs(b)  # the numpy oracle, before any rewrite
    want = a.astype(np.float64).T @ b
    if rewrite:  # every product with x1 after the first is doubled
        want[64:, :96] *= 2
    assert np.all(np.abs(slow[name] - want) <= 1e-5 * 2 * x)
    assert frep.batched_loops and frep.total_ns == srep.total_ns
    sim = MachineSimulator(c.ir, TRN2, timing=False)
    groups = {id(it.group): (len(it.group.adds), len(it.group.applies))
              for n in sim.nests for it in n.items if it.group is not None}
    # the loop body holds two unrolled copies of the k step, each 4 products into 4 accumulator
    # blocks: one GEMM, with each block's two parts stacked along K. With the rewrite, x1 changes
    # between its first product and the GEMM: the products with s2 (both copies, stacked), and
    # those of s1 with x2 (stacked), but not s1 with x1 (each alone)
    assert sorted(groups.values()) == ([(2, 1), (4, 2)] if rewrite else [(8, 4)])


def test_a_compiled_kernel_reuses_its_batched_verdicts(rng):
    """CompiledKernel.simulate makes the batched-loop verdicts once: the next simulation's nests
    hold the first one's verdicts (no legality check again) and compute the same result."""
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(256, 420), (256, 512), (512, 256)]]
    c = nkicc.compile(fm.mm2, *arrays)
    c.timing = False
    inputs = dict(zip(c.ir.args, arrays))
    first, rep1 = c.simulate(inputs)
    made = {k: dict(v[1]) for k, v in c._verdicts.items()}
    assert rep1.batched_loops and any(made.values())
    second, rep2 = c.simulate(inputs)
    assert {k: v[1] for k, v in c._verdicts.items()} == made  # the same verdicts, none added
    np.testing.assert_array_equal(first["E"], second["E"])
    assert rep2.batched_loops == rep1.batched_loops and rep2.unbatched_loops == rep1.unbatched_loops


@pytest.mark.parametrize("spare", [True, False])
def test_mm2_batched_with_and_without_a_spare_core(rng, monkeypatch, spare):
    """The two-thread passes (halves of dst += terms, operand copies, fills; BLAS threads) give the
    per-instruction path's result, whatever the load: forced on for every size, and forced off
    (whether a core is spare is asked at every pass: cpushare reads SPARE_CORE each time)."""
    from nkicc.simulator import cpushare, gemm
    monkeypatch.setattr(cpushare, "SPARE_CORE", -1e9 if spare else 1e9)
    monkeypatch.setattr(cpushare, "PARALLEL_ELEMENTS", 1)
    monkeypatch.setattr(gemm, "THREADED_GEMM_FLOP", 1)
    assert cpushare.CpuShare().spare() == spare
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(256, 420), (256, 512), (512, 256)]]
    c = nkicc.compile(fm.mm2, *arrays)
    inputs = dict(zip(c.ir.args, arrays))
    (fast, frep), (slow, _) = both(c.ir, inputs, timing=False)
    assert frep.batched_loops
    assert_same_up_to_sums(c.ir, inputs, fast, slow)


def test_runtime_offsets_fixed_through_a_nest_run_batched(rng):
    """mm2_dynamic's static loops read At, B and D at offsets held in SBUF tiles that only the
    dynamic loops around them advance: those nests run batched, each entry at its own offsets,
    with the per-instruction path's result and times; the dynamic loops, whose bodies advance
    the offsets, do not (and the report says why)."""
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(256, 700), (256, 1024), (1024, 256)]]
    c = nkicc.compile(fm.mm2_dynamic, *arrays)
    inputs = dict(zip(c.ir.args, arrays))
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    assert_same_up_to_sums(c.ir, inputs, fast, slow)
    np.testing.assert_allclose(fast["E"], (arrays[0].T @ arrays[1]) @ arrays[2], rtol=1e-4, atol=1e-3)
    assert frep.total_ns == srep.total_ns and frep.executed == srep.executed
    k0 = [n for label, n in frep.batched_loops.items() if " k0 " in label]
    assert sum(k0) == (700 // fm.MB + 1) * (1024 // (fm.NT * fm.P))  # an entry per m block (full or ragged) and n0
    assert any("runtime offset that changes inside the nest" in why for why in frep.unbatched_loops.values())


def _rows_summed(a, row, R, step, blocks):
    """Dynamic iteration r sums two R-row blocks read at row `row` (+ j * R): the offset is fixed
    through the static j loop and advanced by `step` after it."""
    out = nl.ndarray((R, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((R, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.dynamic_range(blocks):
        for j in nl.static_range(2):
            t = nl.load(a.ap([[a.shape[1], R], [1, a.shape[1]]], offset=j * R * a.shape[1],
                             scalar_offset=row, indirect_dim=0))
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=step)
    nl.store(out, value=acc)
    return out


@nkicc.jit
def rows_at_a_runtime_offset(a, R=64, step=128, blocks=4):
    """_rows_summed from row 0."""
    return _rows_summed(a, nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf), R, step, blocks)


def test_a_runtime_offset_leaving_its_tensor_in_a_batched_nest_is_still_e170(rng):
    """The nest runs batched while its offsets stay inside `a`; the entry where they leave it runs
    per iteration, which reports E170 at the load, as without batching."""
    a = rng.standard_normal((512, 32)).astype(np.float32)
    ok = nkicc.compile(rows_at_a_runtime_offset, a)
    (fast, frep), (slow, _) = both(ok.ir, {ok.ir.args[0]: a})
    assert any(" j " in label for label in frep.batched_loops)
    want = sum(a[r * 128 + j * 64:r * 128 + (j + 1) * 64] for r in range(4) for j in range(2))
    np.testing.assert_allclose(fast[ok.ir.outputs[0]], want, rtol=1e-5, atol=1e-5)
    bad = nkicc.compile(rows_at_a_runtime_offset, a, step=160)  # iteration 3 reads rows 480-607
    for batch in (True, False):
        sim = MachineSimulator(bad.ir, TRN2, batch=batch)
        with pytest.raises(NkiccError) as ei:
            sim.run({bad.ir.args[0]: a})
        assert ei.value.code == "E170" and "test_batched.py" in str(ei.value.loc)
    assert [(n.batched, n.fallbacks) for n in sim.nests] == []  # (batch=False plans no nest)
    sim = MachineSimulator(bad.ir, TRN2)
    with pytest.raises(NkiccError):
        sim.run({bad.ir.args[0]: a})
    assert [(n.batched, n.fallbacks) for n in sim.nests] == [(3, 1)]


def test_the_dynamic_seed_as_written_batched_equals_per_instruction(rng):
    """seed_mm2_dynamic's B and D offsets leave out k0 and n1 (a bug in the kernel): each B tile is
    the same along the k0 sum (each D tile along the n1 sum). The batched path sums the moving
    operand first (one product, no copies of the constant one) and gives the per-instruction
    path's (wrong) result, with the same times."""
    from nkicc.loader import load_kernel
    from tests.support.paths import REPO
    kernel = load_kernel(f"{REPO / 'tests' / 'support' / 'seeds_scaled_kernels.py'}::mm2_dynamic")
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(256, 1190), (256, 512), (512, 256)]]
    c = nkicc.compile(kernel, *arrays)
    inputs = dict(zip(c.ir.args, arrays))
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    name = c.ir.outputs[0]
    assert_same_up_to_sums(c.ir, inputs, fast, slow, name)
    assert frep.total_ns == srep.total_ns and any(" k0 " in label for label in frep.batched_loops)


@nkicc.jit
def reads_past_its_rows(a, W=60, X=8, SHARED=False):
    """Block i's [128, W] tile read as [:, X:W + X] (as the static seed's ragged block reads past
    its At tile): each row's last X columns are the next partition's first, the last partition's
    are past the tile (poison). SHARED: one tile loaded before the loop, read in every block."""
    n = a.shape[1] // W
    out = nl.ndarray((128, n * W), dtype=a.dtype, buffer=nl.shared_hbm)
    first = nl.load(a[:, 0:W]) if SHARED else None
    for i in nl.affine_range(n):
        t = first if SHARED else nl.load(a[:, i * W:(i + 1) * W])
        nl.store(out[:, i * W:(i + 1) * W], value=nl.multiply(t[:, X:W + X], 2.0))
    return out


@pytest.mark.parametrize("shared", [False, True])
def test_reads_that_wrap_rows_run_batched(rng, shared):
    """A read past the end of its tile's rows in a batched nest is gathered as per-iteration
    execution reads it (the next partition's elements, poison past the tile): bit for bit the
    per-instruction result, and the nest runs batched."""
    a = rng.standard_normal((128, 240)).astype(np.float32)
    c = nkicc.compile(reads_past_its_rows, a, SHARED=shared)
    (fast, frep), (slow, srep) = both(c.ir, {c.ir.args[0]: a})
    got, want = fast[c.ir.outputs[0]], slow[c.ir.outputs[0]]
    np.testing.assert_array_equal(got, want)
    assert frep.batched_loops and not frep.unbatched_loops and frep.total_ns == srep.total_ns
    blocks = [a[:, 0:60]] * 4 if shared else [a[:, i * 60:(i + 1) * 60] for i in range(4)]
    for i, t in enumerate(blocks):  # the tile flat, partition-major, then poison
        flat = np.concatenate([t.reshape(-1), np.full(8, np.nan, np.float32)])
        want = 2 * np.stack([flat[p * 60 + 8:p * 60 + 68] for p in range(128)])
        np.testing.assert_array_equal(got[:, i * 60:(i + 1) * 60], want)



@nkicc.jit
def scaled_products(a, b):
    """Per k tile, a computed SBUF tile (3 a) as a matmul's stationary operand, the products summed
    into an SBUF accumulator."""
    T = a.shape[0] // 128
    out = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, 96), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.static_range(T):
        s = nl.multiply(nl.load(a[k * 128:(k + 1) * 128, :]), 3.0)
        x = nl.load(b[k * 128:(k + 1) * 128, :])
        p = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, s, x, accumulate=False)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=p, op=nl.add)
    nl.store(out, acc)
    return out


def test_tiles_a_matmul_reads_are_stored_partition_innermost(rng):
    """A private tile a matmul reads is kept partition-innermost in the batched path (its K rows
    contiguous, as BLAS reads them): the products equal the per-instruction path's (up to the
    order of the sums) and numpy's."""
    a = rng.standard_normal((128 * 6, 64)).astype(np.float32)
    b = rng.standard_normal((128 * 6, 96)).astype(np.float32)
    c = nkicc.compile(scaled_products, a, b)
    inputs = dict(zip(c.ir.args, (a, b)))
    (fast, frep), (slow, srep) = both(c.ir, inputs)
    out = c.ir.outputs[0]
    assert frep.batched_loops and not srep.batched_loops
    sim = MachineSimulator(c.ir, TRN2, timing=False)
    assert any(n.columns for n in sim.nests)  # the layout under test is the one the run used
    assert_same_up_to_sums(c.ir, inputs, fast, slow, out)
    want = (3 * a.astype(np.float64)).T @ b
    assert np.all(np.abs(slow[out] - want) <= 1e-5 * (3 * np.abs(a).astype(np.float64)).T @ np.abs(b))


def test_sim_floor_still_measures_what_it_says(monkeypatch):
    """bench/sim_floor.py replaces batched._columns, gemm._blocks and matmul_groups.one_add to time
    the simulator without them: a rename there would break the bench, not the suite, without
    this (its four variants run)."""
    from tests.support.paths import REPO
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import sim_floor
    rows = sim_floor.measure(32, 1)
    assert [r[0] for r in rows][0] == "as shipped" and len(rows) == 4
    assert all(r[1] > 0 and r[3] > 0 for r in rows)


@nkicc.jit
def doubled_rows(a):
    T = a.shape[0] // 128
    out = nl.ndarray((T * 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(T):
        t = nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0)
        nl.store(out[i * 128:(i + 1) * 128, :], t)
    nl.store(last, nl.load(a[0:128, :]))
    return out, last


def _reading(kernel, op_id: int, tensor: str):
    """The kernel with op `op_id` reading `tensor` in place of its first input's."""
    def block(b):
        out = []
        for s in b.stmts:
            if isinstance(s, Op) and s.attr("id") == op_id:
                s = dataclasses.replace(s, ins=(dataclasses.replace(s.ins[0], tensor=tensor),) + s.ins[1:])
            elif isinstance(s, Loop):
                s = dataclasses.replace(s, body=block(s.body))
            out.append(s)
        return Block(tuple(out))
    return dataclasses.replace(kernel, body=block(kernel.body))


def test_a_loop_tile_read_after_the_loop_is_written_back(rng):
    """The batched path keeps a nest's own tiles in private arrays and writes back only those an
    instruction outside the nest touches. The tracer unrolls a loop whose tile escapes, so the
    IR is edited: the store after the loop reads the last iteration's doubled tile; batched and
    per-instruction runs agree (2 x a's last rows), and a run without the write-back would not."""
    a = rng.standard_normal((128 * 32, 64)).astype(np.float32)
    c = nkicc.compile(doubled_rows, a)
    loop = next(s for s in c.ir.body.stmts if isinstance(s, Loop))
    doubled = [s.outs[0].tensor for s in loop.body.walk() if isinstance(s, Op) and s.opcode == "tensor_scalar"]
    store = [s for s in c.ir.body.stmts if isinstance(s, Op)][-1]
    kernel = _reading(c.ir, store.attr("id"), doubled[-1])
    inputs = {"a": a}
    (fast, frep), (slow, _) = both(kernel, inputs, timing=False)
    assert frep.batched_loops
    sim = MachineSimulator(kernel, TRN2, timing=False)
    assert [n.escapes for n in sim.nests] == [{doubled[-1]}]
    for outs in (fast, slow):
        np.testing.assert_array_equal(outs["last"], 2 * a[-128:])
        np.testing.assert_array_equal(outs["out"], 2 * a)


@nkicc.jit
def block_sums(a):
    """Per 128-row block, the sum of its 64-column slices, into a zeroed accumulator of the block."""
    T, S = a.shape[0] // 128, a.shape[1] // 64
    out = nl.ndarray((T * 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(T):
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(S):
            x = nl.load(a[i * 128:(i + 1) * 128, k * 64:(k + 1) * 64])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
        nl.store(out[i * 128:(i + 1) * 128, :], acc)
    return out


def test_a_simulator_run_again_forgets_the_last_run(rng):
    """A simulator keeps its on-chip memory and the batched path's arrays between runs (fresh
    pages are slow): each run of one simulator on new random inputs equals a new per-instruction
    simulator's run, timing off and on: mm2, and block sums whose zeroed accumulators reuse the
    last run's array (a stale sum would show)."""
    M, K, N, L = 600, 256, 512, 256
    mm2 = nkicc.compile(fm.mm2, f"float32[{K},{M}]", f"float32[{K},{N}]", f"float32[{N},{L}]")
    sums = nkicc.compile(block_sums, "float32[2048,512]")
    cases = [(mm2, lambda: {"At": rng.standard_normal((K, M)).astype(np.float32),
                            "B": rng.standard_normal((K, N)).astype(np.float32),
                            "D": rng.standard_normal((N, L)).astype(np.float32)}, "E"),
             (sums, lambda: {"a": rng.standard_normal((2048, 512)).astype(np.float32)}, "out")]
    for c, draw, out in cases:
        for timing in (False, True):
            sim = MachineSimulator(c.ir, TRN2, timing=timing)
            for _ in range(3):
                inputs = draw()
                fast, rep = sim.run(inputs)
                slow, _ = MachineSimulator(c.ir, TRN2, timing=timing, batch=False).run(inputs)
                assert rep.batched_loops
                assert_same_up_to_sums(c.ir, inputs, fast, slow, out)


@pytest.mark.parametrize("shape, reads_in_place", [((256, 796, 2048, 512), True), ((128, 1000, 512, 128), False)])
def test_mm2_row_groups_share_one_gemm(rng, monkeypatch, shape, reads_in_place):
    """mm2's E row tiles, split by the multi-buffer pass into a loop of four and the peeled last
    two, are one GEMM (matmul_groups._rowsets); at the first shape so are the single matmuls of the
    ragged last block's loop and its tail, and E's stationary operand is read where C's products
    lie (gemm._in_place), at the second it is copied. Batched against per instruction on random
    data with NaN scratch, in two runs of one simulator."""
    from nkicc.simulator import gemm
    nan_scratch(monkeypatch)
    read = []
    in_place = gemm._in_place
    monkeypatch.setattr(gemm, "_in_place", lambda *a: read.append(in_place(*a)) or read[-1])
    K, M, N, L = shape
    c = nkicc.compile(fm.mm2, f"float32[{K},{M}]", f"float32[{K},{N}]", f"float32[{N},{L}]")
    sim = MachineSimulator(c.ir, TRN2, timing=False)
    rows = [it.group for nest in sim.nests for it in nest.items if it.group is not None and it.group.rows]
    assert rows and any(len(g.adds) == 1 for g in rows) == reads_in_place
    for _ in range(2):
        inputs = {name: rng.standard_normal(s).astype(np.float32) for name, s in
                  zip(c.ir.args, ((K, M), (K, N), (N, L)))}
        read.clear()
        fast, rep = sim.run(inputs)
        slow, _ = MachineSimulator(c.ir, TRN2, timing=False, batch=False).run(inputs)
        assert rep.batched_loops and any(x is not None for x in read) == reads_in_place
        assert_same_up_to_sums(c.ir, inputs, fast, slow)


def test_mm2_at_an_eighth_of_the_seed_equals_numpy(rng, monkeypatch):
    """At 1/8 of the seed (bench/sim_throughput.py --scale 8) the batched path makes a GEMM
    operand it already made from the same unwritten input once per entry (At's block for both
    multi-buffer copies of the n0 body): E equals numpy's, which it would not if operands of the
    same shape but other sources were shared (B's two halves are such a pair here)."""
    from nkicc.simulator import gemm
    M, K, N, L = 4096, 512, 2048, 512
    At, B, D = (rng.standard_normal(s).astype(np.float32) for s in ((K, M), (K, N), (N, L)))
    c = nkicc.compile(fm.mm2, At, B, D)
    reused = []
    call = gemm.EntryArrays.__call__

    def counted(self, shape, layout, sources, fill):
        made = dict(self.made)
        out = call(self, shape, layout, sources, fill)
        reused.append(any(out is x for x in made.values()))
        return out
    monkeypatch.setattr(gemm.EntryArrays, "__call__", counted)
    out, rep = MachineSimulator(c.ir, TRN2, timing=False).run({"At": At, "B": B, "D": D})
    assert rep.batched_loops and sum(reused) >= 1
    want = (At.T.astype(np.float64) @ B) @ D
    mag = (np.abs(At.T).astype(np.float64) @ np.abs(B)) @ np.abs(D)
    assert np.all(np.abs(out["E"] - want) <= 1e-5 * mag)


def test_gemm_operands_are_shared_only_from_inputs_no_instruction_writes():
    """EntryArrays makes an operand once per entry only where every view it is made of lies in an
    input the kernel never writes; anything else is made again each time it is asked for."""
    from types import SimpleNamespace
    from nkicc.simulator.gemm import EntryArrays
    from nkicc.simulator.scratch import Scratch
    a, w = np.arange(64, dtype=np.float32), np.arange(64, dtype=np.float32)
    sim = SimpleNamespace(hbm={"a": a, "w": w}, read_only={"a"}, scratch=Scratch())
    fills = []

    def fill(out):
        fills.append(1)
        out[...] = 0
        return out
    ops = EntryArrays(sim)
    for src in (a, w):
        parts = [src[:32].reshape(4, 8), src[32:].reshape(4, 8)]
        first = ops((8, 8), ("st",), parts, fill)
        again = ops((8, 8), ("st",), parts, fill)
        assert (first is again) == (src is a)
    assert len(fills) == 3
    assert ops((4, 8), ("st",), [a[:32]], fill).base is not None and len(fills) == 3  # one view: in place


def test_a_compiled_kernel_runs_its_simulator_again(rng, monkeypatch):
    """CompiledKernel.simulate keeps its last machine simulator (its plans: made once) and drops
    each run's memory: calls with new random inputs equal numpy; other settings (timing, the
    storage precision) make a new simulator; two threads calling at once both get right results
    (the second makes a simulator of its own)."""
    import threading
    M, K, N, L = 600, 256, 512, 256
    c = nkicc.compile(fm.mm2, f"float32[{K},{M}]", f"float32[{K},{N}]", f"float32[{N},{L}]")
    draw = lambda: {"At": rng.standard_normal((K, M)).astype(np.float32),  # noqa: E731
                    "B": rng.standard_normal((K, N)).astype(np.float32),
                    "D": rng.standard_normal((N, L)).astype(np.float32)}

    def check(inputs, outs):
        want = (inputs["At"].T.astype(np.float64) @ inputs["B"]) @ inputs["D"]
        mag = (np.abs(inputs["At"].T).astype(np.float64) @ np.abs(inputs["B"])) @ np.abs(inputs["D"])
        assert np.all(np.abs(outs["E"] - want) <= 1e-5 * mag)

    sims = []
    for timing in (False, False, True, True, False):
        inputs = draw()
        check(inputs, c.simulate(inputs, timing=timing)[0])
        sim = c._machine[1]
        assert sim.sbuf is None and not sim.hbm  # nothing of the run kept
        sims.append(sim)
    assert sims[0] is sims[1] and sims[2] is sims[3] and len({id(s) for s in sims}) == 3
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    c.simulate(draw(), timing=False)
    assert c._machine[1] is not sims[4] and not c._machine[1].precise
    monkeypatch.delenv("NKI_PRECISE_FP")
    runs = [draw() for _ in range(2)]
    got = [None, None]
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, c.simulate(runs[i], timing=False)[0]))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for inputs, outs in zip(runs, got):
        check(inputs, outs)


@nkicc.jit
def rows_from(a, start, R=64, blocks=4):
    """_rows_summed from the row in the input `start`, 2 R rows further each iteration: the
    caller's data decides whether the reads stay inside `a`."""
    return _rows_summed(a, nl.load(start), R, 2 * R, blocks)


def test_a_kept_simulator_runs_right_after_a_run_that_raised(rng):
    """A compiled kernel runs its simulator again (CompiledKernel.simulate): a call whose data
    sends a read outside its tensor (E170) leaves nothing that changes the next call's result."""
    a = rng.standard_normal((512, 32)).astype(np.float32)
    c = nkicc.compile(rows_from, a, np.zeros((1, 1), np.int32))
    want = lambda s: sum(a[s + r * 128 + j * 64:s + r * 128 + (j + 1) * 64] for r in range(4) for j in range(2))  # noqa: E731
    for start, good in ((0, True), (100, False), (0, True), (-64, False), (0, True)):
        if good:
            np.testing.assert_allclose(c.run(a, np.full((1, 1), start, np.int32)), want(start), rtol=1e-5, atol=1e-5)
        else:
            with pytest.raises(NkiccError) as ei:
                c.run(a, np.full((1, 1), start, np.int32))
            assert ei.value.code == "E170"
    assert c._machine is not None


@nkicc.jit
def slice_sums(a):
    """The sum of a's 64-column slices, in an accumulator zeroed once before the loop."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(a.shape[1] // 64):
        x = nl.load(a[:, k * 64:(k + 1) * 64])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
    nl.store(out, acc)
    return out


def test_a_run_again_starts_from_the_memory_a_first_run_finds(rng):
    """A simulator run again zeroes only the on-chip tensors no Alloc fills (all of SBUF was
    3 ms a run): here the IR is edited so that the accumulator has neither its Alloc nor its
    zeroing memset, and relies on the zeros a first run finds; every run's sums stay right."""
    c = nkicc.compile(slice_sums, "float32[128,2048]")
    acc = next(s.outs[0].tensor for s in c.ir.body.walk() if isinstance(s, Op) and s.opcode == "memset")

    def block(b):
        keep = [s for s in b.stmts if not (isinstance(s, Alloc) and s.tensor == acc)
                and not (isinstance(s, Op) and s.opcode == "memset" and s.outs[0].tensor == acc)]
        return Block(tuple(dataclasses.replace(s, body=block(s.body)) if isinstance(s, Loop) else s for s in keep))
    kernel = dataclasses.replace(c.ir, body=block(c.ir.body))
    assert not any(isinstance(s, Alloc) and s.tensor == acc for s in kernel.body.walk())
    for batch in (True, False):
        sim = MachineSimulator(kernel, TRN2, timing=False, batch=batch)
        for _ in range(3):
            a = rng.standard_normal((128, 2048)).astype(np.float32)
            out = sim.run({"a": a})[0][kernel.outputs[0]]
            np.testing.assert_allclose(out, a.reshape(128, 32, 64).sum(1), rtol=1e-4, atol=1e-4)


def nan_scratch(monkeypatch) -> None:
    """The simulator's scratch pool hands out float arrays full of NaN where it promises nothing
    (fill=None): an element the batched path forgets to fill or write shows in the results."""
    from nkicc.simulator.scratch import Scratch
    take = Scratch.take
    monkeypatch.setattr(Scratch, "take", lambda self, shape, dtype, fill=None: take(
        self, shape, dtype, np.nan if fill is None and np.dtype(dtype).kind == "f" else fill))


@nkicc.jit
def zeroed_products(a, b, W=136, ZERO_OPERAND=False):
    """Per 64-row block i, acc = a_i.T @ b in its first 136 columns (two moving tiles side by side),
    acc zeroed first and W wide (columns past 136 stay zero). ZERO_OPERAND: one more product whose
    stationary tile is a zeroed tile the loop reads before anything else touches it (compiled without
    licm, which would hoist it out of the loop)."""
    I, KT = a.shape[1] // 64, a.shape[0] // 128
    out = nl.ndarray((I * 64, W), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(I):
        acc = nl.zeros((64, W), dtype=nl.float32, buffer=nl.sbuf)
        z = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            s = nl.load(a[k * 128:(k + 1) * 128, i * 64:(i + 1) * 64])
            for lo, hi in ((0, 96), (96, 136)):
                x = nl.load(b[k * 128:(k + 1) * 128, lo:hi])
                for st in ((s, z) if ZERO_OPERAND else (s,)):
                    p = nl.ndarray((64, hi - lo), dtype=nl.float32, buffer=nl.psum)
                    nisa.nc_matmul(p, st, x, accumulate=False)
                    nisa.tensor_tensor(dst=acc[:, lo:hi], data1=acc[:, lo:hi], data2=p, op=nl.add)
        nl.store(out[i * 64:(i + 1) * 64, :], acc)
    return out


@pytest.mark.parametrize("W, zero_operand, written", [(136, False, True), (160, False, False), (136, True, False)])
def test_a_zeroed_accumulator_is_filled_only_where_a_sum_does_not_cover_it(rng, monkeypatch, W, zero_operand,
                                                                            written):
    """The batched path zeroes a tile of zeros (nl.zeros) just before anything first touches it, and
    not at all where one GEMM's products cover it whole (they are written, not added: one_add). The
    scratch pool here hands out NaN where it promises nothing, so any element left unfilled, or a
    zero operand read before its fill, shows: each of three runs equals numpy and the per-instruction
    path, with acc written (never filled) only when the products cover all of it."""
    from nkicc.simulator.nest_views import Views
    nan_scratch(monkeypatch)
    zeroed = []
    zero = Views.zero
    monkeypatch.setattr(Views, "zero", lambda self, names: (
        zeroed.extend(sorted(self.unfilled.intersection(names))), zero(self, names)))
    shape_a, shape_b = (128 * 3, 64 * 5), (128 * 3, 136)
    c = nkicc.compile(zeroed_products, f"float32[{shape_a[0]},{shape_a[1]}]", f"float32[{shape_b[0]},{shape_b[1]}]",
                      W=W, ZERO_OPERAND=zero_operand, passes={"disable": ["licm"]})
    sim = MachineSimulator(c.ir, TRN2, timing=False)
    acc = next(n for nest in sim.nests for n in nest.zeroed if n.startswith("acc"))
    for _ in range(3):
        a, b = rng.standard_normal(shape_a).astype(np.float32), rng.standard_normal(shape_b).astype(np.float32)
        zeroed.clear()
        fast, rep = sim.run({"a": a, "b": b})
        slow, _ = MachineSimulator(c.ir, TRN2, timing=False, batch=False).run({"a": a, "b": b})
        assert rep.batched_loops
        want = np.zeros((shape_a[1], W))
        want[:, :136] = (a.astype(np.float64).T.reshape(5, 64, -1) @ b).reshape(-1, 136)
        mag = np.zeros((shape_a[1], W))
        mag[:, :136] = (np.abs(a).astype(np.float64).T.reshape(5, 64, -1) @ np.abs(b)).reshape(-1, 136)
        for got in (fast["out"], slow["out"]):
            assert np.all(np.abs(got - want) <= 1e-5 * mag)
        assert (acc not in zeroed) == written
        assert zero_operand == any(n.startswith("z") for n in zeroed)


@nkicc.jit
def chained_products(a, b, d, W=64, SPLIT=40, DW=96, DSPLIT=56, STORE_C=False):
    """Per W-column block i of a: C = b[:, :128].T @ a_i (128 x W, a zeroed tile the products of
    two moving tiles, split at SPLIT, cover whole), then E = C.T @ d[:128, :DW] (two moving tiles
    split at DSPLIT: a GEMM reading C), stored. STORE_C also stores C. `last` is a[:128, :W], for
    tests to point at C instead."""
    I, KT = a.shape[1] // W, a.shape[0] // 128
    out = nl.ndarray((I * W, DW), dtype=nl.float32, buffer=nl.shared_hbm)
    c_out = nl.ndarray((I * 128, W), dtype=nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(I):
        c = nl.zeros((128, W), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            s = nl.load(b[k * 128:(k + 1) * 128, 0:128])
            for lo, hi in ((0, SPLIT), (SPLIT, W)):
                x = nl.load(a[k * 128:(k + 1) * 128, i * W + lo:i * W + hi])
                p = nl.ndarray((128, hi - lo), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(p, s, x, accumulate=False)
                nisa.tensor_tensor(dst=c[:, lo:hi], data1=c[:, lo:hi], data2=p, op=nl.add)
        e = nl.zeros((W, DW), dtype=nl.float32, buffer=nl.sbuf)
        for lo, hi in ((0, DSPLIT), (DSPLIT, DW)):
            q = nl.ndarray((W, hi - lo), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(q, c, nl.load(d[0:128, lo:hi]), accumulate=False)
            nisa.tensor_tensor(dst=e[:, lo:hi], data1=e[:, lo:hi], data2=q, op=nl.add)
        nl.store(out[i * W:(i + 1) * W, :], e)
        if STORE_C:
            nl.store(c_out[i * 128:(i + 1) * 128, :], c)
    nl.store(last, nl.load(a[0:128, 0:W]))
    return out, c_out, last


@pytest.mark.parametrize("case", ["gemm reads C", "C stored too", "C read after the loop"])
def test_a_gemm_reads_the_products_a_tile_would_hold(rng, monkeypatch, case):
    """A zeroed tile that one GEMM's products cover whole is never written where a later GEMM is
    its only reader: that GEMM reads the products (matmul_groups.forward_products). Anything else
    that reads it (a store in the loop, or, by an IR edit, a store after the loop of the last
    iteration's tile) gets it written. Scratch arrays come as NaN where nothing is promised; each
    of three runs equals numpy and the per-instruction path."""
    from nkicc.simulator import matmul_groups
    nan_scratch(monkeypatch)
    forwarded = []
    forward = matmul_groups.forward_products
    monkeypatch.setattr(matmul_groups, "forward_products", lambda *a: forwarded.append(forward(*a)) or forwarded[-1])
    A, K = (3 * 128, 5 * 64), (3 * 128, 200)
    c = nkicc.compile(chained_products, f"float32[{A[0]},{A[1]}]", f"float32[{K[0]},{K[1]}]", "float32[160,120]",
                      STORE_C=case == "C stored too")
    kernel = c.ir
    sim = MachineSimulator(kernel, TRN2, timing=False)
    tile = next(n for nest in sim.nests for n in nest.zeroed if n.startswith("c"))
    if case == "C read after the loop":
        store = [s for s in kernel.body.stmts if isinstance(s, Op)][-1]
        kernel = _reading(kernel, store.attr("id"), tile)
        sim = MachineSimulator(kernel, TRN2, timing=False)
        assert [n.escapes for n in sim.nests] == [{tile}]
    for _ in range(3):
        a, b, d = (rng.standard_normal(s).astype(np.float32) for s in (A, K, (160, 120)))
        forwarded.clear()
        fast, rep = sim.run({"a": a, "b": b, "d": d})
        slow, _ = MachineSimulator(kernel, TRN2, timing=False, batch=False).run({"a": a, "b": b, "d": d})
        assert rep.batched_loops and {tile} in forwarded
        blocks = a.astype(np.float64).T.reshape(5, 64, -1)
        cs = b[:, :128].astype(np.float64).T @ blocks.transpose(0, 2, 1)  # (5, 128, 64)
        cs_mag = np.abs(b[:, :128]).astype(np.float64).T @ np.abs(blocks).transpose(0, 2, 1)
        want = {"out": (cs.transpose(0, 2, 1) @ d[:128, :96]).reshape(-1, 96),
                "last": cs[-1] if case == "C read after the loop" else a[:128, :64]}
        mag = {"out": (cs_mag.transpose(0, 2, 1) @ np.abs(d[:128, :96])).reshape(-1, 96), "last": cs_mag[-1]}
        if case == "C stored too":
            want["c_out"], mag["c_out"] = cs.reshape(-1, 64), cs_mag.reshape(-1, 64)
        for outs in (fast, slow):
            for name, w in want.items():
                assert np.all(np.abs(outs[name] - w) <= 1e-5 * mag[name]), (name, case)


def _factors(draw, n: int) -> list:
    """n as a product of a drawn list of factors (a mixed radix over n elements)."""
    out = []
    while n > 1:
        f = draw(st.sampled_from([d for d in range(2, n + 1) if n % d == 0]))
        out.append(f)
        n //= f
    return out or [1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_view_of_a_tile_is_found_in_its_products_or_refused(data):
    """matmul_groups._product_view against writing the products into the tile and viewing that: a tile's
    array covered once by a permuted mixed-radix view U, products in U's shape in another memory
    order, any strided view of the array (steps, slices, axes it does not move along): the view
    of the products it returns holds exactly the view's values, or it refuses (None); and U
    itself, a slice of it, and where the products are in the tile's memory order the whole flat
    array (the tile's axes merged into one digit) are always found."""
    from nkicc.simulator.matmul_groups import _product_view
    draw = data.draw
    size = draw(st.sampled_from([12, 24, 30, 36, 48, 64, 120]))
    arr = np.full(size, np.nan, np.float32)
    radix = _factors(draw, size)
    U = arr.reshape(radix).transpose(draw(st.permutations(range(len(radix)))))
    order = draw(st.permutations(range(U.ndim)))
    values = np.arange(1, size + 1, dtype=np.float32) * draw(st.sampled_from([1.0, -0.5]))
    terms = np.random.default_rng(draw(st.integers(0, 99))).permutation(values).reshape(
        [U.shape[k] for k in order]).transpose(np.argsort(order))
    written = np.empty_like(arr)  # the tile as the products written into it
    written_U = np.lib.stride_tricks.as_strided(written, U.shape, U.strides)
    written_U[...] = terms
    # a view of the tile: a reshape into other factors, a slice with a step per axis, a permutation,
    # and maybe an axis it does not move along
    shape = _factors(draw, size)
    v = arr.reshape(shape)
    sel = []
    for n in shape:
        lo = draw(st.integers(0, n - 1))
        sel.append(slice(lo, draw(st.integers(lo + 1, n)), draw(st.integers(1, 3))))
    v = v[tuple(sel)].transpose(draw(st.permutations(range(len(shape)))))
    if draw(st.booleans()):
        v = np.lib.stride_tricks.as_strided(v, v.shape + (draw(st.integers(1, 3)),), v.strides + (0,))
    offset = v.__array_interface__["data"][0] - arr.__array_interface__["data"][0]
    truth = np.ndarray(v.shape, np.float32, written, offset, v.strides)
    got = _product_view(v, U, terms)
    if got is not None:
        assert got.shape == v.shape and np.array_equal(got, truth)
    moving = lambda x: [k for k in sorted(range(U.ndim), key=lambda k: x.strides[k]) if U.shape[k] > 1]
    if moving(U) == moving(terms):  # the products in the tile's own order: the flat tile is one digit
        got = _product_view(arr, U, terms)
        assert got is not None and np.array_equal(got, written)
    for whole in (U, U[1:] if U.shape[0] > 1 else U):
        got = _product_view(whole, U, terms)
        assert got is not None and np.array_equal(got, np.ndarray(whole.shape, np.float32, written,
                                                                    whole.__array_interface__["data"][0]
                                                                    - arr.__array_interface__["data"][0],
                                                                    whole.strides))


def test_operand_blocks_that_continue_each_other_are_one_copy(rng):
    """gemm._blocks copies blocks of a row whose sources continue one another along an axis as
    one copy (At's m tiles side by side), and only where the target holds each block where its
    own copy would put it: here the same sources, adjacent along their rows, that the target
    wants side by side along its columns stay two copies. Both equal copying block by block."""
    from nkicc.simulator.gemm import _blocks
    src = rng.standard_normal((6, 300)).astype(np.float32)
    calls = []
    copy = lambda d, x: (calls.append(x.shape), np.copyto(d, x))
    # the m tiles: 128, 128 and 44 columns of each row, side by side in the target as in the source
    row = [src[:, 0:128], src[:, 128:256], src[:, 256:300]]
    out = _blocks([row], np.full((6, 300), np.nan, np.float32), 0, 1, [6], [128, 128, 44], copy)
    np.testing.assert_array_equal(out, src)
    assert calls == [(6, 300)]
    # rows 0-2 and 3-5: adjacent in the source along rows, wanted side by side along columns
    calls.clear()
    row = [src[0:3, :], src[3:6, :]]
    out = _blocks([row], np.full((3, 600), np.nan, np.float32), 0, 1, [3], [300, 300], copy)
    np.testing.assert_array_equal(out, np.concatenate([src[0:3], src[3:6]], axis=1))
    assert calls == [(3, 300), (3, 300)]


def test_chained_products_on_generated_shapes_equal_per_instruction(monkeypatch):
    """chained_products at drawn widths, splits, block and K counts, C stored or not: the batched
    path (zeroed tiles filled lazily, C's products kept and read by E's GEMM where its views map)
    equals the per-instruction path up to the order of the sums, on two runs of one simulator
    whose scratch arrays come as NaN where nothing is promised; and some examples forward C (else
    this test would pass with forwarding never taken)."""
    from nkicc.simulator import matmul_groups
    nan_scratch(monkeypatch)
    forward, forwarded = matmul_groups.forward_products, []
    monkeypatch.setattr(matmul_groups, "forward_products", lambda *a: forwarded.append(bool(kept := forward(*a))) or kept)

    @settings(max_examples=20, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def prop(data):
        draw = data.draw
        W = draw(st.integers(2, 128), label="W")
        DW = draw(st.integers(2, 300), label="DW")
        consts = dict(W=W, SPLIT=draw(st.integers(1, W - 1)), DW=DW, DSPLIT=draw(st.integers(1, DW - 1)),
                      STORE_C=draw(st.booleans()))
        I, KT = draw(st.integers(5, 8), label="I"), draw(st.integers(1, 3), label="KT")
        seed = draw(st.integers(0, 2 ** 16))
        c = nkicc.compile(chained_products, f"float32[{KT * 128},{I * W}]", f"float32[{KT * 128},128]",
                          f"float32[128,{DW}]", **consts)
        rng = np.random.default_rng(seed)
        sim = MachineSimulator(c.ir, TRN2, timing=False)
        for _ in range(2):
            inputs = {"a": rng.standard_normal((KT * 128, I * W)).astype(np.float32),
                      "b": rng.standard_normal((KT * 128, 128)).astype(np.float32),
                      "d": rng.standard_normal((128, DW)).astype(np.float32)}
            fast, _ = sim.run(inputs)
            slow, _ = MachineSimulator(c.ir, TRN2, timing=False, batch=False).run(inputs)
            for name in ("out", "c_out") if consts["STORE_C"] else ("out",):
                assert_same_up_to_sums(c.ir, inputs, fast, slow, name)

    prop()
    assert any(forwarded)


@nkicc.jit
def row_tiles(a, d, T=12, TE=16, R=8, REWRITE=False):
    """Per 128-row block i of d's contraction: c holds a's block in its even columns (so a tile of
    c stores its rows 8 bytes apart, as mm2's Ct does); E's rows are T tiles of TE in a loop and a
    ragged tile of R after it, each summing c's rows times d's two column tiles (a group per tile
    of rows, both reading d's tiles). REWRITE doubles c's last R rows between the loop and the
    ragged tile: its matmuls must read them doubled."""
    I, W = a.shape[0] // 128, T * TE + R
    out = nl.ndarray((I * W, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(I):
        c = nl.ndarray((128, W, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c[:, :, 0], src=a[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=c[:, :, 1], src=a[i * 128:(i + 1) * 128, :])
        e = nl.zeros((TE, 96, T + 1), dtype=nl.float32, buffer=nl.sbuf)
        d0, d1 = nl.load(d[i * 128:(i + 1) * 128, 0:56]), nl.load(d[i * 128:(i + 1) * 128, 56:96])
        for m in nl.affine_range(T):
            for lo, hi, dt in ((0, 56, d0), (56, 96, d1)):
                q = nl.ndarray((TE, hi - lo), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(q, c[:, m * TE:(m + 1) * TE, 0], dt, accumulate=False)
                nisa.tensor_tensor(dst=e[:, lo:hi, m], data1=e[:, lo:hi, m], data2=q, op=nl.add)
        if REWRITE:
            nisa.tensor_scalar(dst=c[:, T * TE:W, 0], data=c[:, T * TE:W, 0], op0=nl.multiply, operand0=2.0)
        for lo, hi, dt in ((0, 56, d0), (56, 96, d1)):
            q = nl.ndarray((R, hi - lo), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(q, c[:, T * TE:W, 0], dt, accumulate=False)
            nisa.tensor_tensor(dst=e[:R, lo:hi, T], data1=e[:R, lo:hi, T], data2=q, op=nl.add)
        for m in nl.affine_range(T):
            nl.store(out[i * W + m * TE:i * W + (m + 1) * TE, :], e[:, :, m])
        nl.store(out[i * W + T * TE:(i + 1) * W, :], e[:R, :, T])
    return out


@pytest.mark.parametrize("rewrite", [False, True])
def test_row_groups_join_only_where_their_operands_hold_still(rng, monkeypatch, rewrite):
    """row_tiles' loop of row tiles and its ragged tile share d's tiles: one GEMM with their rows
    concatenated, which runs at the loop's turn. With c's ragged rows rewritten in between, the
    ragged tile's matmuls must see the new rows: its group keeps its own GEMM. Batched against
    per instruction and numpy on random data with NaN scratch."""
    nan_scratch(monkeypatch)
    a, d = rng.standard_normal((1024, 200)).astype(np.float32), rng.standard_normal((1024, 96)).astype(np.float32)
    c = nkicc.compile(row_tiles, a, d, REWRITE=rewrite)
    sim = MachineSimulator(c.ir, TRN2, timing=False)
    rows = [it.group.rows for nest in sim.nests if nest.label.endswith("i (i0)") for it in nest.items
            if it.group is not None]
    assert rows and all((r is None) == rewrite for r in rows)
    fast, rep = sim.run({"a": a, "d": d})
    slow, _ = MachineSimulator(c.ir, TRN2, timing=False, batch=False).run({"a": a, "d": d})
    assert rep.batched_loops
    assert_same_up_to_sums(c.ir, {"a": a, "d": d}, fast, slow, "out")
    want = np.concatenate([a[i * 128:(i + 1) * 128].T.astype(np.float64) @ d[i * 128:(i + 1) * 128] for i in range(8)])
    if rewrite:
        for i in range(8):
            want[i * 200 + 192:(i + 1) * 200] *= 2
    assert np.allclose(fast["out"], want, rtol=1e-4, atol=1e-3)


@nkicc.jit
def transposes_in_a_loop(a, b):
    """dma_transpose of HBM tiles in a loop, a 2-d one and a 3-d one with its own axes, each
    stored straight back: the loop's iterations are independent."""
    out1 = nl.ndarray((4, 32, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((4, 8, 2, 16), dtype=b.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t1 = nl.ndarray((32, 16), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t1, src=a[i * 16:(i + 1) * 16, :])
        nisa.dma_copy(dst=out1[i], src=t1)
        t2 = nl.ndarray((8, 2, 16), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t2, src=b[i], axes=(1, 0, 2))
        nisa.dma_copy(dst=out2[i], src=t2)
    return out1, out2


def test_dma_transposes_in_a_loop_run_batched_as_one_at_a_time_does(rng):
    a = rng.standard_normal((64, 32)).astype(np.float16)
    b = rng.standard_normal((4, 2, 8, 16)).astype(np.float16)
    c = nkicc.compile(transposes_in_a_loop, a, b)
    (fast, frep), (slow, srep) = both(c.ir, {"a": a, "b": b})
    assert frep.batched_loops and not srep.batched_loops
    for name in c.ir.outputs:
        np.testing.assert_array_equal(fast[name], slow[name])
    o1, o2 = (fast[name] for name in c.ir.outputs)
    np.testing.assert_array_equal(o1, a.reshape(4, 16, 32).transpose(0, 2, 1))
    np.testing.assert_array_equal(o2, b.transpose(0, 2, 1, 3))
