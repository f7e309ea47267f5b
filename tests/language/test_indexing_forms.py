"""Integer indexing as NKI defines it (the language guide's "partition dimension is
special"): an on-chip view stays at least 2-D (an integer on the partition dimension
keeps it at size 1; an integer on a free dimension drops it unless that would leave
fewer than two, when the last one stays at size 1), an HBM view at least 1-D. The NKI
Library's attention_cte takes a column `x[:n, k]` of a [P, G] tile and then
`[:n, :1]` of it; router_topk scatters through a `vector_offset` that is a column
of a [t, k] tile seen as [[k, t], [1, 1], [1, 1]]. Results against numpy on random
data, through both simulators."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error, rand
from tests.support.sim_helpers import run_both_simulators


def test_view_shapes_follow_the_rank_rules(rng):
    shapes = {}

    @nkicc.jit
    def k(a, h):
        t = nl.load(a)                       # [16, 4, 8]
        shapes["t[0, :, :]"] = t[0, :, :].shape
        shapes["t[:, :, 0]"] = t[:, :, 0].shape
        shapes["t[:, 0, 5]"] = t[:, 0, 5].shape
        shapes["t[0, 0, 5]"] = t[0, 0, 5].shape
        shapes["h[1, :]"] = h[1, :].shape
        shapes["h[1, 2]"] = h[1, 2].shape
        out = nl.ndarray((16, 1), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t[:, 0, 5])
        return out

    a, h = rand(rng, (16, 4, 8)), rand(rng, (3, 6))
    got = k(a, h)
    assert shapes == {"t[0, :, :]": (1, 4, 8), "t[:, :, 0]": (16, 4), "t[:, 0, 5]": (16, 1),
                      "t[0, 0, 5]": (1, 1), "h[1, :]": (6,), "h[1, 2]": (1,)}
    np.testing.assert_array_equal(got, a[:, 0, 5:6])


def column_kernel(col):
    """out = x + bounds[:, col] broadcast along x's free dimension, the column taken as
    attention_cte takes its range_select bounds: b = bounds[:n, col]; b[:n, :1]."""
    @nkicc.jit
    def k(x, bounds):
        n = x.shape[0]
        bt = nl.load(bounds)
        b = bt[:n, col]
        res = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=nl.load(x), op0=nl.add, operand0=b[:n, :1])
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out
    return k


@pytest.mark.parametrize("col", [0, 3, -1])
def test_a_column_of_a_tile_is_a_column(rng, col):
    x, bounds = rand(rng, (96, 40)), rand(rng, (128, 5))
    got = run_both_simulators(column_kernel(col), x, bounds)
    np.testing.assert_allclose(got, x + bounds[:96, col:col + 1 or None], rtol=1e-6)


def test_more_indices_than_dimensions_is_still_an_error(rng):
    @nkicc.jit
    def k(a):
        t = nl.load(a)
        c = t[:, 1, 0]  # BAD
        out = nl.ndarray((8, 1), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=c)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (8, 4)))
    check_error(e, "E103", "# BAD", "test_indexing_forms.py")


def scatter_columns_kernel(t, kk, n_rows):
    """out[idx[i, j], :] = vals[i, j] for each column j of the [t, kk] index tile, through a
    vector_offset that is a [[kk, t], [1, 1], [1, 1]] view of that column (router_topk's form)."""
    @nkicc.jit
    def k(idx, vals):
        out = nl.ndarray((n_rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        zero = nl.ndarray((n_rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(zero, 0.0)
        nl.store(out, value=zero)
        ix = nl.load(idx)
        vs = nl.load(vals)
        for j in range(kk):
            column = ix.ap(pattern=[[kk, t], [1, 1], [1, 1]], offset=j)
            nisa.dma_copy(dst=out.ap([[1, t], [1, 1]], offset=0, vector_offset=column, indirect_dim=0),
                          src=vs.ap([[kk, t], [1, 1]], offset=j))
        return out
    return k


def test_vector_offset_takes_any_view_of_one_index_per_partition(rng):
    t, kk, n_rows = 32, 3, 128
    idx = rng.permutation(n_rows)[:t * kk].reshape(t, kk).astype(np.int32)
    vals = rand(rng, (t, kk))
    got = run_both_simulators(scatter_columns_kernel(t, kk, n_rows), idx, vals)
    want = np.zeros((n_rows, 1), np.float32)
    want[idx.reshape(-1), 0] = vals.reshape(-1)
    np.testing.assert_array_equal(got, want)


def test_vector_offset_of_several_indices_per_partition_is_an_error(rng):
    @nkicc.jit
    def k(idx, vals):
        out = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ix = nl.load(idx)
        nisa.dma_copy(dst=out.ap([[1, 8], [1, 1]], offset=0, vector_offset=ix, indirect_dim=0),  # TWO
                      src=nl.load(vals))
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        k(np.zeros((8, 2), np.int32), rand(rng, (8, 1)))
    check_error(e, "E103", "# TWO", "test_indexing_forms.py")


def guarded_ap_kernel(n_blocks, blocks):
    """out[:, j] = sum over the rows of x's block j, for the first `blocks` of n_blocks slots:
    each slot makes its .ap() view of x, as the NKI Library's output_projection_tkg makes its
    stationary view for every slot, and uses it only where the slot is in range."""
    @nkicc.jit
    def k(x):
        out = nl.ndarray((x.shape[0], n_blocks), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((x.shape[0], n_blocks), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(acc, 0.0)
        t = nl.load(x)
        for j in range(n_blocks):
            view = t.ap(pattern=[[x.shape[1], x.shape[0]], [1, 8]], offset=j * 8)  # VIEW
            if j < blocks:
                nisa.tensor_reduce(dst=acc[:, j:j + 1], op=nl.add, data=view, axis=1)  # USE
        nl.store(out, value=acc)
        return out
    return k


def test_an_ap_view_past_its_tensor_is_an_error_only_where_used(rng):
    x = rand(rng, (16, 24))  # three blocks of 8 columns
    got = run_both_simulators(guarded_ap_kernel(4, 3), x)
    want = np.zeros((16, 4), np.float32)
    want[:, :3] = x.reshape(16, 3, 8).sum(axis=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(nkicc.NkiccError) as e:
        guarded_ap_kernel(4, 4)(x)
    check_error(e, "E101", "# USE", "test_indexing_forms.py")
    assert "reaches elements" in e.value.message and "the view made at line" in e.value.message
