"""Numerics as the hardware rounds (docs/numerics.md): every conversion pair
against an oracle written here from the formats' definitions (the nearest
value found by enumerating a format's bit patterns; integers by explicit floor
arithmetic), through real kernels on both simulators; the NKI 0.6 dtypes
through memory; NKI_PRECISE_FP."""
import functools

import ml_dtypes
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
import nkicc.language.collectives as cc
from nkicc.ir import NkiccError
from nkicc.ir.dtypes import DTYPES, PACKED_NAMES
from nkicc.ir import numerics
from nkicc.specs import TensorSpec

SIMULATORS = ("machine", "reference")
SCALAR_NAMES = [n for n in DTYPES if n not in PACKED_NAMES]

# per float format: (bits, signed, what overflow gives, how a tie rounds)
FORMATS = {
    "float16": (16, True, "inf", "even"), "bfloat16": (16, True, "inf", "even"),
    "float8_e4m3": (8, True, "inf", "even"), "float8_e5m2": (8, True, "inf", "even"),
    "float8_e4m3fn": (8, True, "max", "even"), "float4_e2m1fn": (4, True, "max", "even"),
    "float8_e8m0fnu": (8, False, "nan", "up"),
}


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else nkicc.ir.dtypes.storage(name)


# --- the oracle ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def positive_grid(name):
    """(values ascending, their codes) of every finite non-negative value of a
    float format, from its bit patterns (ml_dtypes only decodes them here)."""
    bits, signed, _, _ = FORMATS[name]
    n = 2 ** (bits - 1) if signed else 2 ** bits
    raw = np.arange(n, dtype=np.uint16 if bits == 16 else np.uint8)
    values = raw.view(np_dtype(name)).astype(np.float64)
    keep = np.isfinite(values)
    values, codes = values[keep], raw[keep].astype(np.int64)
    assert np.all(np.diff(values) > 0)
    return values, codes


def round_to_format(x, name):
    """x (float64 holding float32 values) rounded into float format `name`: the
    nearest grid value; a tie goes to the even code (or up, for e8m0); past
    the largest value: inf, the largest value (saturation) or NaN."""
    bits, signed, overflow, tie = FORMATS[name]
    values, codes = positive_grid(name)
    top = values[-1] * 2 if name == "float8_e8m0fnu" else values[-1] + (values[-1] - values[-2])
    grid = np.append(values, top)          # the next value the format would have, to decide overflow
    gcodes = np.append(codes, codes[-1] + 1)
    m = np.abs(x)
    idx = np.clip(np.searchsorted(grid, m), 1, grid.size - 1)
    lo, hi = grid[idx - 1], grid[idx]
    pick_hi = (hi - m) < (m - lo)
    tied = (hi - m) == (m - lo)
    pick_hi |= tied & ((gcodes[idx] % 2 == 0) if tie == "even" else True)
    chosen = np.where(pick_hi, idx, idx - 1)
    chosen = np.where(m <= grid[0], 0, chosen)
    out = grid[np.minimum(chosen, values.size - 1)]
    over = (chosen == grid.size - 1) | (m > top)
    big = {"inf": np.inf, "max": values[-1], "nan": np.nan}[overflow]
    out = np.where(over, big, out)
    if signed:
        out = np.where(np.signbit(x), -out, out)
    else:  # e8m0: a positive power of two; zero and negatives are NaN
        out = np.where(x > 0, out, np.nan)
    if name == "float8_e4m3fn":
        out = np.where(np.isinf(x), np.sign(x) * values[-1], out)
    nan_to = 0.0 if name == "float4_e2m1fn" else np.nan
    return np.where(np.isnan(x), nan_to, out)


def round_to_int(x, name):
    """x (float64) to an integer dtype: nearest, ties to even, saturating, NaN -> 0."""
    info = np.iinfo(np.dtype(name))
    f = np.floor(x)
    frac = x - f
    up = (frac > 0.5) | ((frac == 0.5) & (np.mod(f, 2) == 1))
    r = np.where(up, f + 1, f)
    r = np.where(np.isnan(x), 0, r)
    return np.clip(r, info.min, info.max) + 0.0  # integers have no -0


