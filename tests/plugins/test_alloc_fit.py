"""Kernels over on-chip capacity as written still compile and run: alloc
shortens live ranges by reordering independent statements, reloads or spills
what still does not fit, and says what it did in the report and on the command line
(issue 19: the tutorial's free-dimension-blocked matmul at its measured shape)."""
import json

import numpy as np
import pytest

import nkicc
from tests.support.paths import REPO
from tests.plugins import alloc_fit_kernels as kernels
from tests.support.cli import run_cli

TINY = {"plugins": ("tests.support.tiny_target_plugin",), "target": "tiny"}
KERNELS = REPO / "tests" / "plugins" / "alloc_fit_kernels.py"
# the smallest K (a multiple of 128 * 48) at which the blocked matmul is over trn2's 224 KiB as written
OVER_TRN2 = {"lhsT": (6144, 256), "rhs": (6144, 1024)}


def _matmul(lhsT, rhs):
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)


def test_blocked_matmul_over_trn2_fits_by_shortening_live_ranges(rng):
    lhsT = rng.standard_normal(OVER_TRN2["lhsT"]).astype(np.float32)
    rhs = rng.standard_normal(OVER_TRN2["rhs"]).astype(np.float32)
    c = nkicc.compile(kernels.block_free_lists, lhsT, rhs, passes={"target": "trn2"})
    alloc = c.report["notes"]["alloc"]
    capacity = alloc["capacity_bytes_per_partition"]["sbuf"]
    short = alloc["live_ranges_shortened"]
    assert short["peak_bytes_per_partition_before"] > capacity >= short["peak_bytes_per_partition_after"]
    assert short["prefetch_window"] > 0  # loads still run ahead of the matmuls
    assert not alloc["spills"]
    assert any(a.startswith("shortened live ranges") for a in alloc["what_alloc_did"])
    np.testing.assert_allclose(c.run(lhsT, rhs), _matmul(lhsT, rhs), rtol=1e-4, atol=1e-2)
    assert c.sim.engines["pe"].instructions == 2 * 2 * 48


def test_reordering_and_spilling_together_keep_results(rng):
    """On 8 KiB of SBUF the blocked matmul needs both: the reorder and evictions."""
    lhsT = rng.standard_normal((1024, 256)).astype(np.float32)  # 8 KiB of stationary tiles alone
    rhs = rng.standard_normal((1024, 1024)).astype(np.float32)
    c = nkicc.compile(kernels.block_free_lists, lhsT, rhs, passes=TINY)
    alloc = c.report["notes"]["alloc"]
    assert alloc["live_ranges_shortened"] and alloc["spills"]
    # the stationary tiles are copies of the input: reloaded from it, not given an HBM home
    assert {s["how"] for s in alloc["spills"]} == {"reload"}
    assert any("reloaded from the kernel's input" in a for a in alloc["what_alloc_did"])
    assert not any(t.role == "spill" for t in c.ir.tensors)
    np.testing.assert_allclose(c.run(lhsT, rhs), _matmul(lhsT, rhs), rtol=1e-4, atol=1e-2)


def test_tiles_live_at_once_spill_and_the_report_says_so(rng):
    x = rng.standard_normal((128, 16 * 128)).astype(np.float32)
    c = nkicc.compile(kernels.centered_squares, x, passes=TINY)
    xs = x.reshape(128, 16, 128)
    want = ((xs - xs.mean(axis=1, keepdims=True)) ** 2).reshape(128, -1)
    np.testing.assert_allclose(c.run(x), want, rtol=1e-4, atol=1e-4)
    alloc = c.report["notes"]["alloc"]
    # loaded tiles are reloaded from x; the differences d are computed, so they get an HBM home
    assert {s["how"] for s in alloc["spills"]} == {"reload", "spill"}
    assert any(t.role == "spill" for t in c.ir.tensors)
    assert any("spilled to HBM" in a and "MB more DMA" in a for a in alloc["what_alloc_did"])
    assert c.sim.spill_bytes > 0  # the spill DMAs run, and their time is in the estimate


def _cli(*args, tmp_path):
    return run_cli(*args, cwd=tmp_path, add_env={"PYTHONPATH": str(REPO)})  # -p tests.support.tiny_target_plugin


