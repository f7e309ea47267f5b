"""The long fuzz run: the properties of tests/language/test_fuzz.py with many fresh
random examples per family (CI runs a few, derandomised).

    python bench/fuzz.py --examples 2000              # every family, 2000 examples each
    python bench/fuzz.py --examples 200 --family matmul --family tiles_wrong
    python bench/fuzz.py --examples 500 --json fuzz.json

Families: valid templates (rolled == unrolled bit for bit, == numpy), invalid
ones (an NkiccError with an expected code at the kernel's line) and "any"
(random parameters: the numpy result or such an error). For each family it
prints examples run, what they gave (ok, or the error codes), time, and the
falsifying example if a property failed; the exit code is 1 if any failed.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))

from hypothesis import HealthCheck, given, settings  # noqa: E402

import fuzz_kernels as fk  # noqa: E402

HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def families() -> dict:
    out = {}
    for name, strategy in fk.VALID.items():
        out[name] = ("valid", strategy, lambda case: (fk.check_valid(case), "ok")[1])
    for name, strategy in fk.INVALID.items():
        out[name] = ("invalid", strategy, fk.check_invalid)
    for name, strategy in fk.ANY.items():
        out[name] = ("any", strategy, fk.check_any)
    return out


def run_family(name: str, kind: str, strategy, check, examples: int, seed: int | None) -> dict:
    outcomes: collections.Counter = collections.Counter()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=HEALTH,
              derandomize=False, print_blob=True)
    @given(strategy())
    def prop(case):
        outcomes[check(case)] += 1

    if seed is not None:
        from hypothesis import seed as hseed
        prop = hseed(seed)(prop)
    start = time.perf_counter()
    failure = None
    try:
        prop()
    except Exception as exc:  # the falsifying example is in the message
        failure = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return {"family": name, "kind": kind, "examples": sum(outcomes.values()), "outcomes": dict(outcomes),
            "seconds": round(time.perf_counter() - start, 1), "failure": failure}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=200, help="examples per family (default 200)")
    p.add_argument("--family", action="append", default=[], help="only these families (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="a fixed hypothesis seed (default: random)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    fams = families()
    chosen = args.family or list(fams)
    unknown = [f for f in chosen if f not in fams]
    if unknown:
        p.error(f"unknown families {unknown}; choose from {sorted(fams)}")
    os.environ.setdefault("NKICC_CACHE", "0")  # every example is new: the compile cache would only fill up
    results = []
    start = time.perf_counter()
    print(f"{'family':<22}{'kind':<9}{'examples':>9}{'seconds':>9}  outcomes")
    for name in chosen:
        kind, strategy, check = fams[name]
        r = run_family(name, kind, strategy, check, args.examples, args.seed)
        results.append(r)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        print(f"{name:<22}{kind:<9}{r['examples']:>9}{r['seconds']:>9.1f}  {outcomes}", flush=True)
        if r["failure"]:
            print(f"  FAILED: {r['failure']}", flush=True)
    total = time.perf_counter() - start
    failed = [r["family"] for r in results if r["failure"]]
    examples = sum(r["examples"] for r in results)
    print(f"total: {examples} examples in {total:.0f} s; "
          f"{'FAILED: ' + ', '.join(failed) if failed else 'all properties held'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join([os.path.basename(sys.executable), "bench/fuzz.py", *sys.argv[1:]]),
                       "python": platform.python_version(), "machine": platform.machine(),
                       "cpus": os.cpu_count(), "seconds": round(total, 1), "examples": examples,
                       "failed": failed, "families": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
