"""Shared helpers of the op conformance tests (tests/ir/ops/) and the language tests that check
results the same way; `close` and its tolerance table live in tests/support/compare.py."""
from __future__ import annotations

import inspect

import numpy as np

import nkicc

from tests.support.compare import TOL, bf16, close, f32, fp8, reordered, same_up_to_sums  # noqa: F401


def rand(rng, shape, dtype=np.float32, lo=-2.0, hi=2.0) -> np.ndarray:
    """Random data of `dtype` (never constant): uniform floats, or ints in [lo, hi]."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def rounded(x, dtype) -> np.ndarray:
    """x rounded to dtype and widened back to float32: what a tile of dtype holds."""
    return np.asarray(x).astype(dtype).astype(np.float32)


def run_rolled_and_unrolled(kernel, *arrays):
    """Run a kernel with loops both rolled (the default) and unrolled; they must agree up to the
    order of fp32 sums (rolled loops' accumulations may run batched: simulator/batched.py)."""
    c = nkicc.compile(kernel, *arrays)
    rolled = c.run(*arrays)
    unrolled = nkicc.compile(kernel, *arrays, unroll=True).run(*arrays)
    for r, u in zip(rolled if isinstance(rolled, tuple) else (rolled,),
                    unrolled if isinstance(unrolled, tuple) else (unrolled,)):
        same_up_to_sums(f32(r), f32(u), reordered(c))
    return rolled


def check_error(excinfo, code: str, marker: str, filename: str) -> None:
    """The NkiccError has `code` and points at the one line of the caller's file holding `marker`."""
    err = excinfo.value
    assert err.code == code, err
    assert err.loc is not None, err
    assert err.loc.file.endswith(filename), err.loc
    frame = inspect.stack()[1]
    lines = [i + 1 for i, text in enumerate(open(frame.filename).read().splitlines())
             if marker in text and "check_error(" not in text]
    assert len(lines) == 1, (marker, lines)
    assert err.loc.line == lines[0], (err.loc, lines[0], str(err))