def oracle(src_values, src, dst):
    """(float64 values, signed-zero aware) that `src_values` of dtype src become in dst."""
    if DTYPES[src].kind in ("int", "uint", "bool"):
        ints = src_values.astype(np.int64)
        if DTYPES[dst].kind in ("int", "uint"):
            info = np.iinfo(np.dtype(dst))
            return np.clip(ints, info.min, info.max).astype(np.float64)
        if dst == "bool":
            return (np.clip(ints, 0, 255) != 0).astype(np.float64)
        x = ints.astype(np.float64).astype(np.float32).astype(np.float64)  # an engine holds an fp32
    else:
        x = src_values.astype(np.float64)
    if DTYPES[dst].kind in ("int", "uint"):
        return round_to_int(x, dst)
    if dst == "bool":
        return (round_to_int(x, "uint8") != 0).astype(np.float64)
    if dst in ("float32", "tfloat32"):
        return x
    return round_to_format(x, dst)


# --- the data: random, with the cases that matter -----------------------------------------

def sample(rng, src, dst, n=3000):
    """Values of dtype src: random bit patterns, values around dst's grid or
    range (exact ties included), and the special values."""
    dt = np_dtype(src)
    if DTYPES[src].kind == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if DTYPES[src].kind in ("int", "uint"):
        info = np.iinfo(dt)
        parts = [rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64)]
        if DTYPES[dst].kind in ("int", "uint"):
            dinfo = np.iinfo(np.dtype(dst))
            parts.append(rng.integers(dinfo.min - 3, dinfo.max + 3, n, endpoint=True, dtype=np.int64))
        # 2^30 + 2^22 + 1: fp32 first makes it a bf16 tie (-> 2^30); rounded once it would be 2^30 + 2^23
        parts.append(np.array([0, 1, -1, info.min, info.max, 2 ** 24 + 1, -(2 ** 24) - 1, 255, 256,
                               2 ** 30 + 2 ** 22 + 1]))
        x = np.concatenate(parts)
        return np.clip(x, info.min, info.max).astype(dt)
    raw_bits = np.dtype(f"u{dt.itemsize}")
    bits = rng.integers(0, 2 ** (8 * dt.itemsize), n, dtype=np.uint64).astype(raw_bits)
    if src == "float4_e2m1fn":
        bits &= 0xF
    parts = [bits.view(dt).astype(np.float64)]
    if dst in FORMATS:
        values, _ = positive_grid(dst)
        i = rng.integers(0, values.size - 1, n)
        mids = (values[i] + values[i + 1]) / 2
        near = values[i] * (1 + rng.uniform(-0.2, 0.2, n))
        beyond = values[-1] * rng.uniform(0.9, 3.0, n)
        sign = rng.choice([-1.0, 1.0], n)
        parts += [sign * mids, sign * near, sign * beyond]
    elif DTYPES[dst].kind in ("int", "uint"):
        dinfo = np.iinfo(np.dtype(dst))
        span = float(dinfo.max) - float(dinfo.min)
        k = rng.integers(-40, 40, n)
        parts += [k + 0.5, rng.uniform(dinfo.min - 0.1 * span, dinfo.max + 0.1 * span, n)]
    else:
        parts.append(rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n))
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.5, 3.5, -2.5, -3.7, 1e10, -1e10, 0.5, -0.5]))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.concatenate(parts).astype(np.float32).astype(dt)


