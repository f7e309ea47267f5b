"""The Tensor Engine: matrix multiply and transpose through the PE array."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Access, Op
from . import enums
from .checks import free, on_chip, tensor
from .core import Batched, CostContext, Emit, free_size, instruction, partitions, require_generation
from .enums import matmul_perf_mode
from .values import as_tiles, f32

_FP32 = ("float32", "tfloat32")
_FP8 = ("float8_e4m3", "float8_e5m2")
_DTYPES = _FP8 + ("bfloat16", "float16", "tfloat32", "float32")
# NeuronCore-v4 adds OCP fp8 (e4m3fn) operands and a bfloat16 PSUM result
_V4_DTYPES = _DTYPES + ("float8_e4m3fn",)


def _matmul(op: Op, read):
    # contiguous copies: BLAS picks its kernel (and so the rounding) from the
    # operands' strides and alignment, which differ between simulators' layouts
    st = np.ascontiguousarray(as_tiles(f32(read(op.ins[0]))))
    mv = np.ascontiguousarray(as_tiles(f32(read(op.ins[1]))))
    if op.attr("double_row"):  # [K, 2, X] operands contract over (partition, first free index)
        st, mv = st.reshape(st.shape[0] * 2, -1), mv.reshape(mv.shape[0] * 2, -1)
    return [(0, st.T @ mv)]


def _matmul_batched(op: Op, read, nlead: int, reduce: tuple, products) -> list:
    """Many iterations at once: `products(stationary, moving, nlead, reduce, rows)` multiplies the
    operand views (their `nlead` leading loop axes summed where in `reduce`; rows 2 in double-row
    mode: the pair of rows joins the contraction). The simulator supplies it (simulator/gemm.py:
    how the products become few GEMMs is how it executes them, not what a matmul is)."""
    rows = 2 if op.attr("double_row") else 1
    return [(0, products(read(op.ins[0]), read(op.ins[1]), nlead, reduce, rows))]


def _fp32_factor(op: Op, ctx: CostContext) -> int:
    fp32 = any((a.dtype or ctx.decls[a.tensor].dtype) == "float32" for a in op.ins[:2])
    return ctx.table.matmul_fp32_factor if fp32 else 1


def load_stationary(op: Op, ctx: CostContext) -> float:
    """LoadStationary: a MultiplyMoving of the stationary's free size, max(64, M) cycles (x4 for
    fp32), at the Fast LoadStationary rate (ARCH1). Run in the background while the matmul before it
    multiplies, it costs only where the matmul waits for its operands."""
    t = ctx.table
    rows = 2 if op.attr("double_row") else 1
    return max(t.matmul_min_rows, free_size(op.ins[0]) // rows) * _fp32_factor(op, ctx) / t.load_stationary_speedup


def _matmul_cost(op: Op, ctx: CostContext) -> float:
    """The LoadStationary, then the MultiplyMoving: max(min(64, M), N) cycles for 2-byte and fp8
    inputs, x4 for fp32. FP8 double-row mode multiplies two rows per cycle: a [K, 2, N] moving
    tile streams in N cycles, twice the rate (ARCH2, Tensor Engine performance modes)."""
    t = ctx.table
    st, mv = op.ins[0], op.ins[1]
    rows = 2 if op.attr("double_row") else 1
    cycles = max(min(t.matmul_min_rows, free_size(st) // rows), free_size(mv) // rows) * _fp32_factor(op, ctx)
    return ctx.ns(ctx.fixed_cycles(op) + load_stationary(op, ctx) + cycles)


def _sbuf_to_psum(op: Op, decls) -> None:
    bufs = [decls[a.tensor].buffer for a in op.ins if isinstance(a, Access)]
    if decls[op.outs[0].tensor].buffer != "psum" or bufs[:2] != ["sbuf", "sbuf"]:
        raise NkiccError("E131", "nc_matmul reads SBUF and writes PSUM", op.loc, "move the operands")


# free_limited=False: nc_matmul's own tile limits (N <= 512, 4096 or 8192) are the tighter ones
@instruction(family="matmul", compute=_matmul, engine="pe", cost=_matmul_cost, background=load_stationary,
             verify=_sbuf_to_psum,
             accumulates=lambda op: op.attr("accumulate") is not False, free_limited=False,
             batched=Batched(_matmul_batched, lambda op: op.attr("accumulate") is not False, sums=True))
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None,
              **_hw_hints):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor Engine.
    accumulate=False overwrites, True adds, None: the first write to a PSUM
    location overwrites and later writes add. perf_mode=double_row (fp8,
    NeuronCore-v3 and newer) contracts [K, 2, M] with [K, 2, N] over the
    partitions and the first free dimension at twice the rate. dst is float32
    PSUM (or bfloat16 on NeuronCore-v4; in transpose mode, is_transpose=True, on
    NeuronCore-v3 and newer, a bfloat16 or float16 stationary's own dtype)."""
    dst = tensor(dst, "nc_matmul dst")
    st = tensor(stationary, "nc_matmul stationary")
    mv = tensor(moving, "nc_matmul moving")
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.buffer != "sbuf":
            raise NkiccError("E131", f"nc_matmul {what} must be in SBUF, {t.shown} is in {t.buffer}", None,
                             "copy it to SBUF with nisa.tensor_copy")
    if dst.buffer != "psum":
        raise NkiccError("E131", f"nc_matmul dst must be in PSUM, {dst.shown} is in {dst.buffer}", None,
                         "allocate the result with buffer=nl.psum")
    generation = dst.generation
    double = enums.member_name(perf_mode, matmul_perf_mode, "perf_mode") == "double_row"
    rows = 1
    if double:
        require_generation(generation, 3, "nc_matmul perf_mode=double_row (FP8 double-row mode)")
        if len(tile_size or ()) == 2 and tile_size[1] < 128:
            raise NkiccError("E103", "nc_matmul perf_mode=double_row cannot be combined with column tiling "
                                     f"(tile_size={tuple(tile_size)})", None, "drop tile_size or the perf_mode")
        if any(len(t.shape) < 3 or t.shape[1] != 2 for t in (st, mv)):
            raise NkiccError("E130", f"nc_matmul perf_mode=double_row takes [K, 2, M] and [K, 2, N] operands, got "
                                     f"{list(st.shape)} and {list(mv.shape)}", None,
                             "split the contraction over the partitions and a first free dimension of 2")
        rows = 2
    k, m, k2, n = st.shape[0], free(st) // rows, mv.shape[0], free(mv) // rows
    if k != k2:
        raise NkiccError("E130", f"nc_matmul contraction mismatch: stationary has {k} partitions, moving {k2}",
                         None, "both operands carry the contraction (K) dimension on partitions")
    # the moving tile's free size fills one PSUM bank; on NeuronCore-v4 up to all 8 of them
    n_max = 512 if generation < 4 else (8192 if dst.decl.dtype == "bfloat16" else 4096)
    if k > 128 or m > 128 or n > n_max:
        raise NkiccError("E130", f"nc_matmul tile too large: K={k} (<=128), M={m} (<=128), N={n} (<={n_max})", None,
                         f"tile the matmul: K and M by 128, N by {n_max}")
    if dst.shape[0] != m or free(dst) != n:
        raise NkiccError("E130", f"nc_matmul dst has shape {list(dst.shape)}, expected [{m}, {n}]", None,
                         "dst is [M, N] for stationary [K, M] and moving [K, N]")
    dtypes_here = _V4_DTYPES if generation >= 4 else _DTYPES
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.decl.dtype == "float8_e4m3fn" and generation < 4:
            require_generation(generation, 4, f"nc_matmul with a float8_e4m3fn {what}")
        if t.decl.dtype not in dtypes_here:
            raise NkiccError("E132", f"nc_matmul {what} is {t.decl.dtype}; the Tensor Engine multiplies "
                                     f"{', '.join(dtypes_here)}", None, "cast it with nisa.tensor_copy first")
        if double and t.decl.dtype not in _FP8 + ("float8_e4m3fn",):
            raise NkiccError("E132", f"nc_matmul perf_mode=double_row multiplies fp8 operands; {what} is "
                                     f"{t.decl.dtype}", None, "cast both operands to float8_e4m3 or float8_e5m2")
    if (st.decl.dtype in _FP32) != (mv.decl.dtype in _FP32):
        raise NkiccError("E132", f"nc_matmul mixes {st.decl.dtype} and {mv.decl.dtype}", None,
                         "an fp32/tfloat32 operand needs an fp32/tfloat32 partner")
    if {st.decl.dtype, mv.decl.dtype} == {"float8_e4m3", "float8_e4m3fn"}:
        raise NkiccError("E132", "nc_matmul mixes the legacy float8_e4m3 and the OCP float8_e4m3fn", None,
                         "use one of the two for both operands")
    if _transpose_passthrough(dst, st, is_transpose, generation):
        pass  # transpose mode (NeuronCore-v3 and newer) writes a 16-bit input to PSUM as it is
    elif dst.decl.dtype == "bfloat16":
        require_generation(generation, 4, "nc_matmul into a bfloat16 PSUM tile (other than in transpose mode)")
    elif dst.decl.dtype != "float32":
        raise NkiccError("E132", f"nc_matmul dst is {dst.decl.dtype}; the Tensor Engine accumulates into float32 "
                                 "PSUM (bfloat16 too on NeuronCore-v4)", None, "declare the PSUM tile nl.float32")
    if accumulate not in (None, True, False):
        raise NkiccError("E103", "nc_matmul accumulate must be None, True or False")
    attrs = {"accumulate": accumulate, **({"double_row": True} if double else {})}
    return Emit([dst], [st, mv], attrs)


