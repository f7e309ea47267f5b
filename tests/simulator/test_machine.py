"""The machine simulator (simulator/machine.py): physical SBUF/PSUM at the
allocator's addresses, engines and DMA queues with the schedule's semaphores,
costs from the target's table, hazard detection, reports and Perfetto traces.

Oracles: the reference interpreter (which ignores addresses, engines and
semaphores) must agree bit for bit, and numpy within fp32 tolerance. Programs
are lowered by the real pipeline (alloc + schedule); the negative tests break a
lowered program on purpose (a deleted semaphore, overlapping live tiles)."""
import dataclasses
import json
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError, Op
from nkicc.plugins.targets import TRN1, TRN2, TRN3
from nkicc.simulator._blas import single_threaded_blas
from nkicc.simulator.machine import MachineSimulator
from nkicc.simulator.reference import run_reference
from nkicc.simulator.testing import edit_op, naive_lower
from nkicc.simulator.timing import cost_ns, traffic_bytes

from tests.support.paths import EXAMPLES
from tests.support.compare import close_to_scale, same_up_to_sums

sys.path.insert(0, str(EXAMPLES))
import fused_matmul as fm  # noqa: E402


# --- kernels -----------------------------------------------------------------------------

@nkicc.jit
def exp_add(a):
    """x + exp(x) per 128-row tile: DMA, Scalar Engine and Vector Engine."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.exp(x)
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, y))  # MARK:add
    return out


@nkicc.jit
def two_tiles(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, value=nl.subtract(x, y))
    return out


@nkicc.jit
def matmul_acc(a_t, b):
    """out = a_t.T @ b, accumulating over k tiles in PSUM (accumulate=None rule)."""
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a_t.shape[0] // 128):
        at = nl.load(a_t[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(ps, at, bt)
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def mixed(a):
    """bf16 tiles, a transpose on the Tensor Engine, a reduction, iota on GpSimd."""
    out = nl.ndarray((a.shape[1], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a, dtype=nl.bfloat16)
    tp = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(tp, x)
    idx = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=idx, pattern=[[1, a.shape[0]]], offset=0, channel_multiplier=0)
    y = nl.multiply(nl.copy(tp), idx)
    s = nl.ndarray((a.shape[1], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=y, axis=1, keepdims=True)
    nl.store(out, value=s)
    return out


@nkicc.jit
def runaway_offset(a):
    """A runtime scalar offset that walks off the end of `a` in the last iteration."""
    out = nl.ndarray((4, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    idx = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    for i in nl.dynamic_range(4):
        t = nl.load(a.ap([[32, 1], [1, 32]], offset=0, scalar_offset=idx, indirect_dim=0))  # MARK:E170
        nl.store(out.ap([[32, 1], [1, 32]], offset=0, scalar_offset=i, indirect_dim=0), value=t)
        nisa.tensor_scalar(dst=idx, data=idx, op0=nl.add, operand0=1)
    return out


# --- helpers -----------------------------------------------------------------------------

def reference(kernel, inputs):
    with single_threaded_blas():  # the machine's BLAS setting: the same rounding
        return run_reference(kernel, inputs)


def machine(kernel, inputs, target=TRN2, **kw):
    return MachineSimulator(kernel, target, **kw).run(inputs)


def lowered(kernel, *arrays, **kw):
    c = nkicc.compile(kernel, *arrays, **kw)
    assert all(t.address is not None for t in c.ir.tensors if t.on_chip), "alloc did not run"
    return c.ir, dict(zip(c.ir.args, arrays))


def ops(kernel):
    return [s for s in kernel.body.walk() if isinstance(s, Op)]


def same(got, want):
    np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))




close = close_to_scale


MM2_SHAPES = [(256, 420), (256, 512), (512, 256)]  # At, B, D: two m blocks, the second ragged


def mm2_ref(At, B, D):
    return (At.astype(np.float64).T @ B) @ D


# --- results -----------------------------------------------------------------------------

@pytest.mark.parametrize("timing", [True, False])
def test_machine_equals_reference_and_numpy(rng, timing):
    a = rng.standard_normal((384, 96)).astype(np.float32)
    k, inputs = lowered(exp_add, a)
    out, rep = machine(k, inputs, timing=timing)
    same(out[k.outputs[0]], reference(k, inputs)[k.outputs[0]])
    close(out[k.outputs[0]], a + np.exp(a.astype(np.float64)))
    assert rep.executed >= 3 * 3
    assert (rep.total_ns is not None) == timing


@pytest.mark.parametrize("name", ["mm2", "mm2_dynamic", "einsum"])
def test_fused_matmul_examples(rng, name):
    shapes = {"einsum": [(128, 256), (256, 256), (1, 1), (256, 512)]}.get(name, MM2_SHAPES)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    k, inputs = lowered(getattr(fm, name), *arrays)
    out, rep = machine(k, inputs, batch=False)  # one instruction at a time: the reference's arithmetic exactly
    got = out[k.outputs[0]]
    same(got, reference(k, inputs)[k.outputs[0]])
    want = mm2_ref(*arrays) if name != "einsum" else (arrays[0].astype(np.float64) @ arrays[1]) @ arrays[3]
    close(got, want)
    assert rep.total_ns > 0 and rep.engines["pe"].instructions > 0 and not rep.batched_loops
    fast, frep = machine(k, inputs)
    same_up_to_sums(fast[k.outputs[0]], got, frep.reordered_sums)
    assert frep.total_ns == rep.total_ns and frep.executed == rep.executed
    assert bool(frep.batched_loops) == (name != "einsum")  # einsum is traced per iteration: no loops


def test_psum_accumulate_none_and_mixed_engines(rng):
    a_t, b = rng.standard_normal((384, 64)).astype(np.float32), rng.standard_normal((384, 200)).astype(np.float32)
    k, inputs = lowered(matmul_acc, a_t, b)
    out, _ = machine(k, inputs)
    same(out[k.outputs[0]], reference(k, inputs)[k.outputs[0]])
    close(out[k.outputs[0]], a_t.astype(np.float64).T @ b)

    a = rng.standard_normal((64, 32)).astype(np.float32)
    k, inputs = lowered(mixed, a)
    out, rep = machine(k, inputs)
    same(out[k.outputs[0]], reference(k, inputs)[k.outputs[0]])
    xb = a.astype(ml_dtypes.bfloat16)
    want = (np.asarray(xb, np.float64).T * np.arange(64)[None, :]).sum(axis=1, keepdims=True)
    close(out[k.outputs[0]], want, tol=2e-2)
    used = {e for e, s in rep.engines.items() if s.instructions}
    assert {"pe", "dve", "pool", "dma"} <= used


def test_reads_past_a_tile_and_naive_lowering_agree(rng):
    """The literal seed copy reads past its At tile (W101): poison that never
    reaches E, in both simulators; and a conservative hand lowering of the
    unlowered trace gives the same result as the pipeline's."""
    from tests.support import seeds_scaled_kernels as seeds
    shapes = [(256, 1190), (256, 512), (512, 256)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    c = nkicc.compile(seeds.mm2_static, *arrays, m_factor=2)
    inputs = dict(zip(c.ir.args, arrays))
    out, rep = machine(c.ir, inputs)
    got = out[c.ir.outputs[0]]
    same_up_to_sums(got, reference(c.ir, inputs)[c.ir.outputs[0]], rep.reordered_sums)
    assert not np.isnan(got).any()
    naive, nrep = machine(naive_lower(c.traced_ir, TRN2), inputs)
    same_up_to_sums(naive[c.ir.outputs[0]], got, rep.reordered_sums or nrep.reordered_sums)


# --- broken programs ---------------------------------------------------------------------

def test_deleted_semaphore_is_a_hazard_naming_both_instructions(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    k, inputs = lowered(exp_add, a)
    by_id = {op.attr("id"): op for op in ops(k)}
    add = next(op for op in ops(k) if op.opcode == "tensor_tensor")
    act = next(op for op in ops(k) if op.opcode == "activation")
    assert act.attr("id") in add.attr("wait")
    machine(k, inputs)  # as scheduled: no hazard
    broken = edit_op(k, add.attr("id"), wait=tuple(w for w in add.attr("wait") if w != act.attr("id")))
    with pytest.raises(NkiccError) as ei:
        machine(broken, inputs)
    err = ei.value
    assert err.code == "E171"
    text = str(err)
    assert f"tensor_tensor (id {add.attr('id')}, {add.loc})" in text
    assert f"activation (id {act.attr('id')}, {act.loc})" in text
    assert "read-after-write" in text and err.loc == add.loc
    assert by_id[act.attr("id")].attr("engine") == "act"
    # functional-only simulation does not time, so it does not check
    out, _ = machine(broken, inputs, timing=False)
    close(out[k.outputs[0]], a + np.exp(a.astype(np.float64)))


def test_every_deleted_wait_is_caught_or_redundant(rng):
    """Deleting any one semaphore of a loop kernel either trips the hazard check
    or is covered by another one; at least one deletion must trip it."""
    a = rng.standard_normal((384, 32)).astype(np.float32)
    k, inputs = lowered(exp_add, a)
    caught = 0
    for op in ops(k):
        for w in op.attr("wait"):
            broken = edit_op(k, op.attr("id"), wait=tuple(x for x in op.attr("wait") if x != w))
            try:
                out, _ = machine(broken, inputs)
            except NkiccError as err:
                assert err.code == "E171" and f"(id {op.attr('id')}," in str(err) and f"(id {w}," in str(err)
                caught += 1
            else:
                same(out[k.outputs[0]], reference(k, inputs)[k.outputs[0]])
    assert caught >= 2


def test_overlapping_live_allocations_give_wrong_data(rng):
    a, b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)
    k, inputs = lowered(two_tiles, a, b)
    tiles = [t for t in k.tensors if t.buffer == "sbuf"]
    loads = [op.outs[0].tensor for op in ops(k) if op.opcode == "dma_copy" and op.ins[0].tensor in ("a", "b")]
    x, y = (k.tensor(n) for n in loads)
    assert x.address != y.address and len(tiles) >= 2
    clash = dataclasses.replace(k, tensors=tuple(dataclasses.replace(t, address=x.address) if t.name == y.name
                                                 else t for t in k.tensors))
    want = reference(clash, inputs)[k.outputs[0]]          # the reference ignores addresses
    close(want, a - b)
    got, _ = machine(clash, inputs, timing=False)
    assert not np.array_equal(got[k.outputs[0]], want)     # y's load overwrote x: b - b
    same(got[k.outputs[0]], np.zeros_like(a))
    with pytest.raises(NkiccError) as ei:                   # and, timed, two DMAs race on the same bytes
        machine(clash, inputs)
    assert ei.value.code == "E171"


def test_runtime_scalar_offset_out_of_range(rng):
    a = rng.standard_normal((3, 32)).astype(np.float32)
    k, inputs = lowered(runaway_offset, a)
    with pytest.raises(NkiccError) as ei:
        machine(k, inputs)
    err = ei.value
    assert err.code == "E170" and "a" in err.message
    line = next(i + 1 for i, text in enumerate(open(__file__).read().splitlines())
                if "MARK:E170" in text and "next(" not in text)
    assert err.loc.file == __file__ and err.loc.line == line


def test_unlowered_program_is_refused(rng):
    a = rng.standard_normal((128, 8)).astype(np.float32)
    c = nkicc.compile(exp_add, a)
    with pytest.raises(NkiccError) as ei:
        machine(c.traced_ir, {"a": a})
    assert ei.value.code == "E172"


# --- report, timing, trace ---------------------------------------------------------------

def test_report_counts_and_bytes(rng):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in MM2_SHAPES]
    k, inputs = lowered(fm.mm2, *arrays)
    _, rep = machine(k, inputs)
    assert rep.total_ns > 0
    assert sum(s.instructions for s in rep.engines.values()) == rep.executed
    assert sum(s.instructions for s in rep.dma_queues.values()) == rep.engines["dma"].instructions
    assert rep.dma_transfers == rep.engines["dma"].instructions
    for name, s in rep.engines.items():
        assert s.busy_ns >= 0 and 0 <= s.active_pct <= 100.0 + 1e-9, name
        assert (s.busy_ns > 0) == (s.instructions > 0), name
    # every input is loaded at least once; E's rows are stored in 56-row tiles, the first
    # block's last tile running 36 rows into the next block (as the seed does): 456 rows
    assert rep.dma_bytes["hbm->sbuf"] >= sum(a.nbytes for a in arrays)
    assert rep.dma_bytes["sbuf->hbm"] == (6 * 56 + 2 * 56 + 8) * 256 * 4
    assert rep.spill_bytes == 0
    d = json.loads(rep.to_json())
    assert d["executed"] == rep.executed and "estimate" in d["note"]
    assert "estimated time" in rep.summary()


