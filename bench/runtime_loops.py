"""Compile cost of nl.fori_loop / nl.while_loop does not depend on the trip
count: the same kernel compiled (cache off) and run at 10 and 100,000 runtime
iterations, the compile times as a ratio in one run, results against numpy.

    python bench/runtime_loops.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("NKICC_CACHE", "0")

import nkicc  # noqa: E402
import nkicc.isa as nisa  # noqa: E402
import nkicc.language as nl  # noqa: E402


@nkicc.jit
def running_sums(x, n):
    """acc += x[i % 128] for i < n (fori); cnt += 1, n times again (while)."""
    out = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    count = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((1, 64), dtype=nl.float32, buffer=nl.sbuf)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    ub = nisa.register_alloc()
    nisa.register_load(ub, n_sb)
    row = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.sbuf)
    idx = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=x.ap([[64, 1], [1, 64]], scalar_offset=idx, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
        nisa.tensor_scalar(dst=idx, data=idx, op0=nl.add, operand0=1, op1=nl.bitwise_and, operand1=127)

    nl.fori_loop(0, ub, body)
    nl.store(out, value=acc)

    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=n)
    cnt = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    cond = nisa.register_alloc()
    nisa.register_load(cond, left)

    def step(r):
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.add, operand0=1.0)
        nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)
        nisa.register_load(r, left)
        return r

    nl.while_loop(cond, step)
    nl.store(count, value=cnt)
    return out, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    times = {}
    nkicc.compile(running_sums, x, np.array([[1]], np.int32))  # imports and first-call costs out of the timing
    for trips in (10, 100_000):
        n = np.array([[trips]], np.int32)
        samples = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ck = nkicc.compile(running_sums, x, n)
            samples.append(time.perf_counter() - t0)
        times[trips] = min(samples)
        if trips == 10:
            got, count = ck.run(x, n)
            want = x[np.arange(trips) % 128].sum(0, keepdims=True)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
            assert count[0, 0] == trips
        print(f"trips {trips:>7}: compile {times[trips] * 1e3:.1f} ms (best of {args.repeat}), "
              f"{ck.report['instructions_rolled']} instructions")
    print(f"compile time ratio 100,000 / 10 trips: {times[100_000] / times[10]:.2f}")


if __name__ == "__main__":
    main()