def test_compile_and_simulate_print_what_alloc_did(tmp_path):
    report = tmp_path / "r.json"
    r = _cli("compile", f"{KERNELS}::block_free_lists", "--arg", "lhsT=float32[6144,256]",
             "--arg", "rhs=float32[6144,1024]", "--target", "trn2", "--report", str(report), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("note[alloc] what_alloc_did"))
    assert "shortened live ranges" in line and "alloc_fit_kernels.py" in line
    assert json.loads(report.read_text())["notes"]["alloc"]["live_ranges_shortened"]
    r = _cli("simulate", f"{KERNELS}::centered_squares", "--arg", "x=float32[128,2048]", "--inputs", "random",
             "-p", "tests.support.tiny_target_plugin", "--target", "tiny", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "spilled to HBM" in r.stdout and "estimated time" in r.stdout


@pytest.mark.parametrize("target", ["trn2", "tiny"])
def test_kernels_that_fit_are_not_reordered(rng, target):
    """An order that fits is the author's: nothing moves, nothing is reported."""
    lhsT = rng.standard_normal((256, 256)).astype(np.float32)
    rhs = rng.standard_normal((256, 1024)).astype(np.float32)
    c = nkicc.compile(kernels.block_free_lists, lhsT, rhs, passes={**TINY, "target": target})
    alloc = c.report["notes"]["alloc"]
    if target == "trn2":
        assert alloc["live_ranges_shortened"] is None and alloc["what_alloc_did"] == []
    np.testing.assert_allclose(c.run(lhsT, rhs), _matmul(lhsT, rhs), rtol=1e-4, atol=1e-2)


def test_psum_tiles_made_up_front_share_banks_from_their_first_use(rng):
    """16 accumulators allocated before the loops (32 KiB of PSUM against 16 as written): alloc
    moves each allocation to the loop that first uses it, the accumulators then share banks, and
    the accumulate=None matmuls still start each one fresh (the simulator clears PSUM's
    accumulation state where the allocation now is)."""
    lhsT = rng.standard_normal((384, 128)).astype(np.float32)
    rhs = rng.standard_normal((384, 16 * 512)).astype(np.float32)
    c = nkicc.compile(kernels.psum_up_front, lhsT, rhs, passes={"target": "trn2"})
    alloc = c.report["notes"]["alloc"]
    sunk = alloc["allocations_sunk"]
    assert sunk["buffer"] == "psum" and len(sunk["tensors"]) >= 16
    assert sunk["peak_bytes_per_partition_before"] == 16 * 2048 > alloc["capacity_bytes_per_partition"]["psum"]
    assert sunk["peak_bytes_per_partition_after"] <= 2 * 2048
    assert not alloc["spills"]
    assert any(a.startswith("moved ") and "first use" in a for a in alloc["what_alloc_did"])
    want = _matmul(lhsT, rhs)
    got = c.run(lhsT, rhs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-2)
    # the unrolled trace (its own placement; the sums differ in rounding only)
    unrolled = nkicc.compile(kernels.psum_up_front, lhsT, rhs, unroll=True, passes={"target": "trn2"})
    np.testing.assert_allclose(unrolled.run(lhsT, rhs), got, rtol=1e-5, atol=1e-4)


def test_psum_accumulators_drained_after_all_of_them_fit_by_moving_each_drain_up(rng):
    """Twelve accumulators summed by rolled K loops, then drained (24 KiB of PSUM against 16 as
    written): each drain moves up to its accumulator's loop and nothing else moves, so no more
    than two accumulators are live at once. Against numpy and against the unrolled trace."""
    w = rng.standard_normal((512, 12 * 128)).astype(np.float32)
    x = rng.standard_normal((512, 512)).astype(np.float32)
    c = nkicc.compile(kernels.psum_drained_after, w, x, passes={"target": "trn2"})
    alloc = c.report["notes"]["alloc"]
    short = alloc["last_uses_hoisted"]
    assert short["buffer"] == "psum" and alloc["live_ranges_shortened"] is None
    assert short["peak_bytes_per_partition_before"] == 12 * 2048 > alloc["capacity_bytes_per_partition"]["psum"]
    assert short["peak_bytes_per_partition_after"] <= 2 * 2048
    assert not alloc["spills"] and c.report["loops"]["rolled"] >= 12
    got = c.run(w, x)
    np.testing.assert_allclose(got, _matmul(w, x), rtol=1e-4, atol=1e-3)
    unrolled = nkicc.compile(kernels.psum_drained_after, w, x, unroll=True, passes={"target": "trn2"})
    np.testing.assert_allclose(unrolled.run(w, x), got, rtol=1e-5, atol=1e-4)


def _logsumexp(x):
    x = x.astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    return mx + np.log(np.exp(x - mx).sum(axis=1, keepdims=True))


def test_an_element_wise_result_takes_the_bytes_of_the_input_that_dies_there(rng):
    """The cross-entropy pattern: exponentials made from a chunk where the chunk dies. Two
    [16, 1024] float32 tiles are 8 KiB, the tiny target's whole partition: alloc writes the
    exponentials over the chunk (one tile, in a rolled loop), and nothing is spilled."""
    x = rng.standard_normal((16, 4096)).astype(np.float32) * 3
    c = nkicc.compile(kernels.chunked_logsumexp, x, passes=TINY)
    alloc = c.report["notes"]["alloc"]
    in_place = alloc["computed_in_place"]
    assert [[p.split(" ")[0] for p in pair] for pair in in_place["pairs"]] == [["c", "e"]]
    assert in_place["peak_bytes_per_partition_after"] <= 8192 < in_place["peak_bytes_per_partition_before"]
    assert not alloc["spills"]
    assert any("in place of an input that dies there" in a for a in alloc["what_alloc_did"])
    assert any(isinstance(s, nkicc.ir.Loop) for s in c.ir.body.stmts)  # the chunk loop stays rolled
    got = c.run(x)
    np.testing.assert_allclose(got, _logsumexp(x), rtol=1e-5, atol=1e-5)
    # the kernel as written, where it fits (trn2): the same instructions on their own bytes
    as_written = nkicc.compile(kernels.chunked_logsumexp, x, passes={"target": "trn2"})
    assert not as_written.report["notes"]["alloc"]["computed_in_place"]
    np.testing.assert_array_equal(as_written.run(x), got)


@pytest.mark.parametrize("option", ["keep_chunk", "partial_load"])
def test_an_input_still_needed_after_the_result_is_made_keeps_its_bytes(rng, option):
    """keep_chunk reads the chunk again after the exponentials; partial_load leaves a column of
    it to the next iteration: the two are live at once and may not share bytes. On the tiny
    target nothing else frees them, so the kernel does not fit (E400), where a merge would have
    given wrong values."""
    x = rng.standard_normal((16, 4096)).astype(np.float32) * 3
    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(kernels.chunked_logsumexp, x, **{option: True}, passes=TINY)
    assert e.value.code == "E400", e.value
    if option == "keep_chunk":
        c = nkicc.compile(kernels.chunked_logsumexp, x, keep_chunk=True, passes={"target": "trn2"})
        np.testing.assert_allclose(c.run(x), _logsumexp(x), rtol=1e-4, atol=1e-4)


def test_drains_move_up_in_a_block_too_long_to_reorder(rng, monkeypatch):
    """Hoisting drains costs a pass over the block per drain, so it takes blocks longer than
    live-range reordering does (bwmm_shard_on_I at I 6144: 48 accumulators in one block of
    2,800 statements, past reordering's 2,048). With reordering's bound below this kernel's
    block, the drains still move up and the accumulators fit."""
    from nkicc.plugins import live_order

    monkeypatch.setattr(live_order, "MAX_BLOCK", 16)
    w = rng.standard_normal((512, 12 * 128)).astype(np.float32)
    x = rng.standard_normal((512, 512)).astype(np.float32)
    c = nkicc.compile(kernels.psum_drained_after, w, x, passes={"target": "trn2"}, cache=False)
    alloc = c.report["notes"]["alloc"]
    assert len(c.ir.body.stmts) > live_order.MAX_BLOCK
    assert alloc["last_uses_hoisted"]["peak_bytes_per_partition_after"] <= 2 * 2048 and not alloc["spills"]
    np.testing.assert_allclose(c.run(w, x), _matmul(w, x), rtol=1e-4, atol=1e-3)


def test_a_round_of_spills_evicts_where_the_pressure_peaks(rng):
    """200 tiles of 64 bytes per partition, all live at the sum, against room for 128 (the tiny
    target): placement first fails a tile's worth over at each allocation from the 128th on. Evicting
    where it first failed frees one tile a round, 72 rounds, past the 64 allowed (E400); evicting at
    the peak, where all 200 are live, frees what the peak needs in one round."""
    x = rng.standard_normal((16, 200 * 16)).astype(np.float32)
    c = nkicc.compile(kernels.many_slices_then_sum, x, passes=TINY, cache=False)
    alloc = c.report["notes"]["alloc"]
    assert 200 * 64 > alloc["capacity_bytes_per_partition"]["sbuf"] >= len(alloc["spills"]) > 0
    want = x.reshape(16, 200, 16).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(c.run(x), want, rtol=1e-5, atol=1e-4)
