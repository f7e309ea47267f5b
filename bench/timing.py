"""Timing sanity: the matmul tutorial's progression (examples/matmul.py) on the
machine simulator. Each step should have a lower estimated latency than the
one before; the Tensor Engine's utilisation says how close a step gets to the
hardware's peak. A large blocked bf16 matmul, compiled with and without the
multi-buffer pass, shows what overlapping DMA with compute is worth.

    python bench/timing.py [--size 1024,512,2048] [--large 4096,2048,4096] [--target trn2]
                           [--markdown FILE] [--json FILE] [--trace FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import nkicc  # noqa: E402
import matmul as mm  # noqa: E402

STEPS = ["matmul_tiled", "matmul_hoisted", "matmul_block_free", "matmul_blocked"]
# blocks of the large case: 8 x 128 rows of M, 2 x 512 columns of N, 8 x 128 of K (a 2 MB res block)
LARGE_BLOCKS = {"TILES_IN_BLOCK_M": 8, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 8}


def inputs(size: str, seed: int = 0):
    k, m, n = (int(x) for x in size.split(","))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    return a, b, a.astype(np.float64).T @ b.astype(np.float64)


def measure(kernel, a, b, ref, target: str, passes=None, trace: str | None = None, **meta) -> dict:
    c = nkicc.compile(kernel, a, b, passes={"target": target, **(passes or {})}, cache=False, **meta)
    t0 = time.perf_counter()
    out = c.simulate({"lhsT": a, "rhs": b}, trace=trace)[0] if trace else c.run(a, b)
    wall = time.perf_counter() - t0
    sim = c.report["sim"]
    pe = sim["engines"]["pe"]
    out = out if isinstance(out, np.ndarray) else next(iter(out.values()))
    # engine active time (the simulation report's active_pct) as a fraction; for DMA, any queue active
    return {"latency_us": sim["total_ns"] / 1000, "pe_utilisation": pe["active_pct"] / 100,
            "dma_utilisation": sim["engines"]["dma"]["active_pct"] / 100, "matmuls": pe["instructions"],
            "max_err": float(np.abs(out - ref).max()), "sim_wall_s": wall,
            "multi_buffered": c.report["notes"].get("multi-buffer", {}).get("multi_buffered", "off")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1024,512,2048", help="K,M,N of the progression")
    ap.add_argument("--large", default="4096,2048,4096", help="K,M,N of the large blocked matmul ('' to skip)")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--markdown", help="write the tables to this file")
    ap.add_argument("--json", help="write the rows to this file (bench/run_all.py plots them)")
    ap.add_argument("--trace", help="write a Perfetto trace of the large case (multi-buffered) to this file")
    args = ap.parse_args()
    a, b, ref = inputs(args.size)
    rows = [{"step": name, **measure(getattr(mm, name), a, b, ref, args.target)} for name in STEPS]
    large = []
    if args.large:
        la, lb, lref = inputs(args.large, seed=1)
        for label, passes in (("single buffer", {"disable": ["multi-buffer"]}), ("multi-buffer", None)):
            trace = args.trace if passes is None else None
            large.append({"step": label, **measure(mm.matmul_blocked, la, lb, lref, args.target, passes, trace,
                                                    **LARGE_BLOCKS)})
    lines = [f"bf16 matmul K,M,N = {args.size} on {args.target} (machine simulator, estimated)", "",
             "| step | estimated latency (us) | Tensor Engine utilisation | matmuls | max abs error |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['step']} | {r['latency_us']:,.1f} | {r['pe_utilisation']:.1%} | {r['matmuls']} | "
                     f"{r['max_err']:.2e} |")
    if large:
        lines += ["", f"Large blocked bf16 matmul K,M,N = {args.large}, blocks {LARGE_BLOCKS}", "",
                  "| pipeline | estimated latency (us) | Tensor Engine utilisation | DMA active | "
                  "matmuls | max abs error | loops multi-buffered |", "|---|---|---|---|---|---|---|"]
        for r in large:
            lines.append(f"| {r['step']} | {r['latency_us']:,.1f} | {r['pe_utilisation']:.1%} | "
                         f"{r['dma_utilisation']:.1%} | {r['matmuls']} | {r['max_err']:.2e} | {r['multi_buffered']} |")
    lines += ["", f"command: `python bench/timing.py --size {args.size} --large {args.large} --target {args.target}`;"
                  f" Python {platform.python_version()}, {os.cpu_count()} cpus"]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    falls = all(rows[i]["latency_us"] > rows[i + 1]["latency_us"] for i in range(len(rows) - 1))
    print("latency falls at each step:", falls)
    if large:
        print(f"large blocked matmul, Tensor Engine utilisation: {large[-1]['pe_utilisation']:.1%} (goal >= 60%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "target": args.target, "rows": rows, "large_size": args.large,
                       "large": large, "trace": args.trace if (args.trace and large) else None}, f, indent=1)


if __name__ == "__main__":
    main()
