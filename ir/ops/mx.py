"""Microscaling (MX, OCP MX v1.0): quantize to MXFP8 on the Vector Engine and
multiply MXFP8/MXFP4 matrices on the Tensor Engine (NeuronCore-v4).

Layout (the vendor's trainium3 architecture guide, "Quad-MXFP8/MXFP4 Matmul"):
an MX tile is [P, F] of a packed `*_x4` dtype, each element four values of the
contraction dimension; the contraction of one tile is P partitions x 4 lanes.
A scaling group is 32 values: 8 partitions x the 4 lanes of one element. Its
shared scale (an e8m0 power of two, or its biased exponent as uint8) sits in
the same SBUF quadrant (32 partitions) as the group: group r (0..3) of
quadrant q at row q*32 + r of the scale view, in the column of its element.
So a scale view has the data's free shape and spans (quadrants - 1)*32 + 4
partitions; the other 28 rows of each quadrant are not touched, which lets
up to four scale tensors share one buffer at row offsets 0, 4, 8 and 12
(release notes, NKI 0.6.0: sliced scale buffers).

Each quadrant's four scale rows are one operand of the instruction (an Access
of 4 partitions), so every analysis sees exactly the rows read or written.
"""
from __future__ import annotations

import numpy as np

from .. import numerics
from ..errors import NkiccError
from ..nodes import Access, Affine, Op
from .checks import free, tensor
from .core import CostContext, Emit, free_size, instruction
from .matmul import load_stationary
from .values import as_tiles

QUADRANT = 32       # partitions per SBUF quadrant
GROUP_ROWS = 8      # partitions of one scaling group (x 4 lanes = 32 values)
SCALE_ROWS = QUADRANT // GROUP_ROWS  # scale rows per quadrant
SCALE_OFFSETS = (0, 4, 8, 12)        # where in its quadrant a scale view may start
MX_DATA = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")
QUANT_DATA = ("float8_e4m3fn_x4", "float8_e5m2_x4")
SCALE_DTYPES = ("float8_e8m0fnu", "uint8")
E8M0_BIAS = 127
# largest unbiased exponent of the element format (quantize_mx's scale rule)
EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}


# --- shared trace rules ------------------------------------------------------------------

def _sbuf(t, what: str) -> None:
    if t.buffer != "sbuf":
        raise NkiccError("E120", f"{what} must be in SBUF, {t.shown} is in {t.buffer}", None,
                         "copy it to an SBUF tile first")


def _dtype(t, allowed, what: str) -> None:
    if t.decl.dtype not in allowed:
        raise NkiccError("E132", f"{what} is {t.decl.dtype}; it must be one of {', '.join(allowed)}", None,
                         "allocate it with one of those dtypes")


def _partition_start(t) -> int | None:
    """The first partition of an on-chip view, when it is known at trace time."""
    rows = t.decl.size // t.decl.shape[0] if t.decl.shape else 1
    a = t.access
    if not a.pattern or a.pattern[0][0] != rows or a.scalar is not None:
        return None
    start = a.offset.floordiv_exact(rows)
    return start.const if start is not None and start.is_const else None


def _data_partitions(t, what: str) -> int:
    p = t.shape[0]
    if p % QUADRANT or not 0 < p <= 128:
        raise NkiccError("E130", f"{what} spans {p} partitions; it must be 32, 64, 96 or 128", None,
                         "MX scaling groups are 8 partitions within a 32-partition quadrant: pad the "
                         "contraction dimension to a multiple of 32 partitions")
    return p