def _transpose_passthrough(dst, st, is_transpose, generation: int) -> bool:
    """The Tensor Engine's transpose mode (is_transpose=True, NeuronCore-v3 and newer) passes
    FP16/BF16 data to PSUM in its own dtype instead of float32 (the architecture guide of
    Trainium2); the NKI Library transposes bfloat16 into bfloat16 PSUM from gen3 on."""
    return (bool(is_transpose) and generation >= 3 and dst.decl.dtype == st.decl.dtype
            and dst.decl.dtype in ("bfloat16", "float16"))


def _transpose(op: Op, read):
    return [(0, as_tiles(f32(read(op.ins[0]))).T)]


def _transpose_engine(op: Op, decls) -> str:
    # into SBUF it is the Vector Engine's 32x32 transpose
    return "dve" if decls[op.outs[0].tensor].buffer == "sbuf" else "pe"


def _transpose_cost(op: Op, ctx: CostContext) -> float:
    if ctx.engine != "pe":
        return ctx.ns(ctx.fixed_cycles(op) + max(ctx.table.elementwise_min, free_size(op.outs[0])))
    src = op.ins[0]
    return ctx.ns(ctx.fixed_cycles(op) + max(partitions(src), min(ctx.table.matmul_min_rows, free_size(src))))


@instruction(family="matmul", compute=_transpose, engine=_transpose_engine, cost=_transpose_cost)
def nc_transpose(dst, data, engine=enums.engine.unknown, name=None, **_hw_hints):
    """dst = data.T: on the Tensor Engine (<= 128 x 128, into PSUM) or the
    Vector Engine (<= 32 x 32, into SBUF); dst's buffer decides, and engine,
    where given, must agree with it."""
    dst, data = tensor(dst, "nc_transpose dst"), tensor(data, "nc_transpose data")
    on_chip(data, "nc_transpose data")
    on_chip(dst, "nc_transpose dst")
    p, f = data.shape[0], free(data)
    if dst.shape[0] != f or free(dst) != p:
        raise NkiccError("E140", f"nc_transpose of [{p}, {f}] needs dst [{f}, {p}], got {list(dst.shape)}")
    if f > 128:
        raise NkiccError("E130", f"nc_transpose of {f} free elements; at most 128")
    unit = enums.engine_choice(engine, (None, "pe", "dve"), "nc_transpose")
    if unit is not None and unit != ("pe" if dst.buffer == "psum" else "dve"):
        raise NkiccError("E103", f"nc_transpose on the {enums.UNIT_ENGINES[unit]} engine writes "
                                 f"{'PSUM' if unit == 'pe' else 'SBUF'}, dst {dst.name} is in {dst.buffer}", None,
                         "the Tensor Engine transposes into a PSUM tile, the Vector Engine (32 x 32) into SBUF")
    if dst.buffer != "psum" and (p > 32 or f > 32):
        raise NkiccError("E130", f"nc_transpose of [{p}, {f}] into {dst.buffer} runs on the Vector Engine, "
                                 f"which transposes at most 32 x 32", None,
                         "transpose on the Tensor Engine into a PSUM tile, or in 32 x 32 blocks")
    return Emit([dst], [data])
