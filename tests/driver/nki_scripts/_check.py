"""Shared by the NKI scripts in this folder (a sibling-module import, as NKI
scripts often have): compare a kernel's output with numpy and exit 1 on a
mismatch."""
import sys

import numpy as np


def check(name, got, want, rtol=1e-5, atol=1e-5):
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        print(f"{name}: MISMATCH shape {got.shape} != {want.shape}")
        sys.exit(1)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        print(f"{name}: MISMATCH max abs err {err:.3g}")
        sys.exit(1)
    print(f"{name}: ok (max abs err {err:.3g})")