def scale_rows(scale, data, what: str) -> list[Access]:
    """The scale view's rows of each quadrant the data spans, one Access each
    (see the module docstring), after the layout rules."""
    quadrants = data.shape[0] // QUADRANT
    need = (quadrants - 1) * QUADRANT + SCALE_ROWS
    if scale.shape[0] < need:
        raise NkiccError("E140", f"{what} spans {scale.shape[0]} partitions; the scales of {data.shape[0]} data "
                                 f"partitions take rows q*32 + 0..3 of each quadrant q, so at least {need}", None,
                         f"allocate the scales with the data's partition count ({data.shape[0]}) and slice them "
                         "at a row offset of 0, 4, 8 or 12")
    if free(scale) != free(data):
        raise NkiccError("E140", f"{what} has {free(scale)} elements per partition, the data {free(data)}", None,
                         "one scale per packed element column: give the scales the data's free shape")
    start = _partition_start(scale)
    if start is not None and start % QUADRANT not in SCALE_OFFSETS:
        raise NkiccError("E111", f"{what} starts at partition {start}, row {start % QUADRANT} of its quadrant; "
                                 "MX scales start at row 0, 4, 8 or 12 of a quadrant", None,
                         "slice the scale buffer at a partition offset of 0, 4, 8 or 12")
    if getattr(scale, "overflow", None):  # the rows are emitted as accesses, past the tracer's own check
        raise NkiccError("E101", f"{what} runs past the end of its tile: {scale.overflow}", None,
                         "check the slice bounds of the scale view")
    a = scale.access
    step = a.pattern[0][0]
    return [Access(a.tensor, a.offset + Affine.of(q * QUADRANT * step), ((step, SCALE_ROWS),) + a.pattern[1:],
                   a.scalar, a.scalar_scale) for q in range(quadrants)]


def _scale_operand(op: Op, a: Access) -> bool:
    """Scale rows start at 0/4/8/12 of a quadrant (checked at trace time), not
    at the compute engines' usual partition starts."""
    return a in (op.outs[1:] if op.opcode == "quantize_mx" else op.ins[2:])


def _all_sbuf(op: Op, decls, psum_out: bool) -> None:
    for a in op.ins:
        if isinstance(a, Access) and decls[a.tensor].buffer != "sbuf":
            raise NkiccError("E131" if psum_out else "E120", f"{op.opcode} reads {decls[a.tensor].described()} "
                                                             "outside SBUF", op.loc, "keep MX operands in SBUF")
    outs = op.outs[:1] if psum_out else op.outs
    want = "psum" if psum_out else "sbuf"
    for a in outs:
        if decls[a.tensor].buffer != want:
            raise NkiccError("E131" if psum_out else "E120", f"{op.opcode} writes {decls[a.tensor].described()}, "
                                                             f"which must be in {want.upper()}", op.loc)


# --- numpy semantics ---------------------------------------------------------------------

def scales_to_f32(values: np.ndarray, dtype: str) -> np.ndarray:
    """Scale values as float32 powers of two: e8m0 by value, uint8 as the
    biased exponent (255 is NaN, as e8m0's 0xFF)."""
    if dtype == "uint8":
        codes = np.asarray(values).astype(np.int32)
        return np.where(codes == 255, np.float32(np.nan), np.ldexp(np.float32(1.0), codes - E8M0_BIAS)
                        ).astype(np.float32)
    return np.asarray(values).astype(np.float32)


def _group_scales(op: Op, read, first: int, quadrants: int, dtype: str) -> np.ndarray:
    """[quadrants*4, F] scales, one row per 8-partition group, from the quadrant operands."""
    rows = [as_tiles(np.asarray(read(op.ins[first + q]))) for q in range(quadrants)]
    return scales_to_f32(np.concatenate(rows, axis=0), dtype)


def dequantize(packed: np.ndarray, scales: np.ndarray, dtype: str) -> np.ndarray:
    """[P, F] packed tile and [P/8, F] group scales -> [P*4, F] float64 values,
    contraction row p*4 + lane."""
    p, f = packed.shape
    vals = numerics.unpack(packed, dtype).astype(np.float64).reshape(p, f, 4)
    vals = vals * np.repeat(scales.astype(np.float64), GROUP_ROWS, axis=0)[:, :, None]
    return vals.transpose(0, 2, 1).reshape(p * 4, f)


