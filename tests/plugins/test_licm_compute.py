"""licm hoists loop-invariant element-wise compute, and licm-unroll opens a short static loop so
that the compute inside it can be hoisted (plugins/licm.py, plugins/licm_unroll.py).

Oracles: numpy for the results; the instructions the simulation executes (each hoisted
instruction runs once, not once per iteration of the loop it left); the same kernel with the
passes off."""
import numpy as np

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import Op

STATES, TILES, W = 6, 3, 128


@nkicc.jit
def product_per_state(x, y, b):
    """out[s] = x * y * b[s]: x * y does not depend on s."""
    out = nl.ndarray((STATES, 128, W), dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
    yt = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y)
    for s in nl.affine_range(STATES):
        bt = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bt, src=b[s])
        xy = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=xy, data1=xt, data2=yt, op=nl.multiply)
        r = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r, data1=xy, data2=bt, op=nl.multiply)
        nisa.dma_copy(dst=out[s], src=r)
    return out


@nkicc.jit
def tiled_product_per_state(x, y, b):
    """The same over TILES column tiles of a static inner loop (Mamba v3's shape)."""
    out = nl.ndarray((STATES, 128, TILES * W), dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.ndarray((128, TILES * W), dtype=x.dtype, buffer=nl.sbuf)
    yt = nl.ndarray((128, TILES * W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y)
    for s in nl.affine_range(STATES):
        for t in nl.static_range(TILES):
            cols = nl.ds(t * W, W)
            bt = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=bt, src=b[s, :, cols])
            xy = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=xy, data1=xt[:, cols], data2=yt[:, cols], op=nl.multiply)
            r = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=r, data1=xy, data2=bt, op=nl.multiply)
            nisa.dma_copy(dst=out[s, :, cols], src=r)
    return out


@nkicc.jit
def running_product(x, b):
    """acc = acc * b[s]: reads what the loop writes, so nothing is hoisted."""
    out = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=acc, src=x)
    for s in nl.affine_range(STATES):
        bt = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bt, src=b[s])
        nxt = nl.ndarray((128, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=nxt, data1=acc, data2=bt, op=nl.multiply)
        nisa.tensor_copy(dst=acc, src=nxt)
    nisa.dma_copy(dst=out, src=acc)
    return out


def _dve_executed(kernel, arrays, disable=()):
    c = nkicc.compile(kernel, *arrays, passes={"disable": list(disable)}, cache=False)
    got = c.run(*arrays)
    return got, c.sim.engines["dve"].instructions


def test_invariant_compute_runs_once(rng):
    x, y = (rng.standard_normal((128, W)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal((STATES, 128, W)).astype(np.float32)
    want = x * y * b
    got, n = _dve_executed(product_per_state, (x, y, b))
    off, n_off = _dve_executed(product_per_state, (x, y, b), disable=("licm",))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, off)
    assert (n_off, n) == (2 * STATES, STATES + 1)


def test_compute_in_a_static_inner_loop_is_hoisted_per_tile(rng):
    x, y = (rng.standard_normal((128, TILES * W)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal((STATES, 128, TILES * W)).astype(np.float32)
    want = x * y * b
    got, n = _dve_executed(tiled_product_per_state, (x, y, b))
    off, n_off = _dve_executed(tiled_product_per_state, (x, y, b), disable=("licm-unroll",))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, off)
    assert n_off == 2 * STATES * TILES          # the inner loop stays a loop: nothing leaves it
    assert n == STATES * TILES + TILES          # one product per tile, computed once


def test_compute_reading_what_the_loop_writes_stays(rng):
    x = rng.standard_normal((128, W)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (STATES, 128, W)).astype(np.float32)
    got, n = _dve_executed(running_product, (x, b))
    np.testing.assert_allclose(got, x * np.prod(b, axis=0), rtol=1e-5, atol=1e-6)
    assert n == 2 * STATES


@nkicc.jit
def plus_one_by_tiles(x):
    """Reads no program id: on a launch grid, every tile of the body is invariant in the grid loop.
    The tiles go into a Python list, so the tile loop is traced concretely (as the library's
    TiledRange loops are) and its instructions lie in the grid loop's body."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    results = []
    for p in range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p * 128:(p + 1) * 128, :])
        r = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[p * 128:(p + 1) * 128, :], src=r)
        results.append(r)
    return out


def test_hoisting_stops_at_half_the_buffer(rng):
    """Forty 8 KiB results, each stored where it is made, invariant in a two-program grid: hoisted
    all, they would be live across the loop together (320 KiB against 224 KiB of SBUF, the
    NKI Library's cumsum at [1024, 10, 4096]). licm hoists what fits in half of SBUF and leaves
    the rest in the loop; the kernel compiles without a spill and matches numpy."""
    from nkicc.plugins.licm import HOIST_SHARE

    x = rng.standard_normal((40 * 128, 2048)).astype(np.float32)
    c = plus_one_by_tiles[2].compile(x)
    alloc = c.report["notes"]["alloc"]
    assert not alloc["spills"] and not alloc["what_alloc_did"]
    hoisted = [s for s in c.ir.body.stmts if isinstance(s, Op) and s.outs[0].tensor != "out"]  # out of the grid loop
    assert 0 < len(hoisted) * 8192 <= HOIST_SHARE * alloc["capacity_bytes_per_partition"]["sbuf"]
    np.testing.assert_array_equal(c.run(x), x + np.float32(1.0))
