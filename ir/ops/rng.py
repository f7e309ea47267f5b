"""Random numbers: nisa.rng, rand2, dropout, set_rng_seed, rand_set_state,
rand_get_state.

The hardware's generator (XORWOW per compute lane) is not specified bit for
bit, so nkicc defines its own, deterministic and documented in
docs/numerics.md ("Random numbers"): a counter-based hash. Each engine that
generates (Vector, GpSimd) keeps a state per partition lane, an EngineState
operand like the accumulators, so every analysis sees the order between the
instructions that use it:

- GpSimd: 6 uint32 words per lane, Vector: 24 (the element counts
  rand_get_state/rand_set_state move);
- the last word is a counter, the others are the key. The j-th value an
  instruction draws on lane p is h(h((counter + j) ^ k1) + k2), where h is
  a bijective 32-bit mixer and k1, k2 are hashed from the key words and p;
  the instruction then advances the counter by the values it drew per lane.

So the same state gives the same numbers, saving and restoring the state
repeats them, and lanes with equal states still draw different streams.
Both engines start from the all-zero state (defined: a kernel that never
seeds draws the same numbers on every run).
"""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Const, Op
from . import enums
from .checks import free, on_chip_tensors, per_partition
from .core import CostContext, Emit, EngineState, free_size, instruction, require_generation
from .tile_rules import dtype_in, gpsimd_sbuf, sbuf_only
from .values import F32, operand

DVE_RNG = EngineState("dve.rng", "uint32", 128, width=24, init=0)
POOL_RNG = EngineState("pool.rng", "uint32", 128, width=6, init=0)
_STATES = {"dve": DVE_RNG, "pool": POOL_RNG}

INT_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
RAND2_DTYPES = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32") + INT_DTYPES

_U32 = np.uint32
_GOLDEN = _U32(0x9E3779B9)


def mix32(x: np.ndarray) -> np.ndarray:
    """A bijective 32-bit mixer (xor-shift / multiply rounds, the 'lowbias32'
    constants); uint32 in, uint32 out, wrapping arithmetic."""
    x = np.asarray(x, dtype=_U32)
    x = x ^ (x >> _U32(16))
    x = x * _U32(0x7FEB352D)
    x = x ^ (x >> _U32(15))
    x = x * _U32(0x846CA68B)
    return x ^ (x >> _U32(16))


