"""Conformance: DMA instructions beyond dma_copy (dma_transpose, dma_compute)
against numpy on random data."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, rand

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.dma_transpose",
    "nisa.dma_compute")


@pytest.mark.parametrize("shape", [(16, 96), (128, 128), (3, 40)])
def test_dma_transpose_2d_from_hbm(rng, shape):
    a = rand(rng, shape).astype(bf16)

    @nkicc.jit
    def k(a):
        out = nl.ndarray((shape[1], shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((shape[1], shape[0]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    close(k(a), a.astype(np.float32).T, bf16)


def test_dma_transpose_4d_access_patterns(rng):
    """The library's form: 4-d .ap views, permutation [3, 1, 2, 0]."""
    K, M, TK = 64, 32, 16
    a = rand(rng, (M, K)).astype(bf16)

    @nkicc.jit
    def k(a):
        out = nl.ndarray((TK, M), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((TK, M), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t.ap(pattern=[[M, TK], [1, 1], [1, 1], [1, M]]),
                           src=a.ap(pattern=[[K, M], [1, 1], [1, 1], [1, TK]], offset=8))
        nisa.dma_copy(dst=out, src=t)
        return out

    close(k(a), a.astype(np.float32)[:, 8:8 + TK].T, bf16)


def test_dma_transpose_3d_and_axes(rng):
    a = rand(rng, (4, 8, 16)).astype(np.float16)

    @nkicc.jit
    def k(a):
        o1 = nl.ndarray((16, 8, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((8, 4, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        t1 = nl.ndarray((16, 8, 4), dtype=a.dtype, buffer=nl.sbuf)
        t2 = nl.ndarray((8, 4, 16), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t1, src=a)
        nisa.dma_transpose(dst=t2, src=a, axes=(1, 0, 2))
        nisa.dma_copy(dst=o1, src=t1)
        nisa.dma_copy(dst=o2, src=t2)
        return o1, o2

    o1, o2 = k(a)
    close(o1, np.transpose(a.astype(np.float32), (2, 1, 0)), np.float16)
    close(o2, np.transpose(a.astype(np.float32), (1, 0, 2)), np.float16)


def test_dma_compute_sums_sources_in_fp32(rng):
    a, b, c = rand(rng, (64, 48)), rand(rng, (64, 48)), rand(rng, (64, 48)).astype(bf16)

    @nkicc.jit
    def k(a, b, c):
        out = nl.ndarray((64, 48), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(b)
        acc = nl.ndarray((64, 48), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(dst=acc, srcs=[a, t, c], reduce_op=nl.add)
        nisa.dma_compute(dst=out, srcs=[acc, a], reduce_op=nl.add, scales=[1.0, 1.0])
        return out

    close(k(a, b, c), 2 * a + b + c.astype(np.float32))


def test_err_dma_rules(rng):
    a = rand(rng, (4, 3, 200)).astype(bf16)
    f = rand(rng, (16, 8))

    @nkicc.jit
    def wide(a):
        t = nl.ndarray((100, 3, 8), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)  # MARK-wide
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        wide(a)
    check_error(e, "E130", "MARK-wide", "test_ops_dma.py")

    @nkicc.jit
    def scaled(f):
        t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(dst=t, srcs=[f, f], reduce_op=nl.add, scales=[2.0, 1.0])  # MARK-scale
        return f

    with pytest.raises(nkicc.NkiccError) as e:
        scaled(f)
    check_error(e, "E160", "MARK-scale", "test_ops_dma.py")

    @nkicc.jit
    def rmw(f):
        t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=f, dst_rmw_op=nl.add)  # MARK-rmw
        return f

    with pytest.raises(nkicc.NkiccError) as e:
        rmw(f)
    check_error(e, "E160", "MARK-rmw", "test_ops_dma.py")
