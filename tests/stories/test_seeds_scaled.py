"""Scaled copies of the user's seed kernels, checked on random data.

Two sets of kernels, both with the seeds' loop structure (ragged m blocks, min()
bounds, copy-in / nc_matmul / copy-out PSUM tiles, dynamic loops with scalar
offsets, lists of PSUM accumulators):
- examples/fused_matmul.py: the cleaned-up versions users are pointed at;
- tests/support/seeds_scaled_kernels.py: near-literal copies, quirks included.

Each is compared with a float64 numpy reference, and the rolled program with
the unrolled trace (NKI's own semantics), which must agree bit for bit.
"""
import json
import re

import numpy as np
import pytest

import nkicc
from nkicc.loader import load_kernel

from tests.support.paths import EXAMPLES, REPO
from tests.support.compare import reordered, same_up_to_sums
from tests.support.cli import run_cli

FUSED = EXAMPLES / "fused_matmul.py"
COPIES = REPO / "tests" / "support" / "seeds_scaled_kernels.py"

MM2_SHAPES = [(256, 1160), (256, 1024), (1024, 256)]            # At, B, D (examples' defaults)
MM2_COPY_SHAPES = [(256, 1190), (256, 512), (512, 256)]         # the literal copies' fixed sizes
EINSUM_SHAPES = [(384, 512), (512, 512), (1, 1), (512, 1024)]   # A, B, C, D


def mm2_ref(At, B, D):
    return (At.astype(np.float64).T @ B.astype(np.float64)) @ D.astype(np.float64)


def einsum_ref(A, B, C, D):
    return (A.astype(np.float64) @ B.astype(np.float64)) @ D.astype(np.float64)


def random_inputs(rng, shapes):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for a in arrays:
        assert a.size == 1 or np.ptp(a) > 0  # never constant
    return arrays


def assert_close(out, ref):
    """fp32 accumulation over K * N products: error relative to the largest value."""
    assert out.shape == ref.shape
    assert not np.isnan(out).any(), f"{int(np.isnan(out).sum())} NaNs in the output"
    err = np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 2e-5, f"max error {err:.3g} of the largest |value|"


def run_both(kernel, arrays, **consts):
    """Rolled run and unrolled run; they must agree bit for bit, up to the order of fp32 sums
    where rolled loops ran them batched (simulator/batched.py). Returns (rolled output, compiled)."""
    rolled = nkicc.compile(kernel, *arrays, **consts)
    out = rolled.run(*arrays)
    unrolled = nkicc.compile(kernel, *arrays, unroll=True, **consts)
    out_u = unrolled.run(*arrays)
    same_up_to_sums(out, out_u, reordered(rolled))
    assert rolled.report["instructions_executed"] == unrolled.report["instructions_executed"]
    return out, rolled


# --- examples/fused_matmul.py ---------------------------------------------------------

@pytest.mark.parametrize("name, shapes, ref", [
    ("mm2", MM2_SHAPES, mm2_ref),
    ("mm2_dynamic", MM2_SHAPES, mm2_ref),
    ("einsum", EINSUM_SHAPES, einsum_ref),
])
def test_example_matches_numpy(rng, name, shapes, ref):
    """At the default (annotated) sizes; rolled == unrolled is checked below on smaller ones."""
    kernel = load_kernel(f"{FUSED}::{name}")
    arrays = random_inputs(rng, shapes)
    compiled = nkicc.compile(kernel, *arrays)
    assert_close(compiled.run(*arrays), ref(*arrays))
    r = compiled.report
    # the dynamic copy keeps the seed's nl.dynamic_range, deprecated since NKI 0.6 (W150)
    assert [w for w in r["warnings"] if "[W150]" not in w] == []
    # the loops really stay rolled (einsum's list-indexing loops are traced per iteration, as NKI does)
    assert r["instructions_rolled"] * 5 < r["instructions_unrolled"], r
    assert r["loops"]["dynamic"] == (3 if name == "mm2_dynamic" else 0)


def test_example_einsum_rolled_equals_unrolled(rng):
    kernel = load_kernel(f"{FUSED}::einsum")
    arrays = random_inputs(rng, EINSUM_SHAPES)
    out, _ = run_both(kernel, arrays)
    assert_close(out, einsum_ref(*arrays))


@pytest.mark.parametrize("name", ["mm2", "mm2_dynamic"])
@pytest.mark.parametrize("K, M, N, L", [
    (128, 600, 512, 128),   # M a multiple of the block: no ragged block
    (128, 301, 512, 128),   # a one-row ragged block
    (256, 250, 512, 256),   # only a ragged block (the dynamic loop runs zero times)
    (128, 356, 1024, 128),  # ragged block of 56 rows = exactly one E tile; two n0 blocks
])
def test_example_rolled_equals_unrolled(rng, name, K, M, N, L):
    kernel = load_kernel(f"{FUSED}::{name}")
    arrays = random_inputs(rng, [(K, M), (K, N), (N, L)])
    out, _ = run_both(kernel, arrays)
    assert_close(out, mm2_ref(*arrays))


