"""What the batched simulator could reach at --scale 8 if its data movement were free: a bound
for issue 14's "functional <= 1.5x numpy", measured, not estimated.

    python bench/sim_floor.py [--scale 8] [--repeat 9]

Four simulators of examples/fused_matmul.py::mm2 (as bench/sim_throughput.py builds it), each
against numpy's `(At.T @ B) @ D` in the same loop: as shipped; with every private tile stored
(partition, free), as before tiles a matmul reads were stored partition-innermost
(`batched._columns` returns nothing); with the copies of operands into
GEMM order skipped (`gemm._blocks` returns its array unfilled); and with the adds of the products
into their accumulators skipped too (`matmul_groups.one_add` does nothing). The last two compute wrong values
on purpose: only their time means anything. It shows how much of the gap to numpy those two
passes over memory are, and what would be left with both gone (GEMMs, the other instructions,
per-entry Python).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_throughput import _scaled_inputs  # noqa: E402


@contextlib.contextmanager
def _patched(module, name, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def measure(scale: int, repeat: int) -> list[tuple[str, float, float, float, float]]:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import fused_matmul as fm

    import nkicc
    from nkicc.api import resolve_target
    from nkicc.passes import registry
    from nkicc.simulator import batched, gemm, matmul_groups
    from nkicc.simulator.machine import MachineSimulator

    (M, K, N, L), (At, B, D) = _scaled_inputs(scale)
    compiled = nkicc.compile(fm.mm2, f"float32[{K},{M}]", f"float32[{K},{N}]", f"float32[{N},{L}]",
                             passes={"target": "trn2"})
    target = resolve_target("trn2", registry())
    inputs = {"At": At, "B": B, "D": D}

    def run(label):
        sim = MachineSimulator(compiled.ir, target, timing=False)
        sim.run(inputs)  # verdicts once, as bench/sim_throughput.py
        ts, nts = [], []
        for _ in range(repeat):  # interleaved: the machine's load slows both alike
            t0 = time.perf_counter()
            sim.run(inputs)
            ts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            (At.T @ B) @ D
            nts.append(time.perf_counter() - t0)
        return label, min(ts), float(np.median(ts)), min(nts), float(np.median(nts))

    no_copy = lambda blocks, out, *a, **k: out  # noqa: E731
    rows = [run("as shipped")]
    with _patched(batched, "_columns", lambda *a: set()):
        rows.append(run("private tiles (partition, free), as at fd5a23e"))
    with _patched(gemm, "_blocks", no_copy):
        rows.append(run("operand copies skipped"))
        with _patched(matmul_groups, "one_add", lambda *a: True):
            rows.append(run("operand copies and product adds skipped"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    print("| simulator (timing off) | best s | median s | numpy best s | numpy median s | best / numpy best |")
    print("|---|---|---|---|---|---|")
    for label, best, med, nbest, nmed in measure(args.scale, args.repeat):
        print(f"| {label} | {best:.3f} | {med:.3f} | {nbest:.3f} | {nmed:.3f} | {best / nbest:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