def draw(state: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(bits, next state): n uint32 values per lane from a (lanes, words) uint32 state."""
    state = np.asarray(state, dtype=_U32).reshape(state.shape[0], -1)
    lanes, words = state.shape
    h = mix32(np.arange(lanes, dtype=_U32) * _GOLDEN + _U32(0x6A09E667))
    for k in range(words - 1):
        h = mix32(h ^ state[:, k]) + _U32(k + 1) * _GOLDEN
    k1, k2 = h[:, None], mix32(h ^ _U32(0x5BD1E995))[:, None]
    counter = state[:, words - 1]
    index = counter[:, None] + np.arange(n, dtype=_U32)[None, :]
    bits = mix32(mix32(index ^ k1) + k2)
    after = state.copy()
    after[:, words - 1] = counter + _U32(n & 0xFFFFFFFF)
    return bits, after


def unit(bits: np.ndarray) -> np.ndarray:
    """Uniform fp32 in [0, 1) from the top 24 bits (every value exact in fp32)."""
    return (bits >> _U32(8)).astype(F32) * F32(2.0 ** -24)


def seeded_state(seed: int, words: int, lanes: int = 128) -> np.ndarray:
    """The state set_rng_seed gives every lane: key words hashed from the seed, counter 0."""
    key = mix32(_U32(seed & 0xFFFFFFFF) + _U32(0x3C6EF372) * (np.arange(words - 1, dtype=_U32) + _U32(1)))
    state = np.zeros((lanes, words), dtype=_U32)
    state[:, :words - 1] = key[None, :]
    return state


def _low_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The least significant bits of each value, as `dtype` holds them (signed: two's complement)."""
    return bits.astype(np.dtype(dtype), casting="unsafe")


def _state_operand(engine: str, lanes: int):
    return _STATES[engine].rows(lanes)


def _op_engine(op: Op, decls) -> str:
    return op.attr("engine")


def _state_cost(op: Op, ctx: CostContext) -> float:
    """ESTIMATE: a fixed instruction plus one cycle per state word moved per lane."""
    return ctx.ns(ctx.fixed_cycles(op) + _STATES[op.attr("engine")].width)


# --- rng ---------------------------------------------------------------------------

def _rng(op: Op, read):
    dst = op.outs[0]
    bits, after = draw(read(op.ins[0]), free_size(dst))
    return [(0, _low_bits(bits, op.attr("dtype"))), (1, after)]


@instruction(family="rng", compute=_rng, engine=_op_engine)
def rng(dst, engine=enums.engine.vector, name=None):
    """Fill the integer tile dst with pseudo-random bits from the engine's
    generator: 32 random bits per element, truncated to dst's dtype (its
    least significant bits). dst is int8/16/32 or uint8/16/32 in SBUF or PSUM
    (SBUF on the GpSimd engine); engine is nisa.engine.vector (default) or
    nisa.engine.gpsimd. The generator is nkicc's (docs/numerics.md)."""
    (dst,) = on_chip_tensors({"dst": dst}, "rng")
    dtype_in(dst, INT_DTYPES, "rng dst")
    eng = enums.engine_choice(engine, ("dve", "pool"), "rng")
    if eng == "pool":
        require_generation(dst.generation, 3, "nisa.rng on the GpSimd engine")
    gpsimd_sbuf(eng, "rng dst", dst)
    return Emit([dst, _state_operand(eng, dst.shape[0])], [_state_operand(eng, dst.shape[0])],
                {"engine": eng, "dtype": dst.decl.dtype})


# --- rand2 -------------------------------------------------------------------------

def _rand2(op: Op, read):
    dst = op.outs[0]
    bits, after = draw(read(op.ins[0]), free_size(dst))
    lo, hi = operand(op.ins[1], read), operand(op.ins[2], read)
    return [(0, lo + (hi - lo) * unit(bits)), (1, after)]


@instruction(family="rng", compute=_rand2, engine="dve", since=4)
def rand2(dst, min, max, name=None):
    """Fill dst with uniform pseudo-random values in [min, max) on the Vector
    Engine: u = (32 random bits >> 8) / 2**24, dst = min + (max - min) * u,
    computed in fp32 and converted to dst's dtype (floats, fp8, or integers).
    min and max are numbers or [P, 1] tiles (one range per partition); as
    numbers, min < max."""
    (dst,) = on_chip_tensors({"dst": dst}, "rand2")
    dtype_in(dst, RAND2_DTYPES, "rand2 dst")
    lo, hi = per_partition(min, dst, "rand2 min"), per_partition(max, dst, "rand2 max")
    if isinstance(lo, Const) and isinstance(hi, Const) and not lo.value < hi.value:
        raise NkiccError("E103", f"rand2 needs min < max, got min={lo.value}, max={hi.value}", None,
                         "swap them or widen the range")
    state = _state_operand("dve", dst.shape[0])
    return Emit([dst, state], [state, lo, hi], {"engine": "dve"})


# --- dropout -----------------------------------------------------------------------

def _dropout(op: Op, read):
    data = read(op.ins[1])
    bits, after = draw(read(op.ins[0]), free_size(op.outs[0]))
    keep = unit(bits) >= operand(op.ins[2], read)
    values = np.where(keep.reshape(data.shape[0], -1), np.asarray(data).reshape(data.shape[0], -1), 0)
    return [(0, values.astype(data.dtype)), (1, after)]


@instruction(family="rng", compute=_dropout, engine="dve")
def dropout(dst, data, prob, name=None):
    """dst = data with each element replaced by 0 with probability `prob`, on
    the Vector Engine: an element is kept when its uniform draw
    u = (32 random bits >> 8) / 2**24 is >= prob (so prob 0 keeps all, 1
    drops all); kept values are not rescaled. prob is a number or a [P, 1]
    tile (one probability per partition); for integer data a prob tile is
    float32. dst has data's shape and dtype."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "dropout")
    if (dst.shape[0], free(dst)) != (data.shape[0], free(data)):
        raise NkiccError("E140", f"dropout dst {list(dst.shape)} and data {list(data.shape)} must have the same "
                                 "partitions and free size", None, "give dst data's shape")
    if dst.decl.dtype != data.decl.dtype:
        raise NkiccError("E132", f"dropout dst is {dst.decl.dtype} but data is {data.decl.dtype}; they must match",
                         None, "give dst data's dtype")
    p = per_partition(prob, dst, "dropout prob")
    if isinstance(p, Const):
        if not 0.0 <= float(p.value) <= 1.0:
            raise NkiccError("E103", f"dropout prob must be in [0, 1], got {p.value}")
    else:
        if not p.decl.dtype.startswith(("float", "bfloat", "tfloat")):
            raise NkiccError("E132", f"dropout prob tile is {p.decl.dtype}; it must be a float type", None,
                             "give the probabilities as float32")
        if not data.decl.dtype.startswith(("float", "bfloat", "tfloat")) and p.decl.dtype != "float32":
            raise NkiccError("E132", f"dropout of {data.decl.dtype} data takes a float32 prob tile, got "
                                     f"{p.decl.dtype}", None, "give the probabilities as float32")
    state = _state_operand("dve", dst.shape[0])
    return Emit([dst, state], [state, data, p], {"engine": "dve"})


# --- seeding and state -------------------------------------------------------------

def _set_seed(op: Op, read):
    seed = int(np.asarray(read(op.ins[0])).reshape(-1)[0].astype(np.int64)) & 0xFFFFFFFF
    return [(0, seeded_state(seed, DVE_RNG.width, DVE_RNG.partitions))]


@instruction(family="rng", compute=_set_seed, engine="dve", cost=_state_cost)
def set_rng_seed(src_seeds, name=None):
    """Seed the Vector Engine's generator from the one 32-bit value of
    src_seeds, a [1, 1] int32/uint32 tensor in SBUF or PSUM: every lane gets
    key words hashed from the seed and a zero counter, so the same seed gives
    the same numbers from nisa.rng, rand2 and dropout on the Vector Engine."""
    (src,) = on_chip_tensors({"src_seeds": src_seeds}, "set_rng_seed")
    if src.access.count != 1:
        raise NkiccError("E140", f"set_rng_seed src_seeds must be a [1, 1] tensor, got {list(src.shape)}", None,
                         "pass one seed value")
    dtype_in(src, ("int32", "uint32"), "set_rng_seed src_seeds")
    return Emit([DVE_RNG.rows(DVE_RNG.partitions)], [src], {"engine": "dve"})


def _state_tile(t, engine: str, what: str) -> None:
    dtype_in(t, ("uint32",), what)
    words = _STATES[engine].width
    if free(t) != words:
        raise NkiccError("E140", f"{what} holds {free(t)} state words per partition; the "
                                 f"{enums.UNIT_ENGINES[engine]} engine's generator has {words}", None,
                         f"use a [{t.shape[0]}, {words}] uint32 tile")


def _set_state(op: Op, read):
    return [(0, np.asarray(read(op.ins[0]), dtype=_U32).reshape(op.outs[0].pattern[0][1], -1))]


@instruction(family="rng", compute=_set_state, engine=_op_engine, cost=_state_cost, since=3)
def rand_set_state(src_seeds, engine=enums.engine.gpsimd, name=None):
    """Set the generator state of the first P lanes of the engine from
    src_seeds, a [P, W] uint32 SBUF tile: W = 6 words per lane on the GpSimd
    engine (default), 24 on the Vector engine. A state saved with
    rand_get_state and set again repeats the numbers drawn after the save."""
    (src,) = on_chip_tensors({"src_seeds": src_seeds}, "rand_set_state")
    eng = enums.engine_choice(engine, ("pool", "dve"), "rand_set_state")
    if eng == "dve":
        require_generation(src.generation, 4, "nisa.rand_set_state on the Vector engine")
    sbuf_only(src, "rand_set_state src_seeds")
    _state_tile(src, eng, "rand_set_state src_seeds")
    return Emit([_state_operand(eng, src.shape[0])], [src], {"engine": eng})


def _get_state(op: Op, read):
    return [(0, np.asarray(read(op.ins[0]), dtype=_U32))]


@instruction(family="rng", compute=_get_state, engine=_op_engine, cost=_state_cost, since=3)
def rand_get_state(dst, engine=enums.engine.gpsimd, name=None):
    """dst = the generator state of the first P lanes of the engine: a [P, W]
    uint32 tile, W = 6 on the GpSimd engine (default, dst in SBUF), 24 on the
    Vector engine (SBUF or PSUM)."""
    (dst,) = on_chip_tensors({"dst": dst}, "rand_get_state")
    eng = enums.engine_choice(engine, ("pool", "dve"), "rand_get_state")
    if eng == "dve":
        require_generation(dst.generation, 4, "nisa.rand_get_state on the Vector engine")
    gpsimd_sbuf(eng, "rand_get_state dst", dst)
    _state_tile(dst, eng, "rand_get_state dst")
    return Emit([dst], [_state_operand(eng, dst.shape[0])], {"engine": eng})


__all__ = ["DVE_RNG", "POOL_RNG", "draw", "mix32", "seeded_state", "unit"]
