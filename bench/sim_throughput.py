"""Simulator throughput: the machine simulator running a scaled seed kernel
against numpy computing the same math in the same process.

    python bench/sim_throughput.py                     # print the table
    python bench/sim_throughput.py --markdown docs/benchmarks.md   # also update that file's section
    python bench/sim_throughput.py --scale 16 --repeat 1           # smaller / quicker
    python bench/sim_throughput.py --json F.json                   # also write the numbers as JSON

The kernel is examples/fused_matmul.py::mm2 (E = (At.T @ B) @ D with the seed's
loop nest: ragged 300-row m blocks, copy-in / nc_matmul / copy-out through
PSUM), at 1/--scale of the seed's size in every dimension (seed: M=32768,
K=4096, N=16384, L=4096; --scale 8 gives M=4096, K=512, N=2048, L=512). It is
compiled with the full pipeline; when the pipeline does not lower the program
(no alloc/schedule pass installed), nkicc.simulator.testing.naive_lower does.

Reported: wall time of numpy's `(At.T @ B) @ D` (BLAS with its default threads,
and with one thread), of the machine simulator with timing off (functional
only) and on (cost model + hazard checks), best of --repeat runs, and the
ratio simulator / numpy. The simulator runs BLAS on one thread (tile-sized
matmuls are fastest that way).

`measure()` returns the numbers as plain Python values and `table()` /
`section()` format them; bench/run_all.py uses them.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "examples"))

SEED = {"M": 32768, "K": 4096, "N": 16384, "L": 4096}
SECTION = "## Simulator throughput"


def best(fn, repeat: int) -> tuple[float, float, object]:
    """(best wall seconds, CPU seconds of that run, result)."""
    out, best_wall, best_cpu = None, float("inf"), 0.0
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if w < best_wall:
            best_wall, best_cpu = w, c
    return best_wall, best_cpu, out


def measure(scale: int = 8, repeat: int = 3, target_name: str = "trn2") -> dict:
    """Compile and run the scaled kernel; return the numbers (JSON-ready)."""
    import nkicc
    import fused_matmul as fm
    from nkicc.api import resolve_target
    from nkicc.passes import registry
    from nkicc.simulator._blas import single_threaded_blas
    from nkicc.simulator.machine import MachineSimulator
    from nkicc.simulator.testing import naive_lower

    d = {k: v // scale for k, v in SEED.items()}
    M, K, N, L = d["M"], d["K"], d["N"], d["L"]
    rng = np.random.default_rng(0)
    At = rng.standard_normal((K, M)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    D = rng.standard_normal((N, L)).astype(np.float32)

    t0 = time.perf_counter()
    compiled = nkicc.compile(fm.mm2, f"float32[{K},{M}]", f"float32[{K},{N}]", f"float32[{N},{L}]",
                             passes={"target": target_name})
    compile_s = time.perf_counter() - t0
    target = resolve_target(target_name, registry())
    kernel = compiled.ir
    lowered_by = "the pipeline (alloc + schedule)"
    if any(t.on_chip and t.address is None for t in kernel.tensors) or not any(
            s.attr("id") is not None for s in kernel.body.walk() if hasattr(s, "attr")):
        kernel = naive_lower(kernel, target)
        lowered_by = "nkicc.simulator.testing.naive_lower (the pipeline did not lower it)"
    inputs = {"At": At, "B": B, "D": D}

    np_wall, np_cpu, ref = best(lambda: (At.T @ B) @ D, repeat)
    with single_threaded_blas():
        np1_wall, np1_cpu, _ = best(lambda: (At.T @ B) @ D, repeat)
    sims = []
    for timing in (False, True):
        sim = MachineSimulator(kernel, target, timing=timing)
        wall, cpu, (out, report) = best(lambda: sim.run(inputs), repeat)
        err = float(np.abs(out["E"].astype(np.float64) - ref).max() / np.abs(ref).max())
        sims.append({"timing": timing, "wall_s": wall, "cpu_s": cpu, "executed": report.executed,
                     "total_ns": report.total_ns, "max_rel_err": err})
    counts: dict = {}
    for p in sim.plans:
        counts[p.opcode] = counts.get(p.opcode, 0) + p.count
    load = ", load average %.1f at the start" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    return {
        "scale": scale, "repeat": repeat, "target": target_name, "dims": d, "compile_s": compile_s,
        "lowered_by": lowered_by, "executed": sims[0]["executed"], "opcodes": counts,
        "numpy": {"wall_s": np_wall, "cpu_s": np_cpu}, "numpy_1thread": {"wall_s": np1_wall, "cpu_s": np1_cpu},
        "functional": sims[0], "timing_on": sims[1],
        "machine": (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                    f"numpy {np.__version__}{load}"),
    }


def table(data: dict) -> str:
    d, repeat = data["dims"], data["repeat"]
    np_wall, np1_wall = data["numpy"]["wall_s"], data["numpy_1thread"]["wall_s"]
    lines = [
        f"kernel: examples/fused_matmul.py::mm2, M={d['M']} K={d['K']} N={d['N']} L={d['L']} (1/{data['scale']} of "
        f"the seed per dimension), target {data['target']}; {data['executed']:,} instructions executed; lowered by "
        f"{data['lowered_by']}; compile {data['compile_s']:.2f} s",
        "",
        "| run | wall s (best of %d) | CPU s | x numpy (default BLAS threads) | x numpy (1 BLAS thread) |" % repeat,
        "|---|---|---|---|---|",
        f"| numpy `(At.T @ B) @ D`, default BLAS threads | {np_wall:.3f} | {data['numpy']['cpu_s']:.3f} | 1.00 | "
        f"{np_wall / np1_wall:.2f} |",
        f"| numpy `(At.T @ B) @ D`, 1 BLAS thread | {np1_wall:.3f} | {data['numpy_1thread']['cpu_s']:.3f} | "
        f"{np1_wall / np_wall:.2f} | 1.00 |",
    ]
    for r in (data["functional"], data["timing_on"]):
        what = "machine simulator, timing on (costs + hazard checks)" if r["timing"] else \
            "machine simulator, timing off (functional)"
        lines.append(f"| {what} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['wall_s'] / np_wall:.2f} | "
                     f"{r['wall_s'] / np1_wall:.2f} |")
    f, t = data["functional"], data["timing_on"]
    lines += ["",
              f"max error of E vs numpy, relative to max |E|: {max(f['max_rel_err'], t['max_rel_err']):.2e}; "
              f"estimated kernel time {t['total_ns'] / 1e3:,.1f} us (cost-table estimate); "
              f"{data['executed'] / f['wall_s']:,.0f} instructions/s functional, "
              f"{data['executed'] / t['wall_s']:,.0f} with timing"]
    return "\n".join(lines)


def analysis(data: dict) -> str:
    mix = ", ".join(f"{n:,} {code}" for code, n in sorted(data["opcodes"].items(), key=lambda kv: -kv[1]))
    return (f"What it shows: numpy does the product as two large GEMMs; the simulator executes the "
            f"kernel's own instruction stream ({mix}), so it does the same arithmetic in tile-sized "
            f"pieces (<= 128 x 128 x 512 matmuls, each result copied through PSUM and added into "
            f"SBUF), where BLAS runs below its large-matrix speed. The simulator's own per-instruction "
            f"cost is small next to that math (about 10 us per instruction functional, 15 us with "
            f"timing, measured on a loop of tiny instructions); timing adds the cost model, the "
            f"semaphore bookkeeping and the hazard checks. BLAS is limited to one thread during a "
            f"simulation (tile-sized matmuls are fastest that way; on this 2-vCPU machine a "
            f"multi-threaded OpenBLAS made them up to 100x slower). Single timings vary by 10-20% with "
            f"the load of other jobs on the machine.")


def section(data: dict) -> str:
    return (f"{SECTION}\n\n`python bench/sim_throughput.py --scale {data['scale']} --repeat {data['repeat']}` "
            f"on {data['machine']}. Target: the functional simulator within 4x of numpy.\n\n{table(data)}\n\n"
            f"{analysis(data)}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=8, help="divide every seed dimension by this (default 8)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--markdown", help="replace (or add) the '%s' section of this file" % SECTION)
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON to FILE")
    args = ap.parse_args(argv)

    data = measure(args.scale, args.repeat, args.target)
    print(table(data))
    print(f"machine: {data['machine']}")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.markdown:
        update_section(args.markdown, section(data))
        print(f"updated {args.markdown}")
    return 0


def update_section(path: str, section: str) -> None:
    """Replace this benchmark's section of a markdown file (up to the next
    '## ' heading), or append it; other sections are left alone."""
    old = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: section + "\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(new.rstrip("\n") + "\n")


if __name__ == "__main__":
    sys.exit(main())
