"""Conformance: nisa.bn_stats (count, mean, variance*count of the even and of
the odd elements of each partition) and nisa.bn_aggr (their merge into the mean
and population variance)."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, rand, rounded, run_rolled_and_unrolled
from tests.support.sim_helpers import run_both_simulators

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.bn_stats",
    "nisa.bn_aggr")


def stats_ref(x):
    """numpy: the six bn_stats numbers per partition (float64)."""
    x = x.reshape(x.shape[0], -1).astype(np.float64)
    out = []
    for half in (x[:, 0::2], x[:, 1::2]):
        if half.shape[1] == 0:
            out += [np.zeros(x.shape[0])] * 3
            continue
        out += [np.full(x.shape[0], half.shape[1]), half.mean(axis=1), half.var(axis=1) * half.shape[1]]
    return np.stack(out, axis=1)


def stats_kernel(out_dtype=nl.float32):
    @nkicc.jit
    def k(a):
        stats = nl.ndarray((a.shape[0], 6), dtype=out_dtype, buffer=nl.shared_hbm)
        mv = nl.ndarray((a.shape[0], 2), dtype=out_dtype, buffer=nl.shared_hbm)
        s = nl.ndarray((a.shape[0], 6), dtype=out_dtype, buffer=nl.sbuf)
        nisa.bn_stats(dst=s, data=nl.load(a))
        r = nl.ndarray((a.shape[0], 2), dtype=out_dtype, buffer=nl.sbuf)
        nisa.bn_aggr(dst=r, data=s)
        nl.store(stats, value=s)
        nl.store(mv, value=r)
        return stats, mv
    return k


@pytest.mark.parametrize("shape", [(128, 512), (1, 1), (1, 2), (7, 3), (128, 37), (16, 8, 64), (64, 4, 3, 5)])
def test_bn_stats_and_aggr_fp32(rng, shape):
    a = rand(rng, shape, lo=-3, hi=5)
    stats, mv = run_both_simulators(stats_kernel(), a)
    close(stats, stats_ref(a), np.float32, rtol=1e-5, atol=1e-4)
    flat = a.reshape(shape[0], -1).astype(np.float64)
    close(mv, np.stack([flat.mean(axis=1), flat.var(axis=1)], axis=1), np.float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("in_dt,out_dt", [(bf16, np.float32), (np.float16, np.float32), (np.float32, bf16),
                                          (bf16, bf16)])
def test_bn_stats_dtypes_fp32_inside(rng, in_dt, out_dt):
    a = rand(rng, (128, 300), in_dt, -2, 6)
    stats, mv = run_both_simulators(stats_kernel(out_dt), a)
    assert stats.dtype == np.dtype(out_dt)
    # fp32 arithmetic on the input as stored, one rounding to the destination
    np.testing.assert_allclose(np.asarray(stats, np.float32), rounded(stats_ref(a.astype(np.float32)), out_dt),
                               rtol=1e-2 if out_dt == bf16 else 1e-5, atol=1e-3)
    flat = a.astype(np.float64)
    want = np.stack([flat.mean(axis=1), flat.var(axis=1)], axis=1)
    np.testing.assert_allclose(np.asarray(mv, np.float32), rounded(want, out_dt),
                               rtol=1e-2 if out_dt == bf16 else 1e-5, atol=1e-3)


def test_bn_aggr_over_tiles_in_a_loop(rng):
    # the documented pattern for more than 512 elements: one bn_stats per 512-wide
    # piece, side by side in one stats tile, one bn_aggr (rolled == unrolled == numpy)
    @nkicc.jit
    def k(a):
        mv = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        n = a.shape[1] // 512
        stats = nl.ndarray((a.shape[0], 6 * n), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(n):
            nisa.bn_stats(dst=stats[:, nl.ds(6 * i, 6)], data=nl.load(a[:, nl.ds(512 * i, 512)]))
        r = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=r, data=stats)
        nl.store(mv, value=r)
        return mv

    a = rand(rng, (96, 2048), lo=-1, hi=9)
    got = run_rolled_and_unrolled(k, a)
    close(got, np.stack([a.astype(np.float64).mean(axis=1), a.astype(np.float64).var(axis=1)], axis=1),
          np.float32, rtol=1e-5, atol=1e-5)


def test_bn_aggr_uneven_pieces_and_empty_triples(rng):
    # triples of different counts merge exactly; a count-0 triple adds nothing
    x = rand(rng, (32, 41), lo=-4, hi=4)
    parts = [x[:, :5], x[:, 5:6], x[:, 6:41]]
    triples = [np.stack([np.full(32, p.shape[1]), p.mean(axis=1), p.var(axis=1) * p.shape[1]], axis=1)
               for p in parts]
    triples.append(np.stack([np.zeros(32), rand(rng, (32,)), np.zeros(32)], axis=1))  # count 0, any mean
    data = np.concatenate(triples, axis=1).astype(np.float32)

    @nkicc.jit
    def k(t):
        mv = nl.ndarray((t.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((t.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(r, nl.load(t))
        nl.store(mv, value=r)
        return mv

    got = run_both_simulators(k, data)
    close(got, np.stack([x.astype(np.float64).mean(axis=1), x.astype(np.float64).var(axis=1)], axis=1),
          np.float32, rtol=1e-5, atol=1e-5)


def _error_kernel(case):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], 6), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.load(a)
        s = nl.ndarray((a.shape[0], 6), dtype=nl.float32, buffer=nl.sbuf)
        if case == "too_wide":
            nisa.bn_stats(dst=s, data=d)  # MARK too_wide
        elif case == "dst6":
            nisa.bn_stats(dst=s[:, 0:5], data=d[:, 0:8])  # MARK dst6
        elif case == "partitions":
            nisa.bn_stats(dst=s[0:4, :], data=d[0:8, 0:8])  # MARK partitions
        elif case == "triples":
            r = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_aggr(dst=r, data=s[:, 0:5])  # MARK triples
        elif case == "aggr2":
            r = nl.ndarray((a.shape[0], 3), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_aggr(dst=r, data=s)  # MARK aggr2
        elif case == "hbm":
            nisa.bn_stats(dst=s, data=a[:, 0:8])  # MARK hbm
        nl.store(out, value=s)
        return out
    return k


@pytest.mark.parametrize("case,code", [("too_wide", "E130"), ("dst6", "E140"), ("partitions", "E140"),
                                       ("triples", "E140"), ("aggr2", "E140"), ("hbm", "E120")])
def test_bn_errors_one_line_at_the_kernel(rng, case, code):
    with pytest.raises(nkicc.NkiccError) as ei:
        nkicc.compile(_error_kernel(case), rand(rng, (16, 513)))
    check_error(ei, code, f"MARK {case}", "test_ops_stats.py")
