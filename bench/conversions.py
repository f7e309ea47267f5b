"""bfloat16 conversions: nkicc's integer arithmetic (ir/numerics.py) against ml_dtypes' casts,
as ratios in one run, on the tiles the simulators convert (docs/numerics.md, "bfloat16
conversions").

    python bench/conversions.py [--repeat 2000]

Each row: the median of --repeat calls in microseconds for each way, on a tile of 128 partitions
(a contiguous one and a strided view with every other column, as a simulator reads one). The bits
are checked equal first, so a faster wrong conversion cannot show up here.
"""
from __future__ import annotations

import argparse
import statistics
import time

import ml_dtypes
import numpy as np

from nkicc.ir import numerics

BF16 = np.dtype(ml_dtypes.bfloat16)


def _median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| conversion | tile | ml_dtypes us | nkicc us | ratio |")
    print("|---|---|---:|---:|---:|")
    for cols in (128, 512, 2048):
        f32 = rng.standard_normal((128, cols * 2)).astype(np.float32)
        bf = f32.astype(BF16)
        for label, view in (("contiguous", (slice(None), slice(0, cols))), ("every other column", (slice(None), slice(None, None, 2)))):
            fv, bv = f32[view], bf[view]
            if label == "contiguous":
                fv, bv = np.ascontiguousarray(fv), np.ascontiguousarray(bv)
            assert np.array_equal(numerics.bf16_to_f32(bv).view(np.uint32), bv.astype(np.float32).view(np.uint32))
            assert np.array_equal(numerics.f32_to_bf16(fv, BF16).view(np.uint16), fv.astype(BF16).view(np.uint16))
            for name, ours, theirs in (
                    ("bf16 -> f32", lambda: numerics.bf16_to_f32(bv), lambda: bv.astype(np.float32)),
                    ("f32 -> bf16", lambda: numerics.f32_to_bf16(fv, BF16), lambda: fv.astype(BF16))):
                a, b = _median_us(theirs, args.repeat), _median_us(ours, args.repeat)
                print(f"| {name} | 128 x {cols}, {label} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
