"""oob_mode.skip on a DMA with a runtime scalar offset (simulator/oob_skip.py): the elements
whose index falls outside the tensor are not moved, the others are; without the option it is
E170 at the kernel's line. The NKI Library's indexed_flatten places each row's blocks at a
runtime block offset, -1,000,000 for padding rows, and skips what falls outside. Both
simulators, against numpy."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error
from tests.support.sim_helpers import run_both_simulators


def place_rows_kernel(blocks, skip=True):
    """out[blocks, F]: rows of x (each [R, F]) placed from a runtime block offset each, the
    output filled with -1 first; offsets out of range are skipped (oob_mode.skip)."""
    @nkicc.jit
    def k(x, offsets):
        n, rows, f = x.shape
        out = nl.ndarray((blocks, f), dtype=x.dtype, buffer=nl.shared_hbm)
        fill = nl.ndarray((blocks, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(fill, -1)
        nisa.dma_copy(dst=out, src=fill)
        offs = nl.load(offsets)
        for r in nl.sequential_range(n):
            at = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=offs[0:1, r:r + 1])
            tile = nl.load(x[r])
            mode = nisa.oob_mode.skip if skip else nisa.oob_mode.error
            nisa.dma_copy(dst=out.ap(pattern=[[f, rows], [1, f]], offset=0, scalar_offset=at, indirect_dim=0),  # PLACE
                          src=tile, oob_mode=mode)
        return out
    return k


def _placed(x, offsets, blocks):
    out = np.full((blocks, x.shape[2]), -1, x.dtype)
    for r, o in enumerate(offsets.reshape(-1)):
        for p in range(x.shape[1]):
            if 0 <= o + p < blocks:
                out[o + p] = x[r, p]
    return out


@pytest.mark.parametrize("offsets", [[3, 40, 10], [-1000000, 0, 60], [-3, 62, 20]])
def test_rows_whose_offset_falls_outside_are_skipped(rng, offsets):
    x = rng.integers(0, 1000, size=(3, 8, 16)).astype(np.int32)
    offs = np.array([offsets], np.int32)
    got = run_both_simulators(place_rows_kernel(64), x, offs)
    np.testing.assert_array_equal(got, _placed(x, offs, 64))


def test_without_skip_an_offset_out_of_range_is_e170(rng):
    x = rng.integers(0, 1000, size=(3, 8, 16)).astype(np.int32)
    with pytest.raises(nkicc.NkiccError) as e:
        place_rows_kernel(64, skip=False)(x, np.array([[3, 60, 10]], np.int32))
    check_error(e, "E170", "# PLACE", "test_oob_skip.py")


@pytest.mark.parametrize("batched", [False, True])
def test_rows_a_skipping_gather_leaves_unwritten_are_poison_in_a_fresh_tile(rng, batched):
    """A tile whose first instruction is a gather with oob_mode.skip is not wholly written by it:
    the rows whose index is out of range hold what the tile held before, which for a fresh tile is
    never-written memory (poison: NaN, as the vendor's simulator), on the per-instruction path and
    in a batched loop nest alike. The simulator skipped the poison at such a tile's allocation, so
    those rows held whatever that memory held last (a reused buffer: any bytes)."""
    @nkicc.jit(undefined="poison")
    def k(table, idx):
        reps, n, _ = idx.shape
        H = table.shape[1]
        out = nl.ndarray((reps, n, H), dtype=table.dtype, buffer=nl.shared_hbm)
        for r in (nl.affine_range(reps) if batched else nl.sequential_range(reps)):
            it = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=it, src=idx[r])
            rows = nl.ndarray((n, H), dtype=table.dtype, buffer=nl.sbuf)  # first written by the gather
            nisa.dma_copy(dst=rows, src=table.ap([[H, n], [1, H]], offset=0, vector_offset=it, indirect_dim=0),
                          oob_mode=nisa.oob_mode.skip)
            done = nl.ndarray((n, H), dtype=table.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=done, data=rows, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[r], src=done)
        return out

    table = rng.standard_normal((20, 8)).astype(np.float32)
    idx = rng.integers(0, 20, size=(4, 16, 1)).astype(np.int32)
    idx[0, 3], idx[1, 9], idx[3, 0] = 20, -1, 1000
    want = np.full((4, 16, 8), np.nan, np.float32)
    inside = (idx[..., 0] >= 0) & (idx[..., 0] < 20)
    want[inside] = 2 * table[idx[..., 0][inside]]
    got = k(table, idx)
    np.testing.assert_array_equal(got, want)  # (NaN where want is NaN)
    ck = k.compiled[0]
    ref = ck.simulate(dict(zip(ck.ir.args, (table, idx))), simulator="reference")[0][ck.ir.outputs[0]]
    np.testing.assert_array_equal(ref, want)
