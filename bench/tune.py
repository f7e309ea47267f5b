"""Scale-out of `nkicc tune`: one sweep of a bundled example kernel with 2
local worker processes and with 1, in one run; the wall-time ratio (target
<= 0.65 on 2 cores) and whether both rank the variants the same. Each run
starts from an empty compile cache of its own (the cluster's start is in the
wall time, as it is for a user).

    python bench/tune.py [--kernel examples/matmul.py::matmul_blocked]
                         [--sweep TILES_IN_BLOCK_M=1,2,4 --sweep ...] [--workers 2] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from benchenv import REPO, commit, machine_info, machine_line  # noqa: E402

import nkicc  # noqa: E402
from nkicc.sweep import parse_sweep  # noqa: E402

KERNEL = str(REPO / "examples" / "matmul.py") + "::matmul_blocked"
SWEEPS = ["TILES_IN_BLOCK_M=1,2,4", "TILES_IN_BLOCK_N=1,2", "TILES_IN_BLOCK_K=4,8"]  # 12 variants


def sweep(kernel: str, sweeps: dict, workers: int):
    with tempfile.TemporaryDirectory(prefix="nkicc-bench-tune-cache-") as cache:
        old = os.environ.get("NKICC_CACHE_DIR")
        os.environ["NKICC_CACHE_DIR"] = cache  # the workers (and their variants' processes) inherit it
        try:
            return nkicc.tune(kernel, sweeps, workers=workers)
        finally:
            if old is None:
                os.environ.pop("NKICC_CACHE_DIR", None)
            else:
                os.environ["NKICC_CACHE_DIR"] = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default=KERNEL)
    ap.add_argument("--sweep", action="append", help="NAME=v1,v2,... (default: 12 block shapes)")
    ap.add_argument("--workers", type=int, default=2, help="the parallel run's local workers")
    ap.add_argument("--json", help="write the measurements here")
    a = ap.parse_args()
    sweeps = dict(parse_sweep(s) for s in (a.sweep or SWEEPS))
    machine = machine_info()
    print(f"machine: {machine_line(machine)}; {commit()}")
    runs = {}
    for workers in (a.workers, 1):
        result = sweep(a.kernel, sweeps, workers)
        failed = [r for r in result if r.status != "ok"]
        print(f"--workers {workers}: {len(result)} variants, {len(failed)} failed, {result.wall_s:.2f} s wall, "
              f"sum of variant wall {sum(r.wall_s or 0 for r in result):.2f} s")
        for r in failed:
            print(f"  {r.values}: {r.error}")
        runs[workers] = result
    par, one = runs[a.workers], runs[1]
    ratio = par.wall_s / one.wall_s
    same = [r.values for r in par] == [r.values for r in one]
    print(f"wall time --workers {a.workers} / --workers 1: {ratio:.2f} (target <= 0.65); "
          f"same ranking: {'yes' if same else 'NO'}; best {par.best.values if par.best else None}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine, "commit": commit(), "kernel": a.kernel, "sweeps": sweeps,
                       "ratio": ratio, "same_ranking": same,
                       "runs": {str(w): r.to_dict() for w, r in runs.items()}}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
