"""The user's full-size testbench (../shared/workloads/seed_testbench.py) on this machine.

    python bench/testbench.py [--kernels seed_mm2_static,seed_mm2_dynamic] [--inputs ones,random]
                              [--timing off] [--markdown FILE]

For each kernel and each kind of input, one process (under /usr/bin/time
when it is there, for the peak RSS of the whole process) does what the
testbench does: makes the inputs (np.ones as the user wrote it, or random
normals), calls the kernel's `mm2` through `import nki` (compile, then
simulate), then computes numpy's `np.dot(np.dot(At.T, B), D)` in the same
process. Reported: compile time (trace + passes, from the compile report; the
process's start and imports are not in it), simulation wall time, the simulation's
ratio to numpy's time, peak RSS, and the error against numpy.

The inputs take 1.5 GB and numpy's reference about 8.8 TFLOP: minutes per
run. Skips with a message when ../shared/workloads/ is absent.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = os.environ.get("NKICC_WORKLOADS") or os.path.join(os.path.dirname(REPO), "shared", "workloads")
sys.path.insert(0, os.path.join(REPO, "bench"))
from benchenv import machine_line  # noqa: E402


def worker(kernel: str, inputs: str, timing: bool, out: str) -> None:
    import numpy as np

    from nkicc.api import RUN_SETTINGS, RunSettings
    from nkicc.loader import enable_nki_alias

    enable_nki_alias()
    sys.path.insert(0, WORKLOADS)
    t0 = time.perf_counter()
    mm2 = __import__(kernel).mm2
    shapes = {"At": (4 * 1024, 32 * 1024), "B": (4 * 1024, 16 * 1024), "D": (16 * 1024, 4 * 1024)}
    if inputs == "ones":
        At, B, D = (np.ones(s, dtype=np.float32) for s in shapes.values())
    else:
        rng = np.random.default_rng(0)
        At, B, D = (rng.standard_normal(s, dtype=np.float32) for s in shapes.values())
    make_s = time.perf_counter() - t0
    settings = RunSettings(timing=timing)
    token = RUN_SETTINGS.set(settings)
    try:
        E = mm2(At, B, D)
    finally:
        RUN_SETTINGS.reset(token)
    call = settings.records[-1]
    t1 = time.perf_counter()
    ref = np.dot(np.dot(At.T, B), D)
    numpy_s = time.perf_counter() - t1
    err = float(np.max(np.abs(E - ref)))
    scale = float(np.max(np.abs(ref)))
    report = call["report"]
    sim = report.get("sim", {})
    result = {"kernel": kernel, "inputs": inputs, "timing": timing, "make_inputs_s": make_s,
              "compile_s": report.get("total_s", call["compile_s"]), "sim_s": sim.get("wall_s", call["run_s"]), "call_s": call["run_s"],
              "numpy_s": numpy_s, "peak_rss_mb_after_call": call["peak_rss_mb"], "max_abs_err": err,
              "max_abs_ref": scale, "executed": report.get("instructions_executed"),
              "rolled": report.get("instructions_rolled"),
              "spills": [s["tensor"] for s in report.get("notes", {}).get("alloc", {}).get("spills", [])],
              "estimated_us": (sim.get("total_ns") or 0) / 1000 or None}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


def run_one(kernel: str, inputs: str, timing: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", kernel, "--inputs", inputs,
               "--timing", "on" if timing else "off", "--out", out]
        timer = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
        if timer:
            cmd = [timer, "-v", *cmd]
        env = {**os.environ, "NKICC_CACHE_DIR": os.path.join(tmp, "cache")}
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"{kernel} ({inputs}) failed:\n{p.stderr[-3000:]}")
        r = json.load(open(out))
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        r["peak_rss_mb"] = int(m.group(1)) / 1024 if m else None
        r["process_wall_s"] = wall
        return r


def table(rows: list[dict]) -> str:
    head = ("| kernel | inputs | compile s | simulation s | numpy s (same process) | simulation / numpy | "
            "peak RSS (process) | max abs error / max abs E |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rss = f"{r['peak_rss_mb'] / 1024:.2f} GB" if r.get("peak_rss_mb") else "?"
        lines.append(f"| {r['kernel']} | {r['inputs']} | {r['compile_s']:.2f} | {r['sim_s']:.1f} | "
                     f"{r['numpy_s']:.1f} | {r['sim_s'] / r['numpy_s']:.2f}x | {rss} | "
                     f"{r['max_abs_err'] / max(r['max_abs_ref'], 1e-30):.1e} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="seed_mm2_static,seed_mm2_dynamic")
    ap.add_argument("--inputs", default="ones,random")
    ap.add_argument("--timing", default="off", choices=("on", "off"),
                    help="the simulator's timing model (off: functional only, as for a correctness run)")
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.inputs, args.timing == "on", args.out)
        return
    if not os.path.isdir(WORKLOADS):
        print(f"skipped: {WORKLOADS} is absent (the user's workloads are not part of nkicc)")
        return
    where = machine_line()
    rows = []
    for kernel in args.kernels.split(","):
        for inputs in args.inputs.split(","):
            r = run_one(kernel, inputs, args.timing == "on")
            print(json.dumps(r))
            rows.append(r)
    text = (table(rows) + f"\n\ncommand: `python bench/testbench.py --kernels {args.kernels} --inputs {args.inputs} "
            f"--timing {args.timing}`; {where}")
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
