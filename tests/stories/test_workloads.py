"""The user's full-size seed kernels through `nkicc compile`, measured from
outside the process: wall time and peak RSS of the whole command (Python start,
imports, trace, passes, report), as a user would see them.

The vendor compiler took hours and 30-40 GB on the two mm2 kernels. Here each
takes about a second on a quiet 2-core machine, most of it Python start-up and
imports. NKICC_TIME_SLACK (default 1.5) scales the time limit for
noisy machines.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from tests.support.paths import WORKLOADS, needs_workloads

pytestmark = [needs_workloads,
              pytest.mark.skipif(not os.path.exists("/usr/bin/time"), reason="needs /usr/bin/time to measure RSS")]

TIME_LIMIT_S = 2.0
RSS_LIMIT_MB = 300
SLACK = float(os.environ.get("NKICC_TIME_SLACK", "1.5"))

MM2_ARGS = ["At=float32[4096,32768]", "B=float32[4096,16384]", "D=float32[16384,4096]"]
EINSUM_ARGS = ["A=float32[32768,4096]", "B=float32[4096,16384]", "C=float32[1,1]", "D=float32[16384,4096]"]

# the compile cache off: a hit would measure the cache, not the compiler
ENV = {**os.environ, "NKICC_CACHE": "0", "SHARD": "0", "NSHARDS": "1"}

CASES = {
    "seed_mm2_static": ("seed_mm2_static.py::mm2", MM2_ARGS),
    "seed_mm2_dynamic": ("seed_mm2_dynamic.py::mm2", MM2_ARGS),
    "seed_einsum_affine": ("seed_einsum_affine.py::compute_einsum", EINSUM_ARGS),
}


TIME = "/usr/bin/time"


def compile_measured(target: str, args: list[str], report_path) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `nkicc compile` in a child; return it, its wall seconds and its own peak RSS in MB.
    The RSS comes from /usr/bin/time: a child forked straight from pytest would count
    pytest's own pages, which it shares until exec, in its peak."""
    cmd = [sys.executable, "-m", "nkicc.cli", "compile", str(WORKLOADS / target)]
    for a in args:
        cmd += ["--arg", a]
    cmd += ["--report", str(report_path)]
    t0 = time.perf_counter()
    p = subprocess.run([TIME, "-f", "peak_kb=%M", *cmd], capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - t0
    rss_mb = int(p.stderr.rsplit("peak_kb=", 1)[1].split()[0]) / 1024
    stderr = p.stderr.rsplit("peak_kb=", 1)[0]
    if "Command exited with non-zero status" in stderr:
        stderr = stderr.rsplit("Command exited", 1)[0]
    return subprocess.CompletedProcess(cmd, p.returncode, p.stdout, stderr), wall, rss_mb


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Each seed compiled once, shared by the tests below; a run over the time
    limit is repeated (up to 3 runs) and the fastest kept, so that a moment of
    load on a shared machine does not fail the test, while a slow compiler still does."""
    folder = tmp_path_factory.mktemp("workloads")
    results = {}
    for name, (target, args) in CASES.items():
        report = folder / f"{name}.json"
        best = None
        for _ in range(3):
            proc, wall, rss = compile_measured(target, args, report)
            if proc.returncode != 0:
                best = (proc, wall, rss, None)  # a failure is never retried away
                break
            if best is None or wall < best[1]:
                best = (proc, wall, rss, json.loads(report.read_text()) if report.exists() else None)
            if wall <= TIME_LIMIT_S * SLACK:
                break
        results[name] = best
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_full_size_compile_is_fast_and_small(measured, name):
    proc, wall, rss, report = measured[name]
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert wall <= TIME_LIMIT_S * SLACK, f"{name}: {wall:.2f} s wall (limit {TIME_LIMIT_S} s x {SLACK})"
    assert rss <= RSS_LIMIT_MB, f"{name}: peak RSS {rss:.0f} MB"
    assert report["instructions_rolled"] < 1000
    assert report["instructions_executed"] > 0
    for key in ("kernel", "trace_s", "compile_s", "total_s", "peak_rss_mb", "instructions_unrolled", "loops", "warnings"):
        assert key in report


def test_static_seed_counts(measured):
    report = measured["seed_mm2_static"][3]
    assert report is not None
    # 25 x 8 x 32 x 16 x 3 x 3 + 25 x 8 x 16 x 32 x 11 x 3 + loads, memsets, stores
    assert abs(report["instructions_unrolled"] - 4_500_000) <= 0.05 * 4_500_000
    assert report["loops"]["dynamic"] == 0


def test_dynamic_seed_counts(measured):
    report = measured["seed_mm2_dynamic"][3]
    assert report is not None
    # static loops inside the hardware loops unrolled, the hardware loops kept
    assert 10_000 <= report["instructions_unrolled"] <= 100_000
    assert report["loops"]["dynamic"] == 3
    assert report["instructions_executed"] > report["instructions_unrolled"]


def test_einsum_seed_counts(measured):
    report = measured["seed_einsum_affine"][3]
    assert report is not None
    assert report["instructions_unrolled"] > 1_000_000