def test_timing_follows_the_targets_clocks_and_bandwidth(rng):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in MM2_SHAPES]
    k, inputs = lowered(fm.mm2, *arrays)
    totals = {t.name: machine(k, inputs, target=t)[1].total_ns for t in (TRN1, TRN2, TRN3)}
    assert totals["trn3"] < totals["trn2"]  # faster DMA, faster vector clock
    assert all(v > 0 for v in totals.values())
    base = TRN2.costs
    slow = dataclasses.replace(base, dma_fixed_ns=10 * base.dma_fixed_ns)
    # the kernel starts with loads and ends with a store, both on its critical path: each adds
    # the extra latency at least once
    assert machine(k, inputs, costs=slow)[1].total_ns >= totals["trn2"] + 2 * 9 * base.dma_fixed_ns


@nkicc.jit
def matmul_repeat(a_t, b, dtype=nl.float32):
    """out = 6 a_t.T @ b: six matmuls on operands loaded once (as `dtype`), into one PSUM tile."""
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a_t, dtype=dtype)
    bt = nl.load(b, dtype=dtype)
    ps = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.affine_range(6):
        nisa.nc_matmul(ps, at, bt)
    nl.store(out, value=nl.copy(ps))
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tensore_loads_the_next_stationary_while_it_multiplies(rng, dtype):
    """ARCH1's TensorE cost: a matmul is a LoadStationary and a MultiplyMoving, and the engine
    decodes the next instruction and loads its stationary while the current one multiplies. The
    first of six matmuls waits for its operands' loads and pays its static overhead and its
    LoadStationary; the five after it, whose operands are in place, pay only their MultiplyMoving."""
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    k, inputs = lowered(matmul_repeat, a, b, dtype=getattr(nl, dtype), cache=False)
    t, ghz = TRN2.costs, TRN2.pe_ghz
    factor = t.matmul_fp32_factor if dtype == "float32" else 1
    overhead = t.fixed_cycles + t.onchip_access_cycles
    load_stationary = 128 * factor / t.load_stationary_speedup
    multiply = 512 * factor
    outputs, report = machine(k, inputs)
    rounded = [x.astype(ml_dtypes.bfloat16).astype(np.float64) if dtype == "bfloat16" else x.astype(np.float64)
               for x in (a, b)]
    close(next(iter(outputs.values())), 6 * (rounded[0].T @ rounded[1]), tol=1e-4)
    first = (overhead + load_stationary + multiply) / ghz
    assert report.engines["pe"].busy_ns == pytest.approx(first + 5 * multiply / ghz)


