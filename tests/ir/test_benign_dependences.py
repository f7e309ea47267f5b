"""Dependences between affine_range iterations that no order changes (W190)
and those that an order does change (E190), on kernels of this project's own
that reproduce the patterns: a row broadcast that rewrites its source row with
its own value (nc_stream_shuffle, dma_copy), overlapping memsets of one value.
The oracles: numpy, the unrolled trace (NKI's own semantics, each iteration
traced in program order) and the same kernel written with sequential_range."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.diagnostics import explain


def _loop(kind: str):
    return nl.affine_range if kind == "affine" else nl.sequential_range


def make_shuffle_broadcast(kind: str):
    loop = _loop(kind)

    @nkicc.jit
    def shuffle_broadcast(x, bias):
        t = nl.ndarray((128, bias.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:1, :], src=bias[0:1, :])
        for b in loop(4):
            nisa.nc_stream_shuffle(dst=t[nl.ds(b * 32, 32), :], src=t[0:1, :], shuffle_mask=[0] * 32)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(x), t))
        return out
    return shuffle_broadcast


def make_dma_tiling(kind: str):
    loop = _loop(kind)

    @nkicc.jit
    def dma_tiling(x):
        """Rows 0..31 of x copied to all four quadrants; quadrant 0 onto itself."""
        t = nl.ndarray((128, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:32, :], src=x[0:32, :])
        for q in loop(4):
            nisa.dma_copy(dst=t[nl.ds(q * 32, 32), :], src=t[0:32, :])
        out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    return dma_tiling


def make_per_block_broadcast(kind: str):
    """The broadcast inside a rolled outer loop over column blocks: each block
    broadcasts its own bias row, so the outer index moves every address."""
    loop = _loop(kind)

    @nkicc.jit
    def per_block_broadcast(x, bias):
        W = 32
        t = nl.ndarray((128, bias.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(bias.shape[1] // W):
            nisa.dma_copy(dst=t[0:1, nl.ds(j * W, W)], src=bias[0:1, nl.ds(j * W, W)])
            for b in loop(4):
                nisa.nc_stream_shuffle(dst=t[nl.ds(b * 32, 32), nl.ds(j * W, W)], src=t[0:1, nl.ds(j * W, W)],
                                       shuffle_mask=[0] * 32)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), t))
        return out
    return per_block_broadcast


def make_overlapping_memsets(kind: str):
    loop = _loop(kind)

    @nkicc.jit
    def overlapping_memsets(x):
        t = nl.load(x)
        for i in loop(3):
            nisa.memset(dst=t[:, nl.ds(i * 8, 16)], value=0.5)  # columns 0..31, overlapping by 8
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    return overlapping_memsets


@pytest.fixture
def x(rng):
    return rng.standard_normal((128, 96)).astype(np.float32)


@pytest.fixture
def bias(rng):
    return rng.standard_normal((1, 96)).astype(np.float32)


CASES = {
    "shuffle_broadcast": (make_shuffle_broadcast, lambda x, bias: (x, bias), lambda x, bias: x + bias),
    "dma_tiling": (make_dma_tiling, lambda x, bias: (x,), lambda x, bias: np.tile(x[0:32], (4, 1))),
    "per_block_broadcast": (make_per_block_broadcast, lambda x, bias: (x, bias), lambda x, bias: x * bias),
    "overlapping_memsets": (make_overlapping_memsets, lambda x, bias: (x,),
                            lambda x, bias: np.concatenate([np.full((128, 32), 0.5, np.float32), x[:, 32:]], 1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_order_free_dependence_warns_once_and_runs_in_program_order(name, x, bias):
    make, args_of, want_of = CASES[name]
    args, want = args_of(x, bias), want_of(x, bias)
    compiled = nkicc.compile(make("affine"), *args, cache=False)
    assert [w.split("]")[0] for w in compiled.report["warnings"]] == ["warning[W190"], compiled.report["warnings"]
    assert compiled.report["loops"]["rolled"] >= 1  # the loop was checked rolled, not traced iteration by iteration
    unrolled = nkicc.compile(make("affine"), *args, unroll=True, cache=False)
    sequential = nkicc.compile(make("sequential"), *args, cache=False)
    assert sequential.report["warnings"] == []
    results = []
    for c in (compiled, unrolled, sequential):
        for simulator in ("machine", "reference"):
            c.simulator = simulator
            results.append(c.run(*args))
    np.testing.assert_allclose(results[0], want, rtol=1e-6, atol=1e-6)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_the_warning_names_both_instructions_at_the_kernels_line(x, bias):
    import inspect
    kernel = make_shuffle_broadcast("affine")
    compiled = nkicc.compile(kernel, x, bias, cache=False)
    (warning,) = compiled.report["warnings"]
    lines, first = inspect.getsourcelines(make_shuffle_broadcast)
    shuffle = first + next(i for i, t in enumerate(lines) if "nc_stream_shuffle" in t)
    loop = first + next(i for i, t in enumerate(lines) if "for b in loop(4)" in t)
    assert warning.startswith(f"warning[W190] {__file__}:{shuffle}: "), warning
    assert f"affine_range loop at line {loop}" in warning
    assert warning.count(f"nc_stream_shuffle at line {shuffle}") == 2  # the writer and the reader
    assert "program order" in warning and "nl.sequential_range" in warning
    assert explain("W190").startswith("W190: ")


def test_memsets_of_different_values_that_overlap_are_e190(x):
    @nkicc.jit
    def two_values(x):
        t = nl.load(x)
        for i in nl.affine_range(3):
            nisa.memset(dst=t[:, nl.ds(i * 8, 8)], value=1.0)
            nisa.memset(dst=t[:, nl.ds(i * 8 + 4, 8)], value=2.0)  # under the next iteration's first memset
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as err:
        nkicc.compile(two_values, x, cache=False)
    assert err.value.code == "E190"


def test_a_shuffle_that_swaps_the_rows_it_broadcasts_is_e190(x):
    """Iteration 0 moves row 1 into row 0 and row 0 into row 1 (not onto
    themselves); the other iterations read rows 0 and 1: the order shows."""
    @nkicc.jit
    def swap_and_broadcast(x):
        t = nl.load(x)
        for b in nl.affine_range(4):
            nisa.nc_stream_shuffle(dst=t[nl.ds(b * 32, 32), :], src=t[0:2, :], shuffle_mask=[1, 0] * 16)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as err:
        nkicc.compile(swap_and_broadcast, x, cache=False)
    assert err.value.code == "E190"


def test_a_real_dependence_beside_an_order_free_one_is_still_e190(x, bias):
    """The self-copy's pair is order-free, but the doubling in place is not:
    the error names it."""
    @nkicc.jit
    def broadcast_then_double(x, bias):
        t = nl.ndarray((128, bias.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:1, :], src=bias[0:1, :])
        for b in nl.affine_range(4):
            nisa.nc_stream_shuffle(dst=t[nl.ds(b * 32, 32), :], src=t[0:1, :], shuffle_mask=[0] * 32)
            nisa.tensor_scalar(dst=t[nl.ds(b * 32, 32), :], data=t[nl.ds(b * 32, 32), :], op0=nl.multiply,
                               operand0=2.0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as err:
        nkicc.compile(broadcast_then_double, x, bias, cache=False)
    assert err.value.code == "E190" and "tensor_scalar" in err.value.message


def test_order_free_on_enumerated_element_sets():
    """ir/order_free._kept against a plain-Python reading of its rule on random
    element sets: a written element that another iteration touches must be one
    written back with its own value."""
    from nkicc.ir.order_free import _kept
    rng = np.random.default_rng(5)
    for _ in range(300):
        n, m = int(rng.integers(0, 12)), int(rng.integers(0, 12))
        a = (rng.integers(0, 10, n), rng.integers(0, 3, n), rng.random(n) < 0.7)
        b = (rng.integers(0, 10, m), rng.integers(0, 3, m), np.zeros(m, bool))
        want = all(keep for e, k, keep in zip(*a)
                   if any(e2 == e and k2 != k for e2, k2 in zip(b[0], b[1])))
        assert _kept(a, b) == want
