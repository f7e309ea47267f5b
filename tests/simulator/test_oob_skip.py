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
