"""Conformance: nisa.quantize_mx and nisa.nc_matmul_mx (microscaling, OCP MX).

The oracle is written here from the documented algorithm (SDK quantize_mx,
"Scale calculation"; trainium3 architecture guide, MX layout): per group of
32 values (8 partitions x the 4 values packed in one element) the largest
magnitude gives a shared power-of-two scale, 2^(floor(log2 amax) - (Emax-1)),
stored at row q*32 + r of the scale view for group r of quadrant q; the
elements are value / scale rounded into fp8. nc_matmul_mx is numpy's matmul
of the dequantized operands. Every case runs on both simulators."""
import ml_dtypes
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError
from nkicc.ir import numerics
from nkicc.specs import TensorSpec
from tests.support.ops_helpers import check_error

pytestmark = pytest.mark.api("nisa.quantize_mx", "nisa.nc_matmul_mx")

SIMULATORS = ("machine", "reference")
BF16 = np.dtype(ml_dtypes.bfloat16)
ELEMENT = {"float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn, "float8_e5m2_x4": ml_dtypes.float8_e5m2,
           "float4_e2m1fn_x4": ml_dtypes.float4_e2m1fn}
MAXIMUM = {"float8_e4m3fn_x4": 448.0, "float8_e5m2_x4": 57344.0, "float4_e2m1fn_x4": 6.0}
EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}
MANTISSA = {"float8_e4m3fn_x4": 3, "float8_e5m2_x4": 2}
SUBNORMAL = {"float8_e4m3fn_x4": 2.0 ** -9, "float8_e5m2_x4": 2.0 ** -16}


# --- the oracle ---------------------------------------------------------------------------

# MX is NeuronCore-v4 (trn3): every kernel here is compiled for it (conftest's trn3 fixture)
pytestmark = [pytestmark, pytest.mark.usefixtures("trn3")]

