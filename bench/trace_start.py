"""What one `nkicc compile` of a full-size seed costs in a fresh process, as a
user runs it: the trace and the passes from the report, and the process's wall
time (Python start and imports included). The compile cache is off, so every
run traces.

    python bench/trace_start.py                         # 7 processes per seed
    python bench/trace_start.py --repeat 11 --workloads ../shared/workloads

Prints best and median per seed. Run it on two commits to compare them (the
numbers move with the machine's load; the bench prints the load average).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from benchenv import commit, machine_line  # noqa: E402

MM = ["At=float32[4096,32768]", "B=float32[4096,16384]", "D=float32[16384,4096]"]
SEEDS = [("seed_mm2_static.py::mm2", MM), ("seed_mm2_dynamic.py::mm2", MM),
         ("seed_einsum_affine.py::compute_einsum",
          ["A=float32[32768,4096]", "B=float32[4096,16384]", "C=float32[1,1]", "D=float32[16384,4096]"])]


def one(path: pathlib.Path, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "r.json")
        command = [sys.executable, "-m", "nkicc.cli", "compile", str(path)]
        for a in args:
            command += ["--arg", a]
        t0 = time.perf_counter()
        subprocess.run(command + ["--report", report], check=True, capture_output=True,
                       env={**os.environ, "NKICC_CACHE": "0"})
        wall = time.perf_counter() - t0
        with open(report) as f:
            r = json.load(f)
    return {"trace_s": r["trace_s"], "compile_s": r["compile_s"], "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--workloads", type=pathlib.Path, default=REPO.parent / "shared" / "workloads")
    opts = ap.parse_args()
    if not opts.workloads.is_dir():
        sys.exit(f"no seed kernels in {opts.workloads} (--workloads DIR)")
    print(f"{commit()}; {machine_line()}")
    print("| seed | trace (best / median) | passes (best / median) | process wall (best / median) |")
    print("|---|---|---|---|")
    for target, args in SEEDS:
        file, name = target.split("::")
        runs = [one(opts.workloads / f"{file}::{name}", args) for _ in range(opts.repeat)]

        def cell(key: str, scale: float, unit: str) -> str:
            values = sorted(r[key] * scale for r in runs)
            digits = 2 if unit == "s" else 1
            return f"{values[0]:.{digits}f} / {statistics.median(values):.{digits}f} {unit}"
        print(f"| {target} | {cell('trace_s', 1e3, 'ms')} | {cell('compile_s', 1e3, 'ms')} | "
              f"{cell('wall_s', 1.0, 's')} |")


if __name__ == "__main__":
    main()