def _matmul_mx(op: Op, read):
    q = op.attr("quadrants")
    st = as_tiles(np.asarray(read(op.ins[0])))
    mv = as_tiles(np.asarray(read(op.ins[1])))
    s_sc = _group_scales(op, read, 2, q, op.attr("stationary_scale_dtype"))
    m_sc = _group_scales(op, read, 2 + q, q, op.attr("moving_scale_dtype"))
    a = dequantize(st, s_sc, op.attr("stationary_dtype"))
    b = dequantize(mv, m_sc, op.attr("moving_dtype"))
    # fp8/fp4 products scaled by powers of two are exact; the sum in float64, rounded once
    return [(0, (a.T @ b).astype(np.float32))]


def quantize_groups(src: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """[P, 4F] float values -> (packed [P, F], unbiased scale exponents [P/8, F]).
    Scale 2^(floor(log2(amax)) - (Emax - 1)) per group, 2^-127 for an all-zero
    group (SDK quantize_mx, "Scale calculation"); the elements are the values
    divided by it, converted to the element dtype (fp8 e4m3fn saturates)."""
    p, f4 = src.shape
    x = src.astype(np.float32).reshape(p // GROUP_ROWS, GROUP_ROWS, f4 // 4, 4)
    amax = np.abs(x).max(axis=(1, 3))
    _, e = np.frexp(amax)  # amax = m * 2^e, m in [0.5, 1): floor(log2(amax)) = e - 1
    exp = np.where(amax > 0, e - 1 - (EMAX[dtype] - 1), -E8M0_BIAS)
    exp = np.clip(exp, -E8M0_BIAS, E8M0_BIAS).astype(np.int32)
    scaled = x / np.ldexp(np.float32(1.0), exp)[:, None, :, None]
    packed = numerics.convert(scaled.reshape(p, f4), dtype)
    return packed, exp


def _quantize_mx(op: Op, read):
    src = as_tiles(np.asarray(read(op.ins[0])).astype(np.float32))
    packed, exp = quantize_groups(src, op.attr("dtype"))
    nonfinite = ~np.isfinite(src.reshape(src.shape[0] // GROUP_ROWS, GROUP_ROWS, -1, 4)).all(axis=(1, 3))
    if op.attr("scale_dtype") == "uint8":
        scales = np.where(nonfinite, 255, exp + E8M0_BIAS).astype(np.uint8)
    else:
        scales = np.where(nonfinite, np.float32(np.nan), np.ldexp(np.float32(1.0), exp)).astype(np.float32)
    out = [(0, packed)]
    for q in range(op.attr("quadrants")):
        out.append((1 + q, scales[q * SCALE_ROWS:(q + 1) * SCALE_ROWS]))
    return out


# --- costs ---------------------------------------------------------------------------------

def _matmul_mx_cost(op: Op, ctx: CostContext) -> float:
    """As a bf16 nc_matmul, its LoadStationary and then max(min(64, M), N) cycles: each PE
    multiplies four MX pairs per cycle, so 4x the contraction in the same time (trainium3 guide)."""
    t = ctx.table
    cycles = max(min(t.matmul_min_rows, free_size(op.ins[0])), free_size(op.ins[1]))
    return ctx.ns(ctx.fixed_cycles(op) + load_stationary(op, ctx) + cycles)


def _quantize_mx_cost(op: Op, ctx: CostContext) -> float:
    """Four source elements per partition per cycle (trainium3 guide, "MX data-type
    Quantization"): one cycle per packed output element."""
    return ctx.ns(ctx.fixed_cycles(op) + max(ctx.table.elementwise_min, free_size(op.outs[0])))


# --- the instructions ------------------------------------------------------------------------

def _quantize_verify(op: Op, decls) -> None:
    _all_sbuf(op, decls, psum_out=False)


@instruction(family="mx", compute=_quantize_mx, engine="dve", cost=_quantize_mx_cost, verify=_quantize_verify,
             start_exempt=_scale_operand, since=4)
def quantize_mx(dst, src, dst_scale, name=None):
    """Quantize a bf16/fp16 SBUF tile to MXFP8 on the Vector Engine (NeuronCore-v4).

    src [P, 4F] (P = 32, 64, 96 or 128, laid out as nc_matmul_mx consumes it:
    four consecutive free elements are four values of the contraction) becomes
    dst [P, F] of float8_e4m3fn_x4 or float8_e5m2_x4, and one scale per group of
    32 values (8 partitions x the 4 values of one dst element) in dst_scale
    (float8_e8m0fnu, or uint8 holding the biased exponent). Group r of quadrant
    q goes to row q*32 + r of dst_scale, column of its element; dst_scale has
    dst's free shape and may be a view starting at row 0, 4, 8 or 12 of a
    quadrant of a shared buffer; no other row is written.

    The scale is 2^(floor(log2(amax)) - (Emax - 1)), amax the group's largest
    magnitude, Emax 8 for e4m3fn and 15 for e5m2 (twice the OCP sample rule,
    so the largest values round instead of clamping); 2^-127 for an all-zero
    group. Elements are value / scale rounded to nearest even."""
    dst = tensor(dst, "quantize_mx dst")
    src = tensor(src, "quantize_mx src")
    scale = tensor(dst_scale, "quantize_mx dst_scale")
    for t, what in ((dst, "dst"), (src, "src"), (scale, "dst_scale")):
        _sbuf(t, f"quantize_mx {what}")
    _dtype(src, ("bfloat16", "float16"), "quantize_mx src")
    _dtype(dst, QUANT_DATA, "quantize_mx dst")
    _dtype(scale, SCALE_DTYPES, "quantize_mx dst_scale")
    p = _data_partitions(src, "quantize_mx src")
    if free(src) % 4:
        raise NkiccError("E140", f"quantize_mx src has {free(src)} elements per partition; a multiple of 4", None,
                         "each dst element packs 4 consecutive src elements")
    if dst.shape[0] != p or free(dst) * 4 != free(src):
        raise NkiccError("E140", f"quantize_mx dst has shape {list(dst.shape)}; for src {list(src.shape)} it "
                                 f"holds {p} partitions of {free(src) // 4} packed elements", None,
                         "dst has src's partitions and a quarter of its free elements")
    rows = scale_rows(scale, dst, "quantize_mx dst_scale")
    return Emit([dst, *rows], [src], {"dtype": dst.decl.dtype, "scale_dtype": scale.decl.dtype,
                                      "quadrants": len(rows)})


def _matmul_verify(op: Op, decls) -> None:
    _all_sbuf(op, decls, psum_out=True)


def _tiling(tile_position, tile_size, k: int) -> None:
    """Row tiling only: tile_size (32/64/128, 128), tile_position (a multiple of the rows, 0)."""
    if tile_position is None and tile_size is None:
        return
    try:
        (row, col), (start, start_col) = (tuple(int(v) for v in tile_size), tuple(int(v) for v in tile_position))
    except (TypeError, ValueError):
        raise NkiccError("E103", "nc_matmul_mx tile_position and tile_size are both set, as (row, column) "
                                 "pairs of integers", None, "set both, or neither (the whole array)") from None
    if row not in (32, 64, 128) or col != 128 or start_col != 0 or start % row or start + row > 128:
        raise NkiccError("E130", f"nc_matmul_mx tiling tile_size=({row}, {col}), tile_position=({start}, "
                                 f"{start_col}): only row tiling, tile_size (32|64|128, 128) at a start row "
                                 "that is a multiple of the row size, column 0", None)
    if k > row:
        raise NkiccError("E130", f"nc_matmul_mx stationary spans {k} partitions, more than the {row}-row tile",
                         None, "use a larger tile_size or fewer contraction partitions")


@instruction(family="mx", compute=_matmul_mx, engine="pe", cost=_matmul_mx_cost,
             background=load_stationary, verify=_matmul_verify,
             accumulates=lambda op: op.attr("accumulate") is not False, start_exempt=_scale_operand, since=4)
def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
                 accumulate=None, name=None):
    """dst[M, N] (+)= dequant(stationary)[K, M].T @ dequant(moving)[K, N] on the
    Tensor Engine, MXFP8/MXFP4 inputs (NeuronCore-v4).

    stationary [P, M] and moving [P, N] are float8_e4m3fn_x4, float8_e5m2_x4 or
    float4_e2m1fn_x4 SBUF tiles: the contraction K = 4P runs over the P
    partitions (32, 64, 96 or 128) and the 4 values packed in each element.
    Each has a scale tile (float8_e8m0fnu, or uint8 biased exponents) in the
    layout quantize_mx writes: one scale per 8 partitions x 4 values, at row
    q*32 + r of the scale view for group r of quadrant q. dst is a float32 or
    bfloat16 PSUM tile; M is even and at most 128, N at most 4096 (fp32) or
    8192 (bf16) elements. Products are summed exactly and rounded once.
    accumulate as nc_matmul: False overwrites, True adds, None overwrites on the
    first write to a PSUM location and adds after. tile_position/tile_size
    select a row tile of the PE array (both or neither)."""
    dst = tensor(dst, "nc_matmul_mx dst")
    st = tensor(stationary, "nc_matmul_mx stationary")
    mv = tensor(moving, "nc_matmul_mx moving")
    s_sc = tensor(stationary_scale, "nc_matmul_mx stationary_scale")
    m_sc = tensor(moving_scale, "nc_matmul_mx moving_scale")
    for t, what in ((st, "stationary"), (mv, "moving"), (s_sc, "stationary_scale"), (m_sc, "moving_scale")):
        if t.buffer != "sbuf":
            raise NkiccError("E131", f"nc_matmul_mx {what} must be in SBUF, {t.shown} is in {t.buffer}", None,
                             "load it into an SBUF tile")
    if dst.buffer != "psum":
        raise NkiccError("E131", f"nc_matmul_mx dst must be in PSUM, {dst.shown} is in {dst.buffer}", None,
                         "allocate the result with buffer=nl.psum")
    _dtype(st, MX_DATA, "nc_matmul_mx stationary")
    _dtype(mv, MX_DATA, "nc_matmul_mx moving")
    _dtype(s_sc, SCALE_DTYPES, "nc_matmul_mx stationary_scale")
    _dtype(m_sc, SCALE_DTYPES, "nc_matmul_mx moving_scale")
    _dtype(dst, ("float32", "bfloat16"), "nc_matmul_mx dst")
    k = _data_partitions(st, "nc_matmul_mx stationary")
    if mv.shape[0] != k:
        raise NkiccError("E130", f"nc_matmul_mx contraction mismatch: stationary has {k} partitions, moving "
                                 f"{mv.shape[0]}", None, "both operands carry the contraction on partitions")
    m, n = free(st), free(mv)
    n_max = 4096 if dst.decl.dtype == "float32" else 8192
    if m > 128 or m % 2 or n > n_max:
        raise NkiccError("E130", f"nc_matmul_mx tile M={m} (even, <= 128), N={n} (<= {n_max} for a "
                                 f"{dst.decl.dtype} dst)", None, "tile M by 128 (even) and N by the PSUM size")
    if dst.shape[0] != m or free(dst) != n:
        raise NkiccError("E130", f"nc_matmul_mx dst has shape {list(dst.shape)}, expected [{m}, {n}]", None,
                         "dst is [M, N] for stationary [K, M] and moving [K, N]")
    if accumulate not in (None, True, False):
        raise NkiccError("E103", "nc_matmul_mx accumulate must be None, True or False")
    _tiling(tile_position, tile_size, k)
    s_rows = scale_rows(s_sc, st, "nc_matmul_mx stationary_scale")
    m_rows = scale_rows(m_sc, mv, "nc_matmul_mx moving_scale")
    return Emit([dst], [st, mv, *s_rows, *m_rows],
                {"accumulate": accumulate, "quadrants": len(s_rows), "stationary_dtype": st.decl.dtype,
                 "moving_dtype": mv.decl.dtype, "stationary_scale_dtype": s_sc.decl.dtype,
                 "moving_scale_dtype": m_sc.decl.dtype})