def test_cost_table_entries(rng):
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    k, _ = lowered(matmul_acc, a, b)
    decls = k.tensor_map()
    t = TRN2.costs
    mm = next(op for op in ops(k) if op.opcode == "nc_matmul")
    # the LoadStationary of the 128 x 128 stationary at the fast rate, then the 512-column MultiplyMoving
    pe_cycles = t.fixed_cycles + t.onchip_access_cycles + 4 * 128 / t.load_stationary_speedup + 4 * 512  # fp32: x4
    assert cost_ns(mm, "pe", decls, TRN2, t) == pytest.approx(pe_cycles / TRN2.pe_ghz)
    bf = dataclasses.replace(k, tensors=tuple(dataclasses.replace(d, dtype="bfloat16") if d.buffer == "sbuf"
                                              else d for d in k.tensors))
    bf_cycles = t.fixed_cycles + t.onchip_access_cycles + 128 / t.load_stationary_speedup + 512
    assert cost_ns(mm, "pe", bf.tensor_map(), TRN2, t) == pytest.approx(bf_cycles / TRN2.pe_ghz)
    load = next(op for op in ops(k) if op.opcode == "dma_copy" and op.ins[0].tensor == "b")
    ns, nbytes = cost_ns(load, "dma", decls, TRN2, t), traffic_bytes(load, decls)
    assert nbytes == 128 * 512 * 4
    # 128 partition rows of 2 KiB: all 16 engines (capped by the core's HBM share), at the
    # per-buffer efficiency of 2 KiB rows (ir/target.py, ARCH1 "Data movement ...")
    eff = 2048 / (2048 + t.dma_buffer_overhead_bytes)
    peak = min(16 * t.dma_engine_bytes_per_ns, t.hbm_bytes_per_ns)
    assert ns == pytest.approx(t.dma_fixed_ns + nbytes / (peak * eff))


