"""Checking a rolled loop against full unrolling: the helpers of the rolling tests
(tests/language/test_tricky_loops.py, tests/language/test_loop_effects.py)."""
import inspect

import numpy as np

import nkicc

from tests.support.compare import reordered, same_up_to_sums

# these tests are about tracing: keep the compile cache out of them (and their runtime)
NO_CACHE = {"cache": False} if "cache" in inspect.signature(nkicc.compile).parameters else {}

def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def check(kernel, arrays, expected, bound=None, **consts):
    """Rolled == unrolled (up to the order of fp32 sums: rolled loops' accumulations may run
    batched, simulator/batched.py) == numpy (allclose, or within `bound`, an error per element
    such as compare.sum_bound's for a matmul); same executed count.
    Returns the rolled CompiledKernel for decision checks."""
    rolled = nkicc.compile(kernel, *arrays, **NO_CACHE, **consts)
    unrolled = nkicc.compile(kernel, *arrays, unroll=True, **NO_CACHE, **consts)
    r, u, e = _tuple(rolled.run(*arrays)), _tuple(unrolled.run(*arrays)), _tuple(expected)
    assert len(r) == len(u) == len(e)
    for got_r, got_u, want in zip(r, u, e):
        same_up_to_sums(got_r, got_u, reordered(rolled), err_msg="rolled differs from unrolled")
        if bound is None:
            np.testing.assert_allclose(got_r, want, rtol=1e-5, atol=1e-5, err_msg="differs from numpy")
        else:
            err = np.abs(np.asarray(got_r, np.float64) - want)
            assert np.all(err <= bound), f"differs from numpy by up to {err.max()} (bound {np.min(bound)}..)"
    assert rolled.report["instructions_executed"] == unrolled.report["instructions_executed"]
    assert unrolled.report["instructions_rolled"] == unrolled.report["instructions_unrolled"]
    assert unrolled.report["loops"]["rolled"] == 0
    return rolled


def loops(c):
    return c.report["loops"]


def data(rng, *shape):
    # random, never all-ones: a rolled body traced once must not hide a wrong index
    return rng.standard_normal(shape).astype(np.float32)


def blocks(x, rows):
    return [x[k * rows:(k + 1) * rows] for k in range(x.shape[0] // rows)]