def assert_same(got, want, what):
    got = np.asarray(got).astype(np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    equal = (got == want) & (np.signbit(got) == np.signbit(want))
    bad = ~(both_nan | equal)
    assert not bad.any(), f"{what}: {int(bad.sum())} wrong, e.g. {np.flatnonzero(bad)[:5]} got " \
                          f"{got[bad][:5]} want {want[bad][:5]}"


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN and inf are data here


@pytest.mark.parametrize("dst", SCALAR_NAMES)
def test_every_conversion_pair_matches_the_oracle(rng, dst):
    for src in SCALAR_NAMES:
        x = sample(rng, src, dst)
        got = numerics.convert(x, dst)
        assert got.dtype == nkicc.ir.dtypes.storage(dst), (src, dst, got.dtype)
        assert_same(got, oracle(x, src, dst), f"{src} -> {dst}")
        # the simulators' path: the converter of the numpy storage dtype
        assert_same(numerics.converter(np_dtype(dst))(x), oracle(x, src, dst), f"{src} -> {dst} (store)")


@pytest.mark.parametrize("src,dst", [("float32", "uint8"), ("float32", "int32"), ("int32", "int8")])
def test_a_large_conversion_to_integers_matches_the_oracle(rng, src, dst):
    """Past numerics._INT_CHUNK elements an integer conversion goes a piece at a time (the
    library suite's 335 M-element masks ran out of memory in its float64 temporaries); the
    values are the oracle's, element for element, on either side of every piece's edge."""
    n = 5 * (numerics._INT_CHUNK * 2 // 5 + 12345)
    x = np.tile(sample(rng, src, dst), n // 1000 + 1)[:n]
    rng.shuffle(x)
    got = numerics.convert(x.reshape(-1, 5), dst)
    assert got.shape == (n // 5, 5) and got.dtype == np.dtype(dst)
    assert_same(got.reshape(-1), oracle(x, src, dst), f"{src} -> {dst}, {n} elements")


def test_issue_values_and_named_rules():
    x = np.array([2.5, 3.5, -2.5, -3.7, 1e10, -1e10, np.nan, np.inf], dtype=np.float32)
    assert numerics.convert(x, "int32").tolist() == [2, 4, -2, -4, 2147483647, -2147483648, 0, 2147483647]
    assert numerics.convert(x, "uint8").tolist() == [2, 4, 0, 0, 255, 0, 0, 255]
    # downcasts past the range: inf for IEEE-style formats, saturation where the format has no inf
    big = np.array([1e6, -1e6, -np.finfo(np.float32).max], dtype=np.float32)
    assert numerics.convert(big, "bfloat16").astype(np.float32).tolist()[2] == -np.inf
    assert numerics.convert(big, "float8_e4m3").astype(np.float32).tolist() == [np.inf, -np.inf, -np.inf]
    assert numerics.convert(big, "float8_e4m3fn").astype(np.float32).tolist() == [448, -448, -448]
    assert numerics.convert(big, "float4_e2m1fn").astype(np.float32).tolist() == [6, -6, -6]
    assert np.isnan(numerics.convert(np.float32([0.0, -1.0]), "float8_e8m0fnu").astype(np.float32)).all()
    assert numerics.convert(np.float32([3.0, 1e-40]), "float8_e8m0fnu").astype(np.float64).tolist() == [4.0, 2.0 ** -127]
    # float64 values (iota's) go to integers directly, to narrow floats through fp32 as an engine does
    assert numerics.convert(np.float64([2 ** 24 + 1]), "int32").tolist() == [2 ** 24 + 1]
    assert numerics.convert(np.float64([1 + 2 ** -8 + 2 ** -40]), "bfloat16").astype(np.float64).tolist() == [1.0]
    assert numerics.convert(np.int32([2 ** 30 + 2 ** 22 + 1]), "bfloat16").astype(np.float64).tolist() == [2.0 ** 30]


# --- packed MX types ----------------------------------------------------------------------

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # e2m1 codes 0..7 (the format's definition)


@pytest.mark.api("nl.float8_e5m2_x4", "nl.float8_e4m3fn_x4", "nl.float4_e2m1fn_x4")
@pytest.mark.parametrize("name", PACKED_NAMES)
def test_pack_unpack(rng, name):
    d = DTYPES[name]
    x = rng.uniform(-8, 8, (16, 4 * 5)).astype(np.float32)
    packed = numerics.pack(x, name)
    assert packed.shape == (16, 5) and packed.dtype.itemsize == d.itemsize
    elem = oracle(x.astype(np.float64).reshape(-1), "float32", d.element)
    # lane i of element j holds value 4j+i, in the low bits first
    width = 8 * d.itemsize // 4
    lanes = [(packed.astype(np.uint64) >> np.uint64(width * i)) & np.uint64((1 << width) - 1) for i in range(4)]
    codes = np.stack(lanes, -1).reshape(-1).astype(np.uint8)
    if d.element == "float4_e2m1fn":
        decoded = np.where(codes & 8, -1.0, 1.0) * np.array(FP4_VALUES)[codes & 7]
    else:
        decoded = codes.view(np_dtype(d.element)).astype(np.float64)
    assert_same(decoded, elem, name)
    assert_same(numerics.unpack(packed, name).reshape(-1), elem, name + " unpack")
    assert_same(numerics.convert(x, name), packed.astype(np.float64), name + " convert")


# --- through kernels, on both simulators --------------------------------------------------

def copy_into(dst_dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        c = nl.ndarray(a.shape, dtype=dst_dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t)
        nisa.dma_copy(dst=out, src=c)
        return out
    return k


def run_on(kernel, simulator, *arrays):
    c = nkicc.compile(kernel, *arrays)
    outs, _ = c.simulate(dict(zip(c.ir.args, arrays)), simulator=simulator)
    return outs[c.ir.outputs[0]]


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_fp32_to_int32_rounds_to_nearest_even_and_saturates(rng, simulator):
    a = rng.uniform(-1000, 1000, (128, 40)).astype(np.float32)
    a[:, :10] = rng.integers(-1000, 1000, (128, 10)) + 0.5           # exact ties
    a[0, :6] = [2.5, 3.5, -2.5, -3.7, 1e10, -1e10]
    got = run_on(copy_into(nl.int32), simulator, a)
    assert got.dtype == np.int32
    assert got[0, :6].tolist() == [2, 4, -2, -4, 2147483647, -2147483648]
    np.testing.assert_array_equal(got, round_to_int(a.astype(np.float64), "int32"))


@pytest.mark.api("nl.float8_e4m3fn", "nl.float8_e8m0fnu")
@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("dst", [n for n in SCALAR_NAMES if n not in ("float32", "tfloat32")])
def test_tensor_copy_converts_as_the_oracle(rng, simulator, dst):
    x = sample(rng, "float32", dst, n=128 * 8)
    a = np.resize(x, 128 * -(-x.size // 128)).reshape(128, -1)  # every sample, the first ones repeated
    got = run_on(copy_into(dst), simulator, a)
    assert got.dtype == nkicc.ir.dtypes.storage(dst)
    assert_same(got.reshape(-1), oracle(a.reshape(-1), "float32", dst), f"float32 -> {dst} ({simulator})")


# --- the NKI 0.6 dtypes: names, specs, itemsize, memory -----------------------------------

@pytest.mark.parametrize("name", list(DTYPES))
def test_dtype_is_an_nl_name_a_spec_and_memory(rng, name, monkeypatch):
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    public = getattr(nl, name if name != "bool" else "bool_")
    assert nl.dtypes.dtype_name(public) == name
    spec = TensorSpec.parse(f"{name}[128,6]")
    assert spec.dtype == name

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        assert t.itemsize == DTYPES[name].itemsize and nl.dtypes.dtype_name(t.dtype) == name
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    store = nkicc.ir.dtypes.storage(name)
    raw = rng.integers(0, 2 ** (8 * store.itemsize), (128, 6), dtype=np.uint64)
    a = raw.astype(f"u{store.itemsize}").view(store) if store != np.bool_ else raw % 2 == 1
    c = nkicc.compile(k, spec)
    for simulator in SIMULATORS:
        outs, _ = c.simulate({"a": a}, simulator=simulator)
        got = outs[c.ir.outputs[0]]
        assert got.dtype == store
        np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8), err_msg=f"{name} {simulator}")


def test_nl_bool_and_float8_e4m3_variants_are_distinct():
    assert nl.bool is nl.bool_
    assert np.dtype(nl.float8_e4m3) == np.dtype(ml_dtypes.float8_e4m3)        # IEEE-style, max 240
    assert np.dtype(nl.float8_e4m3fn) == np.dtype(ml_dtypes.float8_e4m3fn)    # OCP, max 448
    assert float(ml_dtypes.finfo(nl.float8_e4m3).max) == 240.0
    assert nl.float8_e4m3fn_x4.name == "float8_e4m3fn_x4" and nl.dtypes.itemsize("float4_e2m1fn_x4") == 2


# --- NKI_PRECISE_FP -----------------------------------------------------------------------

def chain(dt):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray((a.shape[1], a.shape[1]), dtype=dt, buffer=nl.shared_hbm)
        ta = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
        tb = nl.ndarray(b.shape, dtype=dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        p = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=p, data1=ta, data2=tb, op=nl.multiply)
        e = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
        nisa.activation(dst=e, data=p, op=nl.exp, scale=0.37)
        s = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=s, data=e, op0=nl.add, operand0=1.0 / 3.0, op1=nl.multiply, operand1=2.9)
        ps = nl.ndarray((a.shape[1], a.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=ta)           # through PSUM: s.T @ a
        m = nl.ndarray(ps.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_copy(dst=m, src=ps)
        nisa.dma_copy(dst=out, src=m)
        return out
    return k


@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("low", ["bfloat16", "float8_e5m2"])
def test_low_precision_kernel_with_precise_fp_off_equals_its_fp32_run(rng, monkeypatch, simulator, low):
    lowdt = np_dtype(low)
    a = rng.uniform(-2, 2, (128, 48)).astype(lowdt)
    b = rng.uniform(-2, 2, (128, 48)).astype(lowdt)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    fp32 = run_on(chain(nl.float32), simulator, a32, b32)
    kernel = chain(getattr(nl, low))
    precise = run_on(kernel, simulator, a, b)
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    loose = run_on(kernel, simulator, a, b)
    assert loose.dtype == np.float32 and precise.dtype == lowdt
    np.testing.assert_array_equal(loose, fp32)
    assert (precise.astype(np.float32) != fp32).mean() > 0.5   # precise mode does round


def test_precise_fp_is_read_when_the_simulator_is_made(monkeypatch):
    monkeypatch.setenv("NKI_PRECISE_FP", "off")
    assert numerics.precise_from_env() is False
    monkeypatch.setenv("NKI_PRECISE_FP", "1")
    assert numerics.precise_from_env() is True
    monkeypatch.setenv("NKI_PRECISE_FP", "maybe")
    with pytest.raises(NkiccError) as e:
        numerics.precise_from_env()
    assert e.value.code == "E201" and "NKI_PRECISE_FP" in str(e.value)


def test_precise_fp_is_classified_for_the_cache():
    from nkicc.cache.env import ENV, NEUTRAL
    assert ENV["NKI_PRECISE_FP"][0] == NEUTRAL   # simulation only: the cache holds compiled programs


@pytest.mark.parametrize("name", list(DTYPES))
def test_random_inputs_of_every_dtype(rng, name):
    # what `nkicc simulate --inputs random` and --verify-each feed a kernel: finite, varied, in storage
    x = numerics.random_values(rng, name, (64, 8))
    assert x.dtype == nkicc.ir.dtypes.storage(name) and x.shape == (64, 8)
    values = numerics.unpack(x, name) if name in PACKED_NAMES else x
    values = values.astype(np.float64)
    assert np.isfinite(values).all() and np.unique(values).size > 1


def test_precise_fp_off_keeps_the_machine_layout_and_timing(rng, monkeypatch):
    # float32 storage is modelled in a memory `scale` times larger: the same addresses, overlaps, times
    a = rng.uniform(-2, 2, (128, 48)).astype(ml_dtypes.float8_e5m2)
    b = rng.uniform(-2, 2, (128, 48)).astype(ml_dtypes.float8_e5m2)
    c = nkicc.compile(chain(nl.float8_e5m2), a, b)
    reports = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("NKI_PRECISE_FP", flag)
        _, reports[flag] = c.simulate({"a": a, "b": b}, simulator="machine", timing=True)
    assert reports["1"].total_ns == reports["0"].total_ns > 0
    assert reports["1"].executed == reports["0"].executed
    sim = nkicc.simulator.MachineSimulator(c.ir, c.target_spec or nkicc.plugins.targets.TRN2, precise=False)
    assert sim.scale == 4 and sim.tensors[c.ir.outputs[0]].dtype == np.float32


# --- NKI_PRECISE_FP across ranks and cores: every simulator and shared array holds the same ---

@nkicc.jit
def _exp_swap(x):
    """Two cores: each exponentiates its half, swaps it with the other, writes to its half."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    other = 1 - pid
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    e = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=e, data=mine, op=nl.exp, scale=0.37)
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=e, dst=theirs, send_to_rank=other, recv_from_rank=other, pipe_id=0)
    nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


@nkicc.jit
def _all_reduce_exp(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    e = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=e, data=t, op=nl.exp, scale=0.61)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    cc.all_reduce(srcs=[e], dsts=[r], replica_group=None, op=nl.add)
    nl.store(out, value=r)
    return out


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_precise_fp_off_on_cores_and_ranks_equals_fp32(rng, monkeypatch, simulator):
    x = rng.uniform(-2, 2, (128, 32)).astype(ml_dtypes.bfloat16)
    xs = [rng.uniform(-2, 2, (32, 16)).astype(ml_dtypes.bfloat16) for _ in range(4)]
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    core32 = _exp_swap[2].compile(x.astype(np.float32)).simulate({"x": x.astype(np.float32)}, simulator=simulator)[0]
    ranks32 = nkicc.run_ranks(_all_reduce_exp, 4, [a.astype(np.float32) for a in xs], simulator=simulator)
    precise = nkicc.run_ranks(_all_reduce_exp, 4, xs, simulator=simulator)
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    ck = _exp_swap[2].compile(x)
    cores = ck.simulate({"x": x}, simulator=simulator)[0]
    loose = nkicc.run_ranks(_all_reduce_exp, 4, xs, simulator=simulator)
    got = cores[ck.ir.outputs[0]]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, list(core32.values())[0])
    for lo, want, p in zip(loose, ranks32, precise):
        assert lo.dtype == np.float32 and p.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(lo, want)
        assert (p.astype(np.float32) != want).any()


# --- bfloat16's fast conversions: the same bits as ml_dtypes ------------------------------------

def test_bfloat16_widens_exactly_for_every_pattern():
    every = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    expect = every.astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(numerics.bf16_to_f32(every).view(np.uint32), expect)
    strided = every.reshape(256, 256)[:, ::3]  # a view the simulator reads (not contiguous)
    np.testing.assert_array_equal(numerics.bf16_to_f32(strided).view(np.uint32),
                                  strided.astype(np.float32).view(np.uint32))


def test_bfloat16_narrows_as_ml_dtypes_does(rng):
    """Random float32 patterns, the ties (low half 0x8000 with an even and an odd kept bit),
    carries into the exponent, the largest finite values, infinities, and NaNs of both signs
    with all kinds of payload. (Run once over all 2**32 patterns when written: no difference.)"""
    random = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    kept = rng.integers(0, 1 << 16, size=4096, dtype=np.uint64).astype(np.uint32) << 16
    edges = np.concatenate([kept | 0x8000, kept | 0x7FFF, kept | 0x8001, kept | 0xFFFF, np.array([
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001,
        0x7FC00000, 0xFFFFFFFF, 0x7FBFFFFF, 0x00000000, 0x80000000, 0x00008000, 0x00018000,
    ], dtype=np.uint32)])
    strided = random[:1 << 16].reshape(256, 256)[:, ::2]  # (not contiguous: ml_dtypes' own cast)
    for bits in (random, edges, strided):
        f = bits.view(np.float32)
        with np.errstate(invalid="ignore"):
            expect = f.astype(ml_dtypes.bfloat16).view(np.uint16)
        got = numerics.f32_to_bf16(f, np.dtype(ml_dtypes.bfloat16)).view(np.uint16)
        np.testing.assert_array_equal(got, expect)
    # and through the conversion a store uses, from float64 (rounded to fp32 first, as before)
    x = rng.standard_normal(1000) * 1e3
    np.testing.assert_array_equal(numerics.convert(x, "bfloat16").view(np.uint16),
                                  x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16))