def test_example_jit_call_returns_numpy(rng):
    kernel = load_kernel(f"{FUSED}::einsum")
    arrays = random_inputs(rng, EINSUM_SHAPES)
    out = kernel(*arrays)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert_close(out, einsum_ref(*arrays))


# --- near-literal seed copies ---------------------------------------------------------

def test_seed_copy_static(rng):
    kernel = load_kernel(f"{COPIES}::mm2_static")
    arrays = random_inputs(rng, MM2_COPY_SHAPES)
    out, compiled = run_both(kernel, arrays)
    assert_close(out, mm2_ref(*arrays))
    # as in the full-size seed, the ragged block's Ct tiles run past its At tile
    assert any("W101" in w for w in compiled.report["warnings"]), compiled.report["warnings"]
    assert compiled.report["instructions_rolled"] < 100


def test_seed_copy_dynamic_with_offsets_fixed(rng):
    kernel = load_kernel(f"{COPIES}::mm2_dynamic")
    arrays = random_inputs(rng, MM2_COPY_SHAPES)
    out, compiled = run_both(kernel, arrays, fix_offsets=True)
    assert_close(out, mm2_ref(*arrays))
    assert compiled.report["loops"]["dynamic"] == 3


def test_seed_copy_dynamic_as_written_only_right_on_ones(rng):
    """seed_mm2_dynamic.py's B and D access patterns leave out the k0 / n1
    offsets. All-ones inputs cannot see it; random inputs do."""
    kernel = load_kernel(f"{COPIES}::mm2_dynamic")
    compiled = nkicc.compile(kernel, *[f"float32[{m},{n}]" for m, n in MM2_COPY_SHAPES])
    ones = [np.ones(s, np.float32) for s in MM2_COPY_SHAPES]
    np.testing.assert_array_equal(compiled.run(*ones), mm2_ref(*ones).astype(np.float32))
    arrays = random_inputs(rng, MM2_COPY_SHAPES)
    out = compiled.run(*arrays)
    ref = mm2_ref(*arrays)
    assert np.abs(out - ref).max() > 0.1 * np.abs(ref).max()


def test_seed_copy_einsum(rng):
    kernel = load_kernel(f"{COPIES}::compute_einsum")
    arrays = random_inputs(rng, EINSUM_SHAPES)
    out, _ = run_both(kernel, arrays)
    assert_close(out, einsum_ref(*arrays))


# --- the command line, with no flags ----------------------------------------------------

def nkicc_cli(*args):
    # one BLAS thread: the simulator's many small matmuls run several times slower
    # with OpenBLAS's threads on a busy 2-core machine
    return run_cli(*args, module="nkicc.cli", cwd=REPO, add_env={"OPENBLAS_NUM_THREADS": "1"})


@pytest.mark.parametrize("name", ["mm2", "mm2_dynamic", "einsum"])
def test_cli_compile_example_without_flags(name):
    p = nkicc_cli("compile", f"examples/fused_matmul.py::{name}")
    assert p.returncode == 0, p.stderr
    assert f"kernel {name}" in p.stdout
    m = re.search(r"instructions: ([\d,]+) rolled, ([\d,]+) if static loops were unrolled, ([\d,]+) executed",
                  p.stdout)
    assert m, p.stdout
    rolled, unrolled, executed = (int(g.replace(",", "")) for g in m.groups())
    assert 0 < rolled < unrolled <= executed


def test_cli_compile_example_report(tmp_path):
    report = tmp_path / "r.json"
    p = nkicc_cli("compile", "examples/fused_matmul.py::mm2_dynamic", "--report", str(report))
    assert p.returncode == 0, p.stderr
    r = json.loads(report.read_text())
    assert r["kernel"] == "mm2_dynamic" and r["loops"]["dynamic"] == 3
    assert r["instructions_rolled"] < r["instructions_unrolled"] < r["instructions_executed"]


def test_cli_simulate_example_prints_stats():
    p = nkicc_cli("simulate", "examples/fused_matmul.py::mm2", "--inputs", "random", "--seed", "3")
    assert p.returncode == 0, p.stderr
    m = re.search(r"^E: float32\[1160, 256\]\s+min (\S+)\s+max (\S+)\s+mean (\S+)\s+std (\S+)\s+nan (\d+)",
                  p.stdout, re.M)
    assert m, p.stdout
    lo, hi, _, std, nan = m.groups()
    assert float(lo) < 0 < float(hi) and float(std) > 0 and nan == "0"