def test_perfetto_trace(rng, tmp_path):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in MM2_SHAPES]
    k, inputs = lowered(fm.mm2, *arrays)
    path = tmp_path / "trace.json"
    _, rep = machine(k, inputs, trace=str(path))
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    ops_ev = [e for e in events if e["ph"] == "X" and e["cat"] != "loop"]
    assert len(ops_ev) == rep.executed and rep.trace_file == str(path)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    tids = {e["tid"] for e in ops_ev}
    assert len(tids) >= 4 and tids <= set(names)
    assert any("Tensor Engine" in names[t] for t in tids) and any("DMA queue" in names[t] for t in tids)
    for e in ops_ev:
        assert e["dur"] > 0 and e["ts"] >= 0 and ".py:" in e["args"]["loc"] and isinstance(e["args"]["id"], int)
    assert any("iter" in e["args"] for e in ops_ev)
    loops = [e for e in events if e.get("cat") == "loop"]
    assert loops and all(e["ph"] == "X" and e["tid"] in names for e in loops)
    assert any(names[e["tid"]].startswith("loop ") for e in loops)
    # events on one track never overlap (Perfetto nests slices per track)
    for tid in {e["tid"] for e in events if e["ph"] == "X"}:
        span = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X" and e["tid"] == tid)
        assert all(b0 >= a1 - 1e-6 for (_, a1), (b0, _) in zip(span, span[1:])), names[tid]
    assert max(e["ts"] + e["dur"] for e in ops_ev) == pytest.approx(rep.total_ns / 1000)
    assert data["otherData"]["capped"] is False
    # capped
    _, rep = machine(k, inputs, trace=str(path), max_trace_events=50)
    data = json.loads(path.read_text())
    assert rep.trace_capped and data["otherData"]["capped"] is True and data["otherData"]["dropped_events"] > 0
    assert len([e for e in data["traceEvents"] if e["ph"] == "X"]) <= 50


