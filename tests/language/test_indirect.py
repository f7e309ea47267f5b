"""Indirect views: NkiTensor.indirect (tensor indirection, NeuronCore-v4: columns
of an on-chip tile at offsets read from an index tile, snake order over groups of
16 partitions, 32 on the Tensor Engine) and NkiTensor.vector_select (rows of an
HBM tensor at per-partition offsets). Results against numpy on random data,
through both simulators; errors at the kernel's line."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error, rand
from tests.support.sim_helpers import run_both_simulators

api = pytest.mark.api


def snake(index: np.ndarray, group: int, n: int) -> np.ndarray:
    """Offset i of an indirect view: index[i % group, i // group]."""
    return np.array([index[i % group, i // group] for i in range(n)])


def gather_kernel(n):
    @nkicc.jit
    def k(a, idx):
        t = nl.load(a)
        ix = nl.load(idx)
        out_t = nl.ndarray((a.shape[0], n), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out_t, src=t.indirect(ix, num_elem=n))
        out = nl.ndarray(out_t.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=out_t)
        return out
    return k


@api("nl.NkiTensor.indirect")
@pytest.mark.parametrize("n", [1, 17, 48])
def test_indirect_gather_columns(rng, trn3, n):
    a = rand(rng, (16, 40))
    idx = rng.integers(0, 40, (16, 3)).astype(np.int32)
    got = run_both_simulators(gather_kernel(n), a, idx)
    np.testing.assert_array_equal(got, a[:, snake(idx, 16, n)])


@api("nl.NkiTensor.indirect")
def test_indirect_scatter_columns_and_engine_inputs(rng, trn3):
    """A scatter (dst) and an elementwise input: the other columns keep their values."""
    a, b = rand(rng, (16, 30)), rand(rng, (16, 20))
    cols = rng.permutation(30)[:20]  # distinct: a scatter with repeats has no single answer
    idx = np.zeros((16, 2), np.int32)
    for i, c in enumerate(cols):
        idx[i % 16, i // 16] = c
    assert (snake(idx, 16, 20) == cols).all()

    @nkicc.jit
    def k(x, y, ix_in):
        t, u, ix = nl.load(x), nl.load(y), nl.load(ix_in)
        nisa.tensor_copy(dst=t.indirect(ix, num_elem=20), src=u)
        s = nl.ndarray((16, 20), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=s, data1=t.indirect(ix, num_elem=20), data2=u, op=nl.multiply)
        out, prod = nl.ndarray(x.shape, x.dtype, nl.shared_hbm), nl.ndarray((16, 20), x.dtype, nl.shared_hbm)
        nl.store(out, value=t)
        nl.store(prod, value=s)
        return out, prod

    out, prod = run_both_simulators(k, a, b, idx)
    want = a.copy()
    want[:, cols] = b
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(prod, b * b)


@api("nl.NkiTensor.indirect")
def test_indirect_moving_tile_on_the_tensor_engine(rng, trn3):
    """The Tensor Engine reads the offsets in groups of 32 partitions."""
    st, mv = rand(rng, (32, 8)), rand(rng, (32, 50))
    idx = rng.integers(0, 50, (32, 2)).astype(np.int32)

    @nkicc.jit
    def k(s_in, m_in, ix_in):
        s, m, ix = nl.load(s_in), nl.load(m_in), nl.load(ix_in)
        acc = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, s, m.indirect(ix))
        res = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray((8, 64), nl.float32, nl.shared_hbm)
        nl.store(out, value=res)
        return out

    got = run_both_simulators(k, st, mv, idx)
    np.testing.assert_allclose(got, st.T @ mv[:, snake(idx, 32, 64)], rtol=1e-5, atol=1e-5)


@api("nl.NkiTensor.indirect")
def test_indirect_errors(monkeypatch):
    a, idx = np.zeros((16, 40), np.float32), np.zeros((16, 3), np.int32)

    def kernel(make):
        @nkicc.jit
        def k(x, ix_in):
            t, ix = nl.load(x), nl.load(ix_in)
            out_t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
            make(t, ix, x, out_t)
            out = nl.ndarray((16, 8), nl.float32, nl.shared_hbm)
            nl.store(out, value=out_t)
            return out
        return k

    def copy(t, ix, x, o):
        nisa.tensor_copy(dst=o, src=t.indirect(ix, num_elem=8))  # MARK trn2

    with pytest.raises(nkicc.NkiccError) as e:
        kernel(copy)(a, idx)
    check_error(e, "E135", "# MARK trn2", "test_indirect.py")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    cases = {
        "hbm": (lambda t, ix, x, o: x.indirect(ix), "E120"),  # MARK hbm
        "float_index": (lambda t, ix, x, o: t.indirect(t[:, 0:3]), "E103"),  # MARK float_index
        "reslice": (lambda t, ix, x, o: t.indirect(ix)[:, 0:8], "E160"),  # MARK reslice
        "dma": (lambda t, ix, x, o: nisa.dma_copy(dst=o, src=t.indirect(ix, num_elem=8)), "E160"),  # MARK dma
        "many": (lambda t, ix, x, o: t.indirect(ix, num_elem=49), "E130"),  # MARK many
    }
    for name, (make, code) in cases.items():
        with pytest.raises(nkicc.NkiccError) as e:
            kernel(make)(a, idx)
        check_error(e, code, f"# MARK {name}", "test_indirect.py")
    bad = np.zeros((16, 3), np.int32)
    bad[5, 0] = 40  # offset number 5 runs past the 40 columns
    with pytest.raises(nkicc.NkiccError) as e:
        kernel(copy)(a, bad)
    assert e.value.code == "E170" and "number 5" in e.value.message


@api("nl.NkiTensor.vector_select")
@pytest.mark.parametrize("rows", [1, 7, 128])
def test_vector_select_gathers_rows(rng, rows):
    a = rand(rng, (64, 6, 5))
    idx = rng.integers(0, 64, (rows, 1)).astype(np.int32)

    @nkicc.jit
    def k(x, ix_in):
        ix = nl.load(ix_in)
        v = x.vector_select(0, ix)
        assert v.is_indirect() and v.shape == (rows, 6, 5)
        out = nl.ndarray(v.shape, x.dtype, nl.shared_hbm)
        nisa.dma_copy(dst=out, src=v)
        return out

    np.testing.assert_array_equal(run_both_simulators(k, a, idx), a[idx[:, 0]])
