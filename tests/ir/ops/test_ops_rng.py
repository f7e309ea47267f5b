"""Conformance: the random-number instructions (nisa.rng, rand2, dropout,
set_rng_seed, rand_get_state, rand_set_state) and nl.rand / nl.random_seed /
nl.dropout, through both simulators.

The oracle is the generator as docs/numerics.md ("Random numbers") describes
it, written here again in numpy (not imported from nkicc), so the bits are
checked exactly; statistical tests check that the stream looks uniform and
that lanes, seeds and calls draw different numbers."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error
from tests.support.sim_helpers import run_both_simulators

api = pytest.mark.api
M32 = 0xFFFFFFFF
WORDS = {"vector": 24, "gpsimd": 6}


# --- the documented generator, in numpy (uint64 arithmetic, masked to 32 bits) ---------

def mix(x):
    x = np.asarray(x, dtype=np.uint64) & M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def oracle_draw(state, n):
    """(bits [P, n] uint32, state after) for a [P, W] state."""
    state = np.asarray(state, dtype=np.uint64)
    lanes, words = state.shape
    h = mix(np.arange(lanes, dtype=np.uint64) * 0x9E3779B9 + 0x6A09E667)
    for k in range(words - 1):
        h = (mix(h ^ state[:, k]) + (k + 1) * 0x9E3779B9) & M32
    k1, k2 = h[:, None], mix(h ^ 0x5BD1E995)[:, None]
    c = state[:, words - 1][:, None]
    bits = mix((mix(((c + np.arange(n, dtype=np.uint64)) & M32) ^ k1) + k2) & M32)
    after = state.copy()
    after[:, words - 1] = (state[:, words - 1] + n) & M32
    return bits.astype(np.uint32), after.astype(np.uint32)


def oracle_seed(seed, words, lanes=128):
    key = mix((seed + 0x3C6EF372 * np.arange(1, words, dtype=np.uint64)) & M32)
    state = np.zeros((lanes, words), dtype=np.uint32)
    state[:, :words - 1] = key.astype(np.uint32)
    return state


def unit(bits):
    return (np.asarray(bits, np.uint32) >> 8).astype(np.float32) * np.float32(2.0 ** -24)


def zero_state(words, lanes=128):
    return np.zeros((lanes, words), dtype=np.uint32)


def seed_tile(value):
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(t, value)
    return t


DUMMY = np.zeros((1, 1), np.float32)


# --- nisa.rng --------------------------------------------------------------------------

def rng_kernel(shape, dtype, engine, seed=None):
    @nkicc.jit
    def k(x):
        out = nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
        if seed is not None:
            nisa.set_rng_seed(seed_tile(seed))
        nisa.rng(t, engine=engine)
        nl.store(out, t)
        return out
    return k


@api("nisa.rng")
@pytest.mark.parametrize("shape", [(128, 512), (1, 1), (7, 3), (16, 4, 5)])
@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.uint16, np.int16, np.uint8, np.int8])
def test_rng_low_bits_of_the_documented_stream(shape, dtype):
    got = run_both_simulators(rng_kernel(shape, dtype, nisa.engine.vector), DUMMY)
    n = int(np.prod(shape[1:]))
    bits, _ = oracle_draw(zero_state(24, shape[0]), n)
    want = bits.astype(dtype, casting="unsafe").reshape(shape)  # the least significant bits, two's complement
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


@api("nisa.rng")
def test_rng_engines_have_their_own_generators():
    vec = run_both_simulators(rng_kernel((64, 128), np.uint32, nisa.engine.vector), DUMMY)
    pool = run_both_simulators(rng_kernel((64, 128), np.uint32, nisa.engine.gpsimd), DUMMY)
    np.testing.assert_array_equal(pool, oracle_draw(zero_state(6, 64), 128)[0])
    assert (vec != pool).mean() > 0.99


@api("nisa.rng", "nisa.set_rng_seed")
@pytest.mark.parametrize("seed", [0, 42, -7, 2 ** 31 - 1])
def test_rng_seeded_matches_oracle_and_looks_uniform(seed):
    got = run_both_simulators(rng_kernel((128, 512), np.uint32, nisa.engine.vector, seed=seed), DUMMY)
    want = oracle_draw(oracle_seed(seed & M32, 24), 512)[0]
    np.testing.assert_array_equal(got, want)
    # statistics: every bit set about half the time, bytes uniform (chi-square), lanes uncorrelated
    bits = np.unpackbits(got.view(np.uint8)).reshape(-1, 32)
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.01)
    counts = np.bincount(got.view(np.uint8).ravel(), minlength=256)
    expected = got.size * 4 / 256
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 330  # 255 degrees of freedom: p ~ 0.001
    u = unit(got).astype(np.float64)
    corr = np.corrcoef(u[:64].ravel(), u[64:].ravel())[0, 1]
    assert abs(corr) < 0.02
    assert len(np.unique(got)) > got.size * 0.99  # 65536 draws from 2**32: almost no repeats


@api("nisa.set_rng_seed")
def test_seeds_give_different_streams_and_the_same_seed_the_same():
    a = run_both_simulators(rng_kernel((32, 64), np.uint32, nisa.engine.vector, seed=1), DUMMY)
    b = run_both_simulators(rng_kernel((32, 64), np.uint32, nisa.engine.vector, seed=2), DUMMY)
    a2 = run_both_simulators(rng_kernel((32, 64), np.uint32, nisa.engine.vector, seed=1), DUMMY)
    np.testing.assert_array_equal(a, a2)
    assert (a != b).mean() > 0.99


@api("nisa.rng")
def test_rng_calls_advance_the_counter_and_work_in_loops():
    @nkicc.jit
    def k(x):
        out = nl.ndarray((4, 16, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(t, engine=nisa.engine.gpsimd)
            nl.store(out[i], t)
        return out
    got = run_both_simulators(k, DUMMY)
    unrolled = run_both_simulators(k, DUMMY, unroll=True)
    np.testing.assert_array_equal(got, unrolled)
    state = zero_state(6, 16)
    for i in range(4):
        bits, state = oracle_draw(state, 8)
        np.testing.assert_array_equal(got[i], bits)


def test_unseeded_uint8_output_is_defined():
    # the generator's power-on state is defined: an output holding the integer poison value (4)
    # must not be reported as read from never-written memory
    got = run_both_simulators(rng_kernel((128, 256), np.uint8, nisa.engine.vector), DUMMY)
    assert (got == 4).any()


@api("nisa.rng")
def test_rng_errors():
    def make(dtype=nl.uint32, buffer=nl.sbuf, engine=nisa.engine.vector):
        @nkicc.jit
        def k(x):
            out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((8, 8), dtype=dtype, buffer=buffer)
            nisa.rng(t, engine=engine)  # RNG
            return out
        return k
    with pytest.raises(nisa.NkiValidationError) as e:
        make(dtype=nl.float32)(DUMMY)
    check_error(e, "E132", "# RNG", "test_ops_rng.py")
    with pytest.raises(nkicc.NkiccError) as e:
        make(buffer=nl.psum, engine=nisa.engine.gpsimd)(DUMMY)
    check_error(e, "E120", "# RNG", "test_ops_rng.py")
    with pytest.raises(nkicc.NkiccError) as e:
        make(engine=nisa.engine.scalar)(DUMMY)
    check_error(e, "E103", "# RNG", "test_ops_rng.py")


# --- nisa.rand2 ------------------------------------------------------------------------

@api("nisa.rand2")
@pytest.mark.parametrize("shape,dtype", [((128, 512), np.float32), ((1, 1), np.float32), ((5, 3, 7), np.float16),
                                         ((64, 100), "bfloat16"), ((32, 40), np.int32)])
def test_rand2_scalar_range(trn3, rng, shape, dtype):
    lo, hi = float(rng.uniform(-5, 0)), float(rng.uniform(1, 50))
    nl_dtype = nl.bfloat16 if dtype == "bfloat16" else dtype

    @nkicc.jit
    def k(x):
        out = nl.ndarray(shape, dtype=nl_dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(shape, dtype=nl_dtype, buffer=nl.sbuf)
        nisa.rand2(t, min=lo, max=hi)
        nl.store(out, t)
        return out
    got = run_both_simulators(k, DUMMY)
    bits, _ = oracle_draw(zero_state(24, shape[0]), int(np.prod(shape[1:])))
    want = (np.float32(lo) + (np.float32(hi) - np.float32(lo)) * unit(bits)).reshape(shape)
    if np.issubdtype(np.dtype(got.dtype), np.integer):
        want = np.rint(want)  # fp32 -> int rounds to nearest even (docs/numerics.md)
    tol = {np.dtype(np.float32): 1e-6, np.dtype(np.float16): 1e-3}.get(np.dtype(got.dtype), 1e-2)
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=tol, atol=tol * abs(hi))
    g = np.asarray(got, np.float64)
    slack = 0.5 if np.issubdtype(np.dtype(got.dtype), np.integer) else 1e-2 * max(abs(lo), abs(hi))
    assert g.min() >= lo - slack and g.max() <= hi + slack
    if g.size > 1000:
        assert abs(g.mean() - (lo + hi) / 2) < 0.02 * (hi - lo)


@api("nisa.rand2")
def test_rand2_per_partition_range(trn3, rng):
    lo = rng.uniform(-3, 0, (128, 1)).astype(np.float32)
    hi = lo + rng.uniform(0.5, 4, (128, 1)).astype(np.float32)

    @nkicc.jit
    def k(a, b):
        out = nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand2(t, nl.load(a), nl.load(b))
        nl.store(out, t)
        return out
    got = run_both_simulators(k, lo, hi)
    want = lo + (hi - lo) * unit(oracle_draw(zero_state(24), 300)[0])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.all(got >= lo) and np.all(got < hi)


@api("nisa.rand2")
def test_rand2_needs_min_below_max(trn3):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand2(t, 2.0, 1.0)  # BAD RANGE
        return out
    with pytest.raises(nisa.NkiValidationError) as e:
        k(DUMMY)
    check_error(e, "E103", "# BAD RANGE", "test_ops_rng.py")


# --- nisa.dropout ----------------------------------------------------------------------

@api("nisa.dropout")
@pytest.mark.parametrize("shape,dtype", [((128, 512), np.float32), ((1, 1), np.float32), ((16, 4, 9), np.int32),
                                         ((64, 64), np.float16)])
def test_dropout_scalar_prob(rng, shape, dtype):
    x = (rng.integers(1, 100, shape) if np.issubdtype(np.dtype(dtype), np.integer)
         else rng.uniform(0.5, 2, shape)).astype(dtype)
    prob = 0.3

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dropout(t, nl.load(a), prob)
        nl.store(out, t)
        return out
    got = run_both_simulators(k, x)
    keep = unit(oracle_draw(zero_state(24, shape[0]), int(np.prod(shape[1:])))[0]).reshape(shape) >= prob
    np.testing.assert_array_equal(got, np.where(keep, x, 0).astype(dtype))
    if x.size > 1000:
        assert abs((got == 0).mean() - prob) < 0.02


@api("nisa.dropout")
def test_dropout_per_partition_prob_and_edges(rng):
    x = rng.uniform(1, 2, (128, 256)).astype(np.float32)
    p = rng.uniform(0, 1, (128, 1)).astype(np.float32)
    p[0], p[1] = 0.0, 1.0  # keep everything, drop everything

    @nkicc.jit
    def k(a, q):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dropout(t, nl.load(a), nl.load(q))
        nl.store(out, t)
        return out
    got = run_both_simulators(k, x, p)
    keep = unit(oracle_draw(zero_state(24), 256)[0]) >= p
    np.testing.assert_array_equal(got, np.where(keep, x, 0))
    np.testing.assert_array_equal(got[0], x[0])
    assert not got[1].any()
    rates = (got == 0).mean(axis=1)
    assert np.abs(rates[2:] - p[2:, 0]).max() < 0.15


@api("nisa.dropout")
def test_dropout_errors():
    def make(data_dtype, dst_dtype, prob_dtype=None, prob=0.5):
        @nkicc.jit
        def k(x):
            out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            d = nl.ndarray((8, 8), dtype=data_dtype, buffer=nl.sbuf)
            nisa.memset(d, 1)
            t = nl.ndarray((8, 8), dtype=dst_dtype, buffer=nl.sbuf)
            q = prob
            if prob_dtype is not None:
                q = nl.ndarray((8, 1), dtype=prob_dtype, buffer=nl.sbuf)
                nisa.memset(q, 0)
            nisa.dropout(t, d, q)  # DROPOUT
            return out
        return k
    for args, code in [((nl.float32, nl.float16), "E132"), ((nl.int32, nl.int32, nl.float16), "E132"),
                       ((nl.float32, nl.float32, nl.int32), "E132"), ((nl.float32, nl.float32, None, 1.5), "E103")]:
        with pytest.raises(nisa.NkiValidationError) as e:
            make(*args)(DUMMY)
        check_error(e, code, "# DROPOUT", "test_ops_rng.py")


# --- state save and restore ------------------------------------------------------------

@api("nisa.rand_get_state", "nisa.rand_set_state")
@pytest.mark.parametrize("engine", ["vector", "gpsimd"])
def test_state_round_trip_repeats_the_stream(rng, trn3, engine):
    words = WORDS[engine]
    eng = getattr(nisa.engine, engine)
    seeds = rng.integers(0, 2 ** 32, (32, words), dtype=np.uint64).astype(np.uint32)

    @nkicc.jit
    def k(s):
        first = nl.ndarray((32, 64), dtype=nl.uint32, buffer=nl.shared_hbm)
        again = nl.ndarray((32, 64), dtype=nl.uint32, buffer=nl.shared_hbm)
        saved_out = nl.ndarray((32, words), dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.rand_set_state(nl.load(s), engine=eng)
        saved = nl.ndarray((32, words), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(saved, engine=eng)
        a = nl.ndarray((32, 64), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(a, engine=eng)
        nisa.rand_set_state(saved, engine=eng)
        b = nl.ndarray((32, 64), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(b, engine=eng)
        nl.store(first, a)
        nl.store(again, b)
        nl.store(saved_out, saved)
        return first, again, saved_out
    first, again, saved = run_both_simulators(k, seeds)
    np.testing.assert_array_equal(saved, seeds)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, oracle_draw(seeds, 64)[0])


@api("nisa.rand_get_state")
def test_get_state_after_draws_holds_the_counter(trn3):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((4, 24), dtype=nl.uint32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 10), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.set_rng_seed(seed_tile(9))
        nisa.rng(t)
        nisa.rng(t)
        s = nl.ndarray((4, 24), dtype=nl.uint32, buffer=nl.psum)
        nisa.rand_get_state(s, engine=nisa.engine.vector)  # the Vector Engine's state may go to PSUM
        nl.store(out, nl.copy(s))
        return out
    got = run_both_simulators(k, DUMMY)
    want = oracle_seed(9, 24, 4)
    want[:, 23] = 20
    np.testing.assert_array_equal(got, want)


@api("nisa.rand_set_state", "nisa.rand_get_state")
def test_state_errors(trn3):
    def make(words, dtype=nl.uint32, engine=nisa.engine.gpsimd, buffer=nl.sbuf, get=False):
        @nkicc.jit
        def k(x):
            out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.ndarray((8, words), dtype=dtype, buffer=buffer)
            if get:
                nisa.rand_get_state(s, engine=engine)  # GET STATE
            else:
                nisa.memset(s, 0)
                nisa.rand_set_state(s, engine=engine)  # SET STATE
            return out
        return k
    for kwargs, code in [(dict(words=24), "E140"), (dict(words=6, dtype=nl.int32), "E132"),
                         (dict(words=6, engine=nisa.engine.vector), "E140"),
                         (dict(words=6, buffer=nl.psum, get=True), "E120"),
                         (dict(words=6, buffer=nl.psum), "E120")]:
        with pytest.raises(nisa.NkiValidationError) as e:
            make(**kwargs)(DUMMY)
        check_error(e, code, "# GET STATE" if kwargs.get("get") else "# SET STATE", "test_ops_rng.py")


@api("nisa.set_rng_seed")
def test_set_rng_seed_takes_one_32_bit_value():
    @nkicc.jit
    def k(x):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(s, 1)
        nisa.set_rng_seed(s)  # SEED
        return out
    with pytest.raises(nisa.NkiValidationError) as e:
        k(DUMMY)
    check_error(e, "E140", "# SEED", "test_ops_rng.py")


# --- nl.rand, nl.random_seed, nl.dropout -----------------------------------------------

@api("nl.rand", "nl.random_seed")
def test_nl_rand_is_rand2_on_zero_one_and_seeded(trn3):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.random_seed(nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf))
        nl.store(out, nl.rand((128, 512), dtype=nl.float32))
        return out
    got = run_both_simulators(k, DUMMY)
    np.testing.assert_array_equal(got, unit(oracle_draw(oracle_seed(42, 24), 512)[0]))
    assert got.min() >= 0 and got.max() < 1 and abs(got.mean() - 0.5) < 0.01
    hist = np.histogram(got, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(hist / got.size - 0.1) < 0.01)


@api("nl.random_seed", "nl.dropout")
def test_nl_dropout_with_int_seed_and_cast(rng):
    x = rng.uniform(1, 3, (64, 200)).astype(np.float32)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.random_seed(7)
        nl.store(out, nl.dropout(nl.load(a), 0.25, dtype=nl.bfloat16))
        return out
    got = run_both_simulators(k, x)
    keep = unit(oracle_draw(oracle_seed(7, 24, 64), 200)[0]) >= 0.25
    np.testing.assert_array_equal(np.asarray(got, np.float32),
                                  np.where(keep, x, 0).astype(got.dtype).astype(np.float32))
    assert abs((np.asarray(got, np.float32) == 0).mean() - 0.25) < 0.02


def test_nl_rand_on_hbm_is_refused():
    @nkicc.jit
    def k(x):
        out = nl.rand((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)  # HBM RAND
        return out
    with pytest.raises(nkicc.NkiccError) as e:
        k(DUMMY)
    check_error(e, "E120", "# HBM RAND", "test_ops_rng.py")
