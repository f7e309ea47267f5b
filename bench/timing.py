"""Timing sanity: the matmul tutorial's progression (examples/matmul.py) on the
machine simulator. Each step should have a lower estimated latency than the
one before; the Tensor Engine's utilisation says how close a step gets to the
hardware's peak.

    python bench/timing.py [--size 1024,512,2048] [--target trn2] [--markdown FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import nkicc  # noqa: E402
import matmul as mm  # noqa: E402

STEPS = ["matmul_tiled", "matmul_hoisted", "matmul_block_free", "matmul_blocked"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1024,512,2048", help="K,M,N")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--markdown", help="write the table to this file")
    args = ap.parse_args()
    k, m, n = (int(x) for x in args.size.split(","))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64).T @ b.astype(np.float64)
    rows = []
    for name in STEPS:
        c = nkicc.compile(getattr(mm, name), a, b, passes={"target": args.target}, cache=False)
        out = c.run(a, b)
        err = float(np.abs(out - ref).max())
        sim = c.report["sim"]
        pe = sim["engines"]["pe"]
        rows.append((name, sim["total_ns"] / 1000, pe["utilisation"], pe["instructions"], err))
    lines = [f"bf16 matmul K={k} M={m} N={n} on {args.target} (machine simulator, estimated)", "",
             "| step | estimated latency (us) | Tensor Engine utilisation | matmuls | max abs error |",
             "|---|---|---|---|---|"]
    for name, us, util, count, err in rows:
        lines.append(f"| {name} | {us:,.1f} | {util:.1%} | {count} | {err:.2e} |")
    lines += ["", f"command: `python bench/timing.py --size {args.size} --target {args.target}`; "
                  f"{platform.python_version()}, {os.cpu_count()} cpus"]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    falls = all(rows[i][1] > rows[i + 1][1] for i in range(len(rows) - 1))
    print("latency falls at each step:", falls)


if __name__ == "__main__":
    main()