# --- the driver: CompiledKernel.run and `nkicc simulate` ---------------------------------

def test_compiled_kernel_runs_on_the_machine(rng):
    a = rng.standard_normal((256, 48)).astype(np.float32)
    c = nkicc.compile(exp_add, a)
    assert c.simulator == "machine"
    got = c.run(a)
    close(got, a + np.exp(a.astype(np.float64)))
    executed = c.sim.executed
    assert executed >= 6 and c.report["sim"]["total_ns"] > 0 and c.report["sim"]["executed"] == executed
    outs, rep = c.simulate({"a": a}, simulator="reference")
    same(outs[c.ir.outputs[0]], got)
    assert rep is None
    _, rep = c.simulate({"a": a}, timing=False)
    assert rep.total_ns is None and rep.executed == executed


def test_cli_simulate_trace_and_report(tmp_path):
    from tests.support.cli import run_cli
    trace, report = tmp_path / "t.json", tmp_path / "sim.json"
    cmd = ["simulate", f"{EXAMPLES / 'fused_matmul.py'}::einsum",
           "--arg", "A=float32[128,256]", "--arg", "B=float32[256,256]", "--arg", "D=float32[256,512]"]
    r = run_cli(*cmd, "--trace", str(trace), "--sim-json", str(report))
    assert r.returncode == 0, r.stderr
    assert "estimated time" in r.stdout and "instructions executed" in r.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    assert len({e["tid"] for e in events if e["ph"] == "X"}) >= 3
    assert json.loads(report.read_text())["executed"] > 0
    r = run_cli(*cmd, "--simulator", "reference")
    assert r.returncode == 0 and "estimated time" not in r.stdout
    r = run_cli(*cmd, "--timing", "maybe")
    assert r.returncode != 0 and "E201" in r.stderr + r.stdout


def test_spilled_program_counts_spill_traffic(rng):
    """On a target with 8 KiB of SBUF per partition the allocator spills to HBM;
    the machine runs the spill DMAs and counts their bytes."""
    arrays = [rng.standard_normal(s).astype(np.float32) for s in MM2_SHAPES]
    c = nkicc.compile(fm.mm2, *arrays, passes={"plugins": ("tests.support.tiny_target_plugin",), "target": "tiny"})
    assert any(t.role == "spill" for t in c.ir.tensors)
    got = c.run(*arrays)
    rep = c.sim
    assert rep.target == "tiny" and rep.spill_bytes > 0
    same_up_to_sums(got, reference(c.ir, dict(zip(c.ir.args, arrays)))[c.ir.outputs[0]], rep.reordered_sums)
    close(got, mm2_ref(*arrays))


