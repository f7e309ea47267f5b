"""nki.collectives and the two-core instructions over N simulated ranks, each
with its own SBUF and PSUM, against numpy on random per-rank data."""
import json

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
import nkicc.language.collectives as cc

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nki.collectives.all_reduce",
    "nki.collectives.all_gather",
    "nki.collectives.reduce_scatter",
    "nki.collectives.all_to_all",
    "nki.collectives.collective_permute",
    "nki.collectives.collective_permute_implicit",
    "nki.collectives.rank_id",
    "nki.collectives.ReplicaGroup",
    "nisa.sendrecv",
    "nisa.core_barrier")


def per_rank(rng, ranks, shape):
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(ranks)]


@nkicc.jit
def all_reduce_hbm(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_reduce(srcs=[x], dsts=[out], replica_group=cc.ReplicaGroup(), op=nl.add)
    return out


@nkicc.jit
def all_reduce_sbuf(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    cc.all_reduce(srcs=[t], dsts=[r], replica_group=None, op=nl.maximum)
    nl.store(out, value=r)
    return out


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_all_reduce(rng, ranks):
    xs = per_rank(rng, ranks, (64, 32))
    got = nkicc.run_ranks(all_reduce_hbm, ranks, xs)
    for g in got:
        np.testing.assert_allclose(g, np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)
    got = nkicc.run_ranks(all_reduce_sbuf, ranks, xs)
    for g in got:
        np.testing.assert_array_equal(g, np.max(xs, axis=0))


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_all_gather_and_reduce_scatter(rng, ranks):
    xs = per_rank(rng, ranks, (16, 8))
    ys = per_rank(rng, ranks, (8 * ranks, 8))

    @nkicc.jit
    def k(x, y):
        g = nl.ndarray((16 * ranks, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        s = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        cc.all_gather(srcs=[x], dsts=[g], replica_group=cc.ReplicaGroup([list(range(ranks))]), collective_dim=0)
        cc.reduce_scatter(srcs=[y], dsts=[s], replica_group=cc.ReplicaGroup([list(range(ranks))]),
                          collective_dim=0, op=nl.add)
        return g, s

    got = nkicc.run_ranks(k, ranks, xs, ys)
    total = np.sum(ys, axis=0)
    for r, (g, s) in enumerate(got):
        np.testing.assert_array_equal(g, np.concatenate(xs, axis=0))
        np.testing.assert_allclose(s, total[8 * r:8 * (r + 1)], rtol=1e-5, atol=1e-5)


def test_run_ranks_keeps_the_jits_variant_and_options(rng):
    """run_ranks compiles as a call does: with the jit's own options (here the unroll pass), and once
    per signature, kept in kernel.compiled (a second run does not compile again)."""
    @nkicc.jit(passes={"enable": ["unroll"]})
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 32):
            t = nl.load(x[i * 32:(i + 1) * 32, :])
            r = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
            cc.all_reduce(srcs=[t], dsts=[r], replica_group=cc.ReplicaGroup(), op=nl.add)
            nl.store(out[i * 32:(i + 1) * 32, :], value=r)
        return out

    xs = per_rank(rng, 2, (64, 16))
    for _ in range(2):
        for g in nkicc.run_ranks(k, 2, xs):
            np.testing.assert_allclose(g, xs[0] + xs[1], rtol=1e-6)
    assert len(k.compiled) == 1
    assert "unroll" in k.compiled[0].report["pipeline"] and k.compiled[0].report["static_loops"]["compiled"] == 0


def test_subgroups_all_to_all_and_permutes(rng):
    ranks = 4
    xs = per_rank(rng, ranks, (8, 4))

    @nkicc.jit
    def k(x):
        red = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        a2a = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        perm = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        ring = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        cc.all_reduce(srcs=[x], dsts=[red], replica_group=cc.ReplicaGroup([[0, 2], [1, 3]]), op=nl.add)
        cc.all_to_all(srcs=[x], dsts=[a2a], replica_group=cc.ReplicaGroup([[0, 1, 2, 3]]), collective_dim=0)
        nisa.dma_copy(dst=perm, src=x)
        cc.collective_permute(srcs=[x], dsts=[perm], source_target_pairs=[(0, 1), (1, 0), (2, 3)])
        cc.collective_permute_implicit(srcs_by_channel=[[x]], dsts_by_channel=[[ring]],
                                       replica_group=cc.ReplicaGroup([[0, 1, 2, 3]]))
        return red, a2a, perm, ring

    got = nkicc.run_ranks(k, ranks, xs)
    for r, (red, a2a, perm, ring) in enumerate(got):
        partner = {0: 2, 2: 0, 1: 3, 3: 1}[r]
        np.testing.assert_allclose(red, xs[r] + xs[partner], rtol=1e-6)
        np.testing.assert_array_equal(a2a, np.concatenate([xs[s][2 * r:2 * r + 2] for s in range(ranks)]))
        np.testing.assert_array_equal(perm, {0: xs[1], 1: xs[0], 2: xs[2], 3: xs[2]}[r])
        np.testing.assert_array_equal(ring, xs[(r - 1) % ranks])


def test_rank_id_register_picks_each_ranks_slice(rng):
    ranks = 4
    x = rng.standard_normal((ranks, 16)).astype(np.float32)

    @nkicc.jit
    def k(x):
        out = nl.ndarray((1, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        me = cc.rank_id()
        row = nl.ndarray((1, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x.ap([[16, 1], [1, 16]], scalar_offset=me, indirect_dim=0))
        nisa.dma_copy(dst=out, src=row)
        return out

    got = nkicc.run_ranks(k, ranks, x)
    for r, g in enumerate(got):
        np.testing.assert_array_equal(g, x[r:r + 1])


@nkicc.jit
def swap_halves(x):
    """Two cores: each loads its half, swaps it with the other, writes to its half."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    other = 1 - pid
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=other, recv_from_rank=other, pipe_id=0)
    nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_a_two_core_launch_runs_its_programs_at_once(rng, simulator):
    """kernel[2] whose programs meet at sendrecv and core_barrier: one core
    each, their own SBUF, the kernel's HBM shared."""
    x = rng.standard_normal((128, 32)).astype(np.float32)
    ck = swap_halves[2].compile(x)
    assert ck.report["cores"] == 2
    outputs, _ = ck.simulate({"x": x}, simulator=simulator)
    got = outputs[ck.ir.outputs[0]]
    np.testing.assert_array_equal(got[:64], x[64:])
    np.testing.assert_array_equal(got[64:], x[:64])
    np.testing.assert_array_equal(swap_halves[2](x), got)


@pytest.mark.parametrize("simulator", ["machine", "reference"])
@pytest.mark.parametrize("dtype", ["int32", "uint32", "float8_e4m3fn_x4"])
def test_sendrecv_moves_integer_and_packed_data_bit_for_bit(rng, simulator, dtype):
    # integers past 2^24 (which fp32 cannot hold) and packed MX bits cross cores unchanged
    from nkicc.ir import numerics
    from nkicc.specs import TensorSpec
    x = (rng.integers(2 ** 24, 2 ** 31, size=(128, 32)).astype(dtype) if "int" in dtype
         else numerics.random_values(rng, dtype, (128, 32)))
    ck = nkicc.compile(swap_halves[2], TensorSpec((128, 32), dtype))
    outputs, _ = ck.simulate({"x": x}, simulator=simulator)
    got = outputs[ck.ir.outputs[0]]
    np.testing.assert_array_equal(got[:64], x[64:])
    np.testing.assert_array_equal(got[64:], x[:64])


def test_collective_time_is_on_each_ranks_timeline(rng, tmp_path):
    xs = per_rank(rng, 2, (128, 512))
    ck = nkicc.compile(all_reduce_hbm, xs[0])
    outputs, reports = ck.run_ranks([{"x": x} for x in xs], trace=str(tmp_path / "rank{rank}.json"))
    for r in range(2):
        events = json.loads((tmp_path / f"rank{r}.json").read_text())["traceEvents"]
        mine = [e for e in events if e.get("name") == "all_reduce"]
        assert mine and mine[0]["dur"] > 0
        assert reports[r].total_ns >= mine[0]["dur"] / 1e-3 * 1e-3  # the collective is part of the rank's time


def test_err_ranks_disagree(rng):
    xs = per_rank(rng, 2, (8, 8))

    @nkicc.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        cc.all_reduce(srcs=[x], dsts=[out], replica_group=cc.ReplicaGroup([[0, 1, 2]]), op=nl.add)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.run_ranks(k, 2, xs)
    assert e.value.code == "E191" and "rank 2" in str(e.value)

    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(k, xs[0]).run(xs[0])  # one rank, a group of three
    assert e.value.code == "E191"


@nkicc.jit
def max_of_halves_on_core0(x):
    """Each core sends its half; only core 0 stores the result, so on core 1
    the sendrecv's received tile is dead (dce must keep the call: core 0 waits in it)."""
    out = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    best = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=best, data1=mine, data2=theirs, op=nl.maximum)
    nisa.core_barrier(best, (0, 1))  # on an SBUF tile, as library kernels order a loop counter
    if pid == 0:
        nl.store(out, value=best)
    return out


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_a_collective_whose_result_one_core_drops_still_runs(rng, simulator):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    ck = max_of_halves_on_core0[2].compile(x)
    outputs, _ = ck.simulate({"x": x}, simulator=simulator)
    np.testing.assert_array_equal(outputs[ck.ir.outputs[0]], np.maximum(x[:64], x[64:]))


@nkicc.jit
def swap_through_shared_scratch(x):
    """Each core writes its half into a shared_hbm scratch tensor of the kernel's
    own (not an output), meets the other at core_barrier, then reads the other half."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    nl.store(scratch[pid * 64:(pid + 1) * 64, :], value=mine)
    nisa.core_barrier(scratch, (0, 1))
    theirs = nl.load(scratch[(1 - pid) * 64:(2 - pid) * 64, :])
    nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
    return out


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_a_kernels_own_shared_hbm_tensor_is_shared_by_its_cores(rng, simulator):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    ck = swap_through_shared_scratch[2].compile(x)
    outputs, _ = ck.simulate({"x": x}, simulator=simulator)
    got = outputs[ck.ir.outputs[0]]
    np.testing.assert_array_equal(got[:64], x[64:])
    np.testing.assert_array_equal(got[64:], x[:64])


@nkicc.jit
def many_all_reduces(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_reduce(srcs=[x], dsts=[out], replica_group=cc.ReplicaGroup(), op=nl.add)
    for _ in nl.sequential_range(40):
        cc.all_reduce(srcs=[out], dsts=[out], replica_group=cc.ReplicaGroup(), op=nl.maximum)
    return out


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="peak RSS is read from /proc")
def test_a_collectives_inputs_are_let_go_once_every_rank_has_them(rng):
    """Each rank's contribution to a collective is a copy (the others read it after it moves
    on); once every rank of the group has taken them, they go. 41 calls of 4 MiB on 2 ranks
    kept 328 MiB when they stayed; the run needs a few calls' worth."""
    from nkicc.memory_watch import MemoryWatch

    xs = per_rank(rng, 2, (128, 8192))
    watch = MemoryWatch()
    with watch.nkicc_call():
        got = nkicc.run_ranks(many_all_reduces, 2, xs)
    for g in got:
        np.testing.assert_allclose(g, np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)
    if watch.available:
        assert watch.nkicc_added_mb < 150, watch.nkicc_added_mb


@nkicc.jit
def swap_gather_select(x, table):
    """kernel[2] on several ranks: the cores of a rank swap halves (sendrecv), each core
    all-gathers what it holds with the same core of every rank, and core 0 picks column
    rank_id() of `table` seen as (32, ranks, 1), along its last (size-1) axis."""
    ranks = table.shape[1]
    pid = nl.program_id(0)
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    held = nl.ndarray((2, 64, 32), dtype=x.dtype, buffer=nl.shared_hbm, name="held")
    nl.store(held[pid], value=theirs)
    gathered = nl.ndarray((2, ranks * 64, 32), dtype=x.dtype, buffer=nl.shared_hbm, name="gathered")
    cc.all_gather(srcs=[held[pid]], dsts=[gathered[pid]], replica_group=cc.ReplicaGroup([list(range(ranks))]),
                  collective_dim=0)
    out = nl.ndarray((2 * ranks * 64, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[pid * ranks * 64:(pid + 1) * ranks * 64, :], src=gathered[pid])
    col = nl.ndarray((32, 1), dtype=table.dtype, buffer=nl.shared_hbm)
    if pid == 0:
        r = cc.rank_id()
        seen = table.reshape((32, ranks, 1))
        picked = nl.ndarray((32, 1), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=picked, src=seen.ap(pattern=[[ranks, 32], [1, 1]], offset=0, scalar_offset=r,
                                              indirect_dim=2))
        nisa.dma_copy(dst=col, src=picked)
    return out, col


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_a_two_core_launch_on_several_ranks(rng, simulator):
    """Each rank is a launch of two cores sharing the rank's HBM: sendrecv pairs the cores of
    one rank, a replica group names ranks (each core meets the same core of the others), and
    rank_id() is the rank's. (The library's attention block on 8 ranks failed with E191: every
    core was taken for a rank.)"""
    ranks = 3
    xs = per_rank(rng, ranks, (128, 32))
    table = rng.standard_normal((32, ranks)).astype(np.float32)
    ck = swap_gather_select[2].compile(xs[0], table)
    outputs, _ = ck.run_ranks([{"x": x, "table": table} for x in xs], simulator=simulator, timing=False)
    for r, got in enumerate(outputs):
        out, col = (got[o] for o in ck.ir.outputs)
        for c in range(2):  # core c gathered the other core's half of every rank
            want = np.concatenate([x[(1 - c) * 64:(2 - c) * 64] for x in xs])
            np.testing.assert_array_equal(out[c * ranks * 64:(c + 1) * ranks * 64], want)
        np.testing.assert_array_equal(col[:, 0], table[:, r])


def test_a_runtime_offset_along_a_size_one_axis_steps_row_major(rng):
    """A size-1 axis has no step of its own in a view; a scalar_offset along it moves by the
    elements inside it, as in NKI's row-major layout (not by 0)."""
    @nkicc.jit
    def pick(x, i):
        out = nl.ndarray((4, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 1), dtype=x.dtype, buffer=nl.sbuf)
        k = nl.load(i)
        nisa.dma_copy(dst=t, src=x.reshape((4, 6, 1)).ap(pattern=[[6, 4], [1, 1]], offset=0, scalar_offset=k,
                                                         indirect_dim=2))
        nisa.dma_copy(dst=out, src=t)
        return out

    x = rng.standard_normal((4, 6)).astype(np.float32)
    for j in (0, 2, 5):
        np.testing.assert_array_equal(pick(x, np.array([[j]], dtype=np.int32))[:, 0], x[:, j])


@nkicc.jit
def scale_rows_then_reduce(x, w):
    """kernel[2]: each core scales its 4 row tiles in a loop (a nest the machine simulator
    batches), then the cores of every rank add their tiles up across ranks."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    part = nl.ndarray((4, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm, name="part")
    pid = nl.program_id(0)
    wt = nl.load(w)
    for i in nl.affine_range(4):
        t = nl.load(x[(pid * 4 + i) * 128:(pid * 4 + i + 1) * 128, :])
        nl.store(part[i], value=nl.multiply(t, wt))
    summed = nl.ndarray((4, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm, name="summed")
    cc.all_reduce(srcs=[part], dsts=[summed], replica_group=cc.ReplicaGroup([[0, 1, 2]]), op=nl.add)
    for i in nl.affine_range(4):
        nisa.dma_copy(dst=out[(pid * 4 + i) * 128:(pid * 4 + i + 1) * 128, :], src=summed[i])
    return out


def test_ranks_and_cores_run_their_loops_batched_as_one_instruction_at_a_time_does(rng):
    """The batched loops of a multi-party run (ranks x cores) give what the same parties give
    one instruction at a time (the oracle of the fast path), and they did run batched."""
    from nkicc.simulator.ranks import run_ranks

    xs = per_rank(rng, 3, (1024, 64))
    w = rng.standard_normal((128, 64)).astype(np.float32)
    ck = scale_rows_then_reduce[2].compile(xs[0], w)
    programs = [core.ir for core in ck.cores] * 3
    results = {}
    for batch in (True, False):
        outs = [np.full((1024, 64), np.nan, dtype=np.float32) for _ in range(3)]
        shared = [{"out": outs[g // 2]} for g in range(6)]  # (the rank's two cores write its output)
        inputs = [{"x": xs[g // 2], "w": w} for g in range(6)]
        ran = run_ranks(programs, inputs, ck.target_spec, timing=False, shared_by_rank=shared, cores=2, batch=batch)
        assert all(bool(rep.batched_loops) == batch for _, rep in ran)
        # a shared output comes back as the rank's own array, not a copy of it
        assert all(np.shares_memory(got["out"], outs[g // 2]) for g, (got, _) in enumerate(ran))
        results[batch] = outs
    want = sum(x.reshape(8, 128, 64) * w for x in xs).reshape(1024, 64)
    for r in range(3):
        np.testing.assert_array_equal(results[True][r], results[False][r])
        np.testing.assert_allclose(results[True][r], want, rtol=1e-5, atol=1e-5)


@nkicc.jit
def long_walk_then_all_reduce(x):
    """Many small loads and stores, one instruction at a time, then an all_reduce."""
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(2_000_000):
        t = nl.load(x[:, 8:16])
        nl.store(acc, value=t)
    cc.all_reduce(srcs=[acc], dsts=[out], replica_group=cc.ReplicaGroup([[0, 1]]), op=nl.add)
    return out


def test_a_multi_rank_run_interrupted_in_the_callers_thread_stops_its_ranks(rng):
    """A timeout (pytest-timeout's SIGALRM) or Ctrl-C reaches the thread that waits for the ranks:
    the ranks stop too, at their next top-level loop iteration, instead of running on behind the
    next test."""
    import signal
    import threading

    from nkicc.simulator.ranks import run_ranks

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted()

    xs = per_rank(rng, 2, (128, 32))
    ck = nkicc.compile(long_walk_then_all_reduce, xs[0])
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(Interrupted):
            run_ranks(ck.ir, [{"x": x} for x in xs], ck.target_spec, timing=False, batch=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("nkicc-rank-")]