def group_of(p: int) -> int:
    """Row of the scale view holding partition p's group: quadrant*32 + (p % 32) // 8."""
    return (p // 32) * 32 + (p % 32) // 8


def oracle_quantize(src: np.ndarray, dtype: str):
    """src [P, 4F] -> (element values [P, 4F] float64, scale exponents by scale-view row {row: [F]})."""
    p, f4 = src.shape
    x = src.astype(np.float64)
    elements = np.zeros_like(x)
    exps = {}
    for g in range(p // 8):
        rows = slice(8 * g, 8 * g + 8)
        row_exps = []
        for j in range(f4 // 4):
            block = x[rows, 4 * j:4 * j + 4]
            amax = np.abs(block).max()
            e = -127 if amax == 0 else max(-127, int(np.floor(np.log2(amax))) - (EMAX[dtype] - 1))
            row_exps.append(e)
            scaled = np.clip(block / 2.0 ** e, -MAXIMUM[dtype], MAXIMUM[dtype])
            elements[rows, 4 * j:4 * j + 4] = scaled.astype(ELEMENT[dtype]).astype(np.float64)
        exps[group_of(8 * g)] = np.array(row_exps)
    return elements, exps


def oracle_dequant(packed: np.ndarray, scales: np.ndarray, dtype: str) -> np.ndarray:
    """packed [P, F] (uint storage) and the scale view [rows, F] as values -> [4P, F]
    float64, contraction index 4p + lane, each value times its group's scale."""
    p, f = packed.shape
    width = 8 * packed.dtype.itemsize // 4
    out = np.zeros((4 * p, f))
    for lane in range(4):
        codes = ((packed.astype(np.uint64) >> np.uint64(lane * width)) & np.uint64((1 << width) - 1)).astype(np.uint8)
        if dtype == "float4_e2m1fn_x4":
            mag = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])[codes & 7]
            vals = np.where(codes & 8, -mag, mag)
        else:
            vals = codes.view(ELEMENT[dtype]).astype(np.float64)
        for row in range(p):
            out[4 * row + lane] = vals[row] * scales[group_of(row)]
    return out


def scale_values(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "uint8":
        return 2.0 ** (raw.astype(np.float64) - 127)
    return raw.astype(np.float64)


def random_scales(rng, rows: int, f: int, dtype: str) -> np.ndarray:
    exps = rng.integers(-6, 7, size=(rows, f))
    return (exps + 127).astype(np.uint8) if dtype == "uint8" else numerics.convert(2.0 ** exps, dtype)


def mx_source(rng, p: int, f4: int, zero_group: bool = True) -> np.ndarray:
    """bf16 [P, 4F], each 32-value group at its own magnitude (2^-20 .. 2^20), one group all zero."""
    x = rng.standard_normal((p, f4))
    mags = 2.0 ** rng.integers(-20, 21, size=(p // 8, f4 // 4))
    x = x * np.repeat(np.repeat(mags, 8, axis=0), 4, axis=1)
    if zero_group:
        x[8:16, 4:8] = 0.0
    return x.astype(BF16)


def simulate(kernel, specs, inputs, simulator):
    c = nkicc.compile(kernel, *specs)
    outs, _ = c.simulate(dict(zip(c.ir.args, inputs)), simulator=simulator)
    return [outs[o] for o in c.ir.outputs]


# --- quantize_mx ----------------------------------------------------------------------------

def quantize_kernel(dtype, scale_dtype, offset):
    """Quantize src into a scale view at `offset` of a 128-row buffer first filled from `fill`."""
    @nkicc.jit
    def k(src, fill):
        p, f4 = src.shape
        q = nl.ndarray((p, f4 // 4), dtype=dtype, buffer=nl.shared_hbm)
        s = nl.ndarray(fill.shape, dtype=fill.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src)
        buf = nl.ndarray(fill.shape, dtype=fill.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=buf, src=fill)
        qt = nl.ndarray((p, f4 // 4), dtype=dtype, buffer=nl.sbuf)
        nisa.quantize_mx(dst=qt, src=t, dst_scale=buf[offset:, 0:f4 // 4])
        nisa.dma_copy(dst=q, src=qt)
        nisa.dma_copy(dst=s, src=buf)
        return q, s
    return k


@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("dtype,scale_dtype,p,f4,offset", [
    ("float8_e4m3fn_x4", "float8_e8m0fnu", 128, 64, 0),
    ("float8_e5m2_x4", "uint8", 64, 8, 4),
    ("float8_e4m3fn_x4", "uint8", 32, 4, 12),
    ("float8_e5m2_x4", "float8_e8m0fnu", 96, 36, 8),
])
def test_quantize_mx_matches_oracle_and_leaves_other_scale_rows(rng, simulator, dtype, scale_dtype, p, f4, offset):
    src = mx_source(rng, p, f4)
    fill = random_scales(rng, 128, f4 // 4 + 3, scale_dtype)
    q, s = simulate(quantize_kernel(getattr(nl, dtype) if "x4" in dtype else dtype, getattr(nl, scale_dtype),
                                    offset),
                    [src, fill], [src, fill], simulator)
    want_elems, want_exps = oracle_quantize(src.astype(np.float32), dtype)
    got_elems = numerics.unpack(q, dtype).astype(np.float64)
    np.testing.assert_array_equal(got_elems, want_elems)
    want_scales = scale_values(fill, scale_dtype)
    for row, exps in want_exps.items():
        want_scales[offset + row, :f4 // 4] = 2.0 ** exps
    np.testing.assert_array_equal(scale_values(s, scale_dtype), want_scales)  # untouched rows kept


@pytest.mark.parametrize("dtype", ["float8_e4m3fn_x4", "float8_e5m2_x4"])
def test_quantize_mx_round_trip_error_bound(rng, dtype):
    p, f4 = 128, 256
    src = mx_source(rng, p, f4, zero_group=False)
    fill = random_scales(rng, 128, f4 // 4, "float8_e8m0fnu")
    q, s = simulate(quantize_kernel(getattr(nl, dtype), nl.float8_e8m0fnu, 0), [src, fill], [src, fill], "machine")
    back = oracle_dequant(q, scale_values(s, "float8_e8m0fnu"), dtype)       # [4P, F]: row 4p + lane
    x = src.astype(np.float64).reshape(p, f4 // 4, 4).transpose(0, 2, 1).reshape(4 * p, f4 // 4)
    scale_of = np.repeat(np.repeat(scale_values(s, "float8_e8m0fnu")[[group_of(r) for r in range(p)]], 1, 0), 4, 0)
    # nearest-even rounding: within half a unit in the last place, or half the smallest subnormal step
    bound = np.maximum(np.abs(x) * 2.0 ** -(MANTISSA[dtype] + 1), scale_of * SUBNORMAL[dtype] / 2)
    assert (np.abs(back - x) <= bound).all()
    # no element saturates: the largest of a group is below 2^Emax before rounding, at most 2^Emax after
    assert np.abs(numerics.unpack(q, dtype).astype(np.float64)).max() <= 2.0 ** EMAX[dtype] < MAXIMUM[dtype]


# --- nc_matmul_mx ----------------------------------------------------------------------------

def matmul_kernel(dst_dtype, accumulate_twice=False):
    @nkicc.jit
    def k(st, mv, s_sc, m_sc):
        m, n = st.shape[1], mv.shape[1]
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        tiles = []
        for x in (st, mv, s_sc, m_sc):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            tiles.append(t)
        ps = nl.ndarray((m, n), dtype=dst_dtype, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=ps, stationary=tiles[0], moving=tiles[1], stationary_scale=tiles[2],
                          moving_scale=tiles[3])
        if accumulate_twice:
            nisa.nc_matmul_mx(dst=ps, stationary=tiles[0], moving=tiles[1], stationary_scale=tiles[2],
                              moving_scale=tiles[3], accumulate=True)
        r = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out, src=r)
        return out
    return k


def mx_operand(rng, k: int, f: int, dtype: str):
    return numerics.random_values(rng, dtype, (k, f))


@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("k,m,n,st_dt,mv_dt,sc_dt,dst", [
    (128, 128, 512, "float8_e4m3fn_x4", "float8_e4m3fn_x4", "float8_e8m0fnu", "float32"),
    (32, 2, 1, "float8_e5m2_x4", "float4_e2m1fn_x4", "uint8", "float32"),
    (64, 36, 70, "float4_e2m1fn_x4", "float4_e2m1fn_x4", "float8_e8m0fnu", "bfloat16"),
    (96, 128, 128, "float8_e5m2_x4", "float8_e4m3fn_x4", "uint8", "bfloat16"),
])
def test_nc_matmul_mx_matches_numpy_of_dequantized(rng, simulator, k, m, n, st_dt, mv_dt, sc_dt, dst):
    st, mv = mx_operand(rng, k, m, st_dt), mx_operand(rng, k, n, mv_dt)
    # the scale tiles have the data's shape; rows outside q*32 + 0..3 are garbage the matmul must ignore
    s_sc, m_sc = random_scales(rng, k, m, sc_dt), random_scales(rng, k, n, sc_dt)
    specs = [TensorSpec((k, m), st_dt), TensorSpec((k, n), mv_dt), TensorSpec((k, m), sc_dt),
             TensorSpec((k, n), sc_dt)]
    (got,) = simulate(matmul_kernel(getattr(nl, dst)), specs, [st, mv, s_sc, m_sc], simulator)
    a = oracle_dequant(st, scale_values(s_sc, sc_dt), st_dt)
    b = oracle_dequant(mv, scale_values(m_sc, sc_dt), mv_dt)
    want = a.T @ b
    if dst == "bfloat16":
        want = want.astype(np.float32).astype(BF16).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_nc_matmul_mx_accumulates(rng, simulator):
    k, m, n = 64, 16, 40
    st, mv = mx_operand(rng, k, m, "float8_e4m3fn_x4"), mx_operand(rng, k, n, "float8_e5m2_x4")
    s_sc, m_sc = random_scales(rng, k, m, "float8_e8m0fnu"), random_scales(rng, k, n, "float8_e8m0fnu")
    specs = [TensorSpec((k, m), "float8_e4m3fn_x4"), TensorSpec((k, n), "float8_e5m2_x4"),
             TensorSpec((k, m), "float8_e8m0fnu"), TensorSpec((k, n), "float8_e8m0fnu")]
    (got,) = simulate(matmul_kernel(nl.float32, accumulate_twice=True), specs, [st, mv, s_sc, m_sc], simulator)
    a = oracle_dequant(st, scale_values(s_sc, "float8_e8m0fnu"), "float8_e4m3fn_x4")
    b = oracle_dequant(mv, scale_values(m_sc, "float8_e8m0fnu"), "float8_e5m2_x4")
    np.testing.assert_allclose(got, 2 * (a.T @ b), rtol=1e-6)


@nkicc.jit
def quantize_both_packed_scales(st_src, mv_src):
    """The deep dive's pattern: both operands quantized on device, their scales
    packed into one buffer at row offsets 0 and 4 of each quadrant."""
    k, m4 = st_src.shape
    n = mv_src.shape[1] // 4
    out = nl.ndarray((m4 // 4, n), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray(st_src.shape, dtype=st_src.dtype, buffer=nl.sbuf)
    b = nl.ndarray(mv_src.shape, dtype=mv_src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=st_src)
    nisa.dma_copy(dst=b, src=mv_src)
    scales = nl.ndarray((k, n), dtype=nl.uint8, buffer=nl.sbuf)
    qa = nl.ndarray((k, m4 // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    qb = nl.ndarray((k, n), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qa, src=a, dst_scale=scales[0:, 0:m4 // 4])
    nisa.quantize_mx(dst=qb, src=b, dst_scale=scales[4:, :])
    ps = nl.ndarray((m4 // 4, n), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=ps, stationary=qa, moving=qb, stationary_scale=scales[0:, 0:m4 // 4],
                      moving_scale=scales[4:, :])
    r = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("k", [128, 32])
def test_quantize_then_matmul_with_shared_scale_buffer(rng, simulator, k):
    st_src, mv_src = mx_source(rng, k, 4 * 64), mx_source(rng, k, 4 * 96)
    (got,) = simulate(quantize_both_packed_scales, [st_src, mv_src], [st_src, mv_src], simulator)

    def dequantized(src, dtype):  # [4K, F] from the oracle's quantization
        elems, exps = oracle_quantize(src.astype(np.float32), dtype)
        scales = np.zeros((k, src.shape[1] // 4))
        for row, e in exps.items():
            scales[row] = 2.0 ** e
        return oracle_dequant(numerics.pack(elems, dtype), scales, dtype)

    want = dequantized(st_src, "float8_e4m3fn_x4").T @ dequantized(mv_src, "float8_e5m2_x4")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    # and within fp8 quantization error of the unquantized product
    exact = lambda s: s.astype(np.float64).reshape(k, -1, 4).transpose(0, 2, 1).reshape(4 * k, -1)  # noqa: E731
    ref = exact(st_src).T @ exact(mv_src)
    assert np.abs(got - ref).max() <= 0.15 * np.abs(exact(st_src)).T.dot(np.abs(exact(mv_src))).max()


def test_mx_costs_and_engines(rng):
    # MX matmul streams N columns like a bf16 matmul (4x the contraction per cycle);
    # quantize_mx takes four source elements per cycle on the Vector Engine
    st_src, mv_src = mx_source(rng, 128, 4 * 64), mx_source(rng, 128, 4 * 96)
    c = nkicc.compile(quantize_both_packed_scales, st_src, mv_src)
    engines = {op.opcode: nkicc.ir.ops.of(op).engine_of(op, c.ir.tensor_map())
               for op in c.ir.body.walk() if isinstance(op, nkicc.ir.Op)}
    assert engines["quantize_mx"] == "dve" and engines["nc_matmul_mx"] == "pe"


# --- errors ------------------------------------------------------------------------------------

def _bad(case):
    @nkicc.jit
    def k(x):
        out = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        src = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        q = nl.ndarray((128, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        sc = nl.ndarray((128, 4), dtype=nl.uint8, buffer=nl.sbuf)
        ps = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.psum)
        if case == "src_dtype":
            f = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.quantize_mx(dst=q, src=f, dst_scale=sc)  # MARK src_dtype
        if case == "fp4_dst":
            q4 = nl.ndarray((128, 4), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
            nisa.quantize_mx(dst=q4, src=src, dst_scale=sc)  # MARK fp4_dst
        if case == "partitions":
            nisa.quantize_mx(dst=q[0:48], src=src[0:48], dst_scale=sc[0:48])  # MARK partitions
        if case == "dst_shape":
            nisa.quantize_mx(dst=q[:, 0:3], src=src, dst_scale=sc)  # MARK dst_shape
        if case == "scale_rows":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc[0:16])  # MARK scale_rows
        if case == "scale_start":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc[2:])  # MARK scale_start
        if case == "scale_overflow":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc[:, 2:6])  # MARK scale_overflow
        if case == "scale_free":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc[:, 0:2])  # MARK scale_free
        if case == "mm_psum":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc)
            r = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_matmul_mx(dst=r, stationary=q[:, 0:2], moving=q, stationary_scale=sc[:, 0:2],  # MARK mm_psum
                              moving_scale=sc)
        if case == "mm_odd":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc)
            nisa.nc_matmul_mx(dst=ps[0:1], stationary=q[:, 0:1], moving=q, stationary_scale=sc[:, 0:1],  # MARK mm_odd
                              moving_scale=sc)
        if case == "mm_dtype":
            nisa.nc_matmul_mx(dst=ps, stationary=src[:, 0:2], moving=q, stationary_scale=sc[:, 0:2],  # MARK mm_dtype
                              moving_scale=sc)
        if case == "mm_tile":
            nisa.quantize_mx(dst=q, src=src, dst_scale=sc)
            nisa.nc_matmul_mx(dst=ps, stationary=q[:, 0:2], moving=q, stationary_scale=sc[:, 0:2],  # MARK mm_tile
                              moving_scale=sc, tile_position=(0, 0), tile_size=(64, 128))
        nisa.tensor_copy(dst=out, src=ps)
        return out
    return k


@pytest.mark.parametrize("case,code", [
    ("src_dtype", "E132"), ("fp4_dst", "E132"), ("partitions", "E130"), ("dst_shape", "E140"),
    ("scale_rows", "E140"), ("scale_start", "E111"), ("scale_overflow", "E101"), ("scale_free", "E140"), ("mm_psum", "E131"),
    ("mm_odd", "E130"), ("mm_dtype", "E132"), ("mm_tile", "E130"),
])
def test_mx_errors_are_one_line_at_the_call(rng, case, code):
    x = rng.standard_normal((128, 16)).astype(BF16)
    with pytest.raises(NkiccError) as e:
        nkicc.compile(_bad(case), x)
    check_error(e, code, f"MARK {case}", "test_ops_mx.py")


@nkicc.jit
def quantize_3d(src):
    """Library-style multi-dimensional free shapes: src [P, A, T, 4] -> dst and scales [P, A, T]."""
    p, a, t, _ = src.shape
    q = nl.ndarray((p, a, t), dtype=nl.float8_e5m2_x4, buffer=nl.shared_hbm)
    s = nl.ndarray((4 * (p // 32), a, t), dtype=nl.uint8, buffer=nl.shared_hbm)
    x = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=src)
    qt = nl.ndarray((p, a, t), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    st = nl.ndarray((p, a, t), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qt, src=x, dst_scale=st)
    nisa.dma_copy(dst=q, src=qt)
    for quadrant in range(p // 32):  # only rows 0..3 of each quadrant hold scales
        nisa.dma_copy(dst=s[4 * quadrant:4 * quadrant + 4], src=st[32 * quadrant:32 * quadrant + 4])
    return q, s


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_quantize_mx_multidimensional_free_shapes(rng, simulator):
    src = mx_source(rng, 64, 2 * 3 * 4).reshape(64, 2, 3, 4)
    q, s = simulate(quantize_3d, [src], [src], simulator)
    elems, exps = oracle_quantize(src.reshape(64, -1).astype(np.float32), "float8_e5m2_x4")
    np.testing.assert_array_equal(numerics.unpack(q.reshape(64, -1), "float8_e5m2_x4").astype(np.float64), elems)
    for row, e in exps.items():
        compact = (row // 32) * 4 + row % 32
        np.testing.assert_array_equal(s.reshape(8, -1)[compact].astype(np.int64) - 127, e)


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_mx_with_precise_fp_off_equals_precise(rng, monkeypatch, simulator):
    # packed data holds bits and e8m0/uint8 scales exact powers of two: NKI_PRECISE_FP=0 changes nothing
    st_src, mv_src = mx_source(rng, 64, 4 * 32), mx_source(rng, 64, 4 * 48)
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
    (precise,) = simulate(quantize_both_packed_scales, [st_src, mv_src], [st_src, mv_src], simulator)
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    (loose,) = simulate(quantize_both_packed_scales, [st_src, mv_src], [st_src, mv_src], simulator)
    np.testing.assert_array_equal(loose, precise)


@nkicc.jit
def mx_three_accumulators(st, mv, s_sc, m_sc):
    """Three PSUM accumulators live together over a K loop: on a small PSUM one must spill."""
    k_steps, m, n = st.shape[1], st.shape[2], mv.shape[2] // 3
    out = nl.ndarray((3, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for x in (st, mv, s_sc, m_sc):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tiles.append(t)
    accs = [nl.zeros((m, n), dtype=nl.float32, buffer=nl.psum) for _ in range(3)]
    for k in nl.sequential_range(k_steps):
        for j in range(3):
            nisa.nc_matmul_mx(dst=accs[j], stationary=tiles[0][:, k, :], moving=tiles[1][:, k, j * n:(j + 1) * n],
                              stationary_scale=tiles[2][:, k, :], moving_scale=tiles[3][:, k, j * n:(j + 1) * n],
                              accumulate=True)
    for j in range(3):
        r = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=accs[j])
        nisa.dma_copy(dst=out[j], src=r)
    return out


def test_nc_matmul_mx_destination_spills_from_a_small_psum(rng):
    k, steps, m, n = 64, 2, 32, 256
    st, mv = mx_operand(rng, k, steps * m, "float8_e4m3fn_x4"), mx_operand(rng, k, steps * 3 * n, "float4_e2m1fn_x4")
    s_sc, m_sc = random_scales(rng, k, steps * m, "uint8"), random_scales(rng, k, steps * 3 * n, "uint8")
    shapes = [(k, steps, m), (k, steps, 3 * n), (k, steps, m), (k, steps, 3 * n)]
    dts = ["float8_e4m3fn_x4", "float4_e2m1fn_x4", "uint8", "uint8"]
    arrays = [a.reshape(s) for a, s in zip((st, mv, s_sc, m_sc), shapes)]
    specs = [TensorSpec(s, d) for s, d in zip(shapes, dts)]
    c = nkicc.compile(mx_three_accumulators, *specs, passes={"plugins": ("tests.support.tiny_target_plugin",), "target": "tiny-psum"})
    assert {s["from"] for s in c.report["notes"]["alloc"]["spills"]} == {"psum"}
    got = c.run(*arrays)
    want = np.zeros((3, m, n))
    for step in range(steps):
        a = oracle_dequant(arrays[0][:, step], scale_values(arrays[2][:, step], "uint8"), dts[0])
        for j in range(3):
            cols = slice(j * n, (j + 1) * n)
            b = oracle_dequant(arrays[1][:, step, cols], scale_values(arrays[3][:, step, cols], "uint8"), dts[1])
            want[j] += a.T @ b
    # each step's result is rounded to fp32 in PSUM (or in its SBUF home) before the next adds to it
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
