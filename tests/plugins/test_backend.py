"""alloc and schedule: the lowered program keeps results, addresses never
collide while tensors are live, every cross-engine dependence has a
semaphore, and over-subscribed kernels spill instead of failing."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import nkicc
from nkicc.ir import Loop, Op
from tests.support.paths import WORKLOADS, needs_workloads
from tests.support import seeds_scaled_kernels as seeds

TINY = {"plugins": ("tests.support.tiny_target_plugin",)}


def seed_cases(rng):
    k, m, n, l_ = seeds.K, seeds.M, seeds.N, seeds.L
    mm2 = [rng.standard_normal(s).astype(np.float32) for s in ((k, m), (k, n), (n, l_))]
    e = [rng.standard_normal(s).astype(np.float32) for s in
         ((seeds.M0_TOTAL * 128, seeds.K0 * 128), (seeds.K0 * 128, seeds.P0 * 128), (1, 1),
          (seeds.P0 * 128, seeds.L0 * 512))]
    return {"mm2_static": (seeds.mm2_static, mm2, {}),
            "mm2_dynamic": (seeds.mm2_dynamic, mm2, {"fix_offsets": True}),
            "einsum": (seeds.compute_einsum, e, {})}


def reference(kernel, arrays, consts):
    base = nkicc.compile(kernel, *arrays, passes={"opt_level": 0}, **consts)
    return base.run(*arrays)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3", "tiny", "tiny-psum"])
@pytest.mark.parametrize("name", ["mm2_static", "mm2_dynamic", "einsum"])
def test_full_pipeline_matches_unoptimised(rng, name, target):
    kernel, arrays, consts = seed_cases(rng)[name]
    c = nkicc.compile(kernel, *arrays, passes={**TINY, "target": target}, **consts)
    assert c.report["pipeline"][-2:] == ["alloc", "schedule"]
    np.testing.assert_allclose(c.run(*arrays), reference(kernel, arrays, consts), rtol=1e-5, atol=1e-3)
    spills = c.report["notes"]["alloc"]["spills"]
    if target == "tiny" and name != "einsum":
        assert {s["from"] for s in spills} == {"sbuf"}
    if target == "tiny-psum" and name == "einsum":
        assert {s["from"] for s in spills} == {"psum"}


def _live_ranges(kernel):
    from nkicc.plugins.alloc import _Numbering
    numbering = _Numbering(kernel)
    return {t: numbering.live_range(t) for t in numbering.alloc_at}


@pytest.mark.parametrize("name", ["mm2_static", "mm2_dynamic", "einsum"])
def test_live_tensors_never_share_bytes(rng, name):
    kernel, arrays, consts = seed_cases(rng)[name]
    c = nkicc.compile(kernel, *arrays, passes={**TINY, "target": "tiny"}, **consts)
    decls = c.ir.tensor_map()
    ranges = _live_ranges(c.ir)
    placed = [t for t in c.ir.tensors if t.on_chip]
    assert all(t.address is not None for t in placed)
    from nkicc.plugins.alloc import partition_bytes
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            if a.buffer != b.buffer:
                continue
            (s1, e1), (s2, e2) = ranges[a.name], ranges[b.name]
            if s1 <= e2 and s2 <= e1:
                assert (a.address + partition_bytes(a) <= b.address or
                        b.address + partition_bytes(b) <= a.address), (a.name, b.name)
            if a.buffer == "psum":
                assert a.address // 2048 == (a.address + partition_bytes(a) - 1) // 2048
    assert max(t.address + partition_bytes(t) for t in placed if t.buffer == "sbuf") <= 8 * 1024
    del decls


def test_every_op_is_scheduled(rng):
    kernel, arrays, consts = seed_cases(rng)["mm2_static"]
    c = nkicc.compile(kernel, *arrays, **consts)
    ops = [s for s in c.ir.body.walk() if isinstance(s, Op)]
    ids = [o.attr("id") for o in ops]
    assert sorted(ids) == list(range(len(ops)))
    for o in ops:
        assert o.attr("engine") in ("pe", "dve", "act", "pool", "dma")
        assert all(w in ids for w in o.attr("wait"))
        if o.opcode == "dma_copy":
            assert 0 <= o.attr("queue") < 16
    # a matmul waits for the loads it multiplies (on the DMA queues)
    mm = next(o for o in ops if o.opcode == "nc_matmul")
    producers = {o.attr("id"): o for o in ops}
    assert any(producers[w].opcode == "dma_copy" for w in mm.attr("wait"))
    assert c.report["notes"]["schedule"]["semaphores"] > 0


FULL = {
    "seed_mm2_static.py::mm2": ["At=float32[4096,32768]", "B=float32[4096,16384]", "D=float32[16384,4096]"],
    "seed_mm2_dynamic.py::mm2": ["At=float32[4096,32768]", "B=float32[4096,16384]", "D=float32[16384,4096]"],
    "seed_einsum_affine.py::compute_einsum": ["A=float32[32768,4096]", "B=float32[4096,16384]", "C=float32[1,1]",
                                             "D=float32[16384,4096]"],
}


@needs_workloads
@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("kernel", list(FULL))
def test_full_size_seeds_spill_and_compile_fast(tmp_path, kernel, target):
    report = tmp_path / "r.json"
    args = [a for spec in FULL[kernel] for a in ("--arg", spec)]
    cmd = [sys.executable, "-m", "nkicc", "compile", str(WORKLOADS / kernel), *args, "--target", target,
           "--report", str(report)]
    r = subprocess.run(["/usr/bin/time", "-f", "peak_kb=%M", *cmd], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    peak_mb = int(r.stderr.rsplit("peak_kb=", 1)[1].split()[0]) / 1024
    data = json.loads(report.read_text())
    # fast because it stays rolled (wall time is bench/compile_scaling.py's to measure, not a test's)
    assert data["instructions_rolled"] * 1_000 < data["instructions_unrolled"]
    assert data["instructions_compiled"] * 100 < data["instructions_unrolled"] and peak_mb <= 400
    assert data["pipeline"][-2:] == ["alloc", "schedule"]
    spills = data["notes"]["alloc"]["spills"]
    assert spills, "the seeds over-subscribe on-chip memory as written"
    expected = "psum" if "einsum" in kernel else "sbuf"
    assert {s["from"] for s in spills} == {expected}
    assert all(s["estimated_traffic_bytes"] > 0 for s in spills)