@nkicc.jit
def strided_columns(a):
    """Every other row of the first 32 and every sixth column, through SBUF: strided reads in HBM and
    on chip (partitions too)."""
    out = nl.ndarray((16, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[:, 0:48:3])
    u = nl.ndarray((16, 8), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(u, t[0:32:2, 0:16:2])
    nl.store(out, u)
    return out


_PAIRS = st.lists(st.tuples(st.integers(-40, 40), st.integers(1, 7)), max_size=4)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(_PAIRS)
@example([(0, 3), (1, 4)])      # a step of 0: its indices repeat every value
@example([(-5, 3), (1, 5)])     # a negative step that nests
def test_access_element_sets_without_sorting_match_the_sorted_product(pairs):
    """The element offsets of an access's (step, num) pairs: the shortcut for pairs that
    nest (no np.unique) against every index combination summed, sorted and deduplicated;
    the density read from the steps against the values (hazard checks trust both)."""
    from nkicc.simulator.program import _combos, _dense, _dense_pairs, _nested
    vals = np.zeros(1, dtype=np.int64)
    for step, num in pairs:
        vals = (vals[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    want = np.unique(vals)
    np.testing.assert_array_equal(_combos(pairs), want)
    dense = _dense_pairs(pairs)
    assert dense is None or dense == _dense(want)
    if _nested(pairs) is not None:  # each value from one index tuple of the pairs that move
        moving = np.zeros(1, dtype=np.int64)
        for step, num in pairs:
            if step:
                moving = (moving[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
        assert want.size == moving.size


def test_nesting_steps_skip_the_sort():
    """Pairs that nest (a tile's rows and columns, a negative step included) take the
    shortcut; a sliding window (a step inside the span of a smaller one) does not."""
    from nkicc.simulator.program import _dense_pairs, _nested
    assert _nested([(512, 128), (1, 300), (-70000, 2)]) is not None
    assert _dense_pairs([(300, 128), (1, 300)]) is True
    assert _dense_pairs([(512, 128), (1, 300)]) is False
    assert _nested([(1, 10), (5, 3)]) is None and _dense_pairs([(1, 10), (5, 3)]) is None


def test_exact_overlap_answers_kept_per_relative_position(rng):
    """_overlap keeps the exact answer for two strided accesses by where they sit relative to each
    other: at every pair of starts the kept answer is the one computed afresh (with an empty cache
    of its own), on chip and in HBM, for starts that share an offset but not a position."""
    a = rng.standard_normal((128, 96)).astype(np.float32)
    k, _ = lowered(strided_columns, a)
    m = MachineSimulator(k, TRN2)
    accs = [acc for p in m.plans for acc in p.accs if not acc.dense]
    assert {acc.t.onchip for acc in accs} == {True, False}, [acc.t.name for acc in accs]

    def starts(acc):
        t = acc.t
        if not t.onchip:
            return list(range(0, t.size - acc.hi_span, 3))[:40]
        return [p * t.F + f for p in range(0, t.P - acc.part_hi, 9) for f in range(0, t.F - acc.free_hi)][:60]

    def ask(x, ex, y, ey):
        r, q = m._region_at(x, ex), m._region_at(y, ey)
        rec = (q[1], q[2], q[3], q[4], 0.0, 1.0, None, y, q[6], q[5], q[7], 0)
        return m._overlap(r, x, rec)

    asked = hits = 0
    for x in accs:
        for y in accs:
            if x.t.onchip != y.t.onchip:
                continue
            for ex in starts(x):
                for ey in starts(y):
                    kept = ask(x, ex, y, ey)
                    kept_so_far, m._overlaps = m._overlaps, {}
                    fresh = ask(x, ex, y, ey)
                    m._overlaps = kept_so_far
                    assert kept == fresh, (x.t.name, ex, y.t.name, ey)
                    asked += 1
                    hits += fresh
    assert asked > 500 and 0 < hits < asked  # both answers occur
