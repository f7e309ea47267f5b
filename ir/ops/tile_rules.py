"""Trace-time rules of the statistics, sort/search and gather families
(stats.py, sort.py, gather.py): dtypes, partition counts, element ranges and
integer arguments. Each raises a NkiccError without a location; the tracer
adds the kernel's line."""
from __future__ import annotations

from ..errors import NkiccError
from ..nodes import Op
from .checks import free, scalar
from ..nodes import Access
from .core import CostContext, free_size, partitions

# GpSimd cores: eight, each wired to 16 contiguous SBUF partitions
GPSIMD_PARTITIONS = 16
QUADRANT = 32


def dtype_in(t, allowed: tuple[str, ...], what: str) -> None:
    if t.decl.dtype not in allowed:
        raise NkiccError("E132", f"{what} must be {' or '.join(allowed)}, {t.name} is {t.decl.dtype}", None,
                         f"declare it with dtype nl.{allowed[0]}")


def same_dtype(a, b, what: str) -> None:
    if a.decl.dtype != b.decl.dtype:
        raise NkiccError("E132", f"{what}: {a.name} is {a.decl.dtype} but {b.name} is {b.decl.dtype}; this "
                                 "instruction does not convert", None, "give both the same dtype")


def sbuf_only(t, what: str) -> None:
    if t.buffer != "sbuf":
        raise NkiccError("E120", f"{what} must be in SBUF (the GpSimd Engine cannot access {t.buffer}), "
                                 f"{t.name} is in {t.buffer}", None, "copy it to an SBUF tile first")


def gpsimd_sbuf(unit: str | None, what: str, *tiles) -> None:
    """On the GpSimd engine (unit "pool", the one an engine= argument chose) every tile must be in SBUF."""
    if unit == "pool":
        for t in tiles:
            sbuf_only(t, what)


def gpsimd_sbuf_operands(op: Op, decls) -> None:
    """verify rule of GpSimd instructions: every operand stays in SBUF after the passes."""
    for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access)):
        if decls[a.tensor].buffer != "sbuf":
            raise NkiccError("E120", f"{op.opcode} uses {a.tensor} in {decls[a.tensor].buffer}; the GpSimd Engine "
                                     "reaches SBUF only", op.loc, "keep its operands in SBUF")


def same_partitions(a, b, what: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise NkiccError("E140", f"{what}: {a.name} spans {a.shape[0]} partitions, {b.name} {b.shape[0]}", None,
                         "give both the same partition count")


def free_between(t, lo: int, hi: int, what: str) -> None:
    n = free(t)
    if not lo <= n <= hi:
        raise NkiccError("E130", f"{what} has {n} elements per partition; the instruction takes {lo} to {hi}", None,
                         f"slice it to between {lo} and {hi} elements per partition")


def free_is(t, n: int, what: str) -> None:
    if free(t) != n:
        raise NkiccError("E140", f"{what} must hold {n} elements per partition, {t.name} has shape "
                                 f"{list(t.shape)}", None, f"use a [{t.shape[0]}, {n}] tile")


def max_dims(t, n: int, what: str) -> None:
    if len(t.shape) > n:
        raise NkiccError("E130", f"{what} may have at most {n} dimensions, {t.name} has shape {list(t.shape)}",
                         None, "flatten its free dimensions with a view")


def int_arg(value, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """A compile-time integer in [lo, hi]."""
    v = scalar(value, what)
    if isinstance(v, float):
        if not v.is_integer():
            raise NkiccError("E103", f"{what} must be an integer, got {value!r}")
        v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        bounds = f"{lo} <= {what} <= {hi}" if lo is not None and hi is not None else \
            f"{what} >= {lo}" if lo is not None else f"{what} <= {hi}"
        raise NkiccError("E103", f"{what} is {v}; the instruction needs {bounds}")
    return v


def start_partition(t) -> int | None:
    """The first partition a view of an on-chip tile accesses, when it is a compile-time constant."""
    a = t.access
    rows = t.decl.size // t.decl.shape[0] if t.decl.shape else 1
    if not a.pattern or a.pattern[0][0] != rows:
        return None
    if not a.offset.is_const:
        return None  # a loop-dependent start: verify checks it over the loop range
    return a.offset.const // rows


def all_ones(dtype: str) -> int:
    """The all-ones bit pattern of an integer dtype, as the value it reads as
    (unsigned: the maximum; signed: -1). Float destinations get 2**32 - 1."""
    if dtype.startswith("uint"):
        return (1 << (8 * {"uint8": 1, "uint16": 2, "uint32": 4}[dtype])) - 1
    if dtype.startswith("int"):
        return -1
    return 0xFFFFFFFF


def input_streaming_cost(op: Op, ctx: CostContext) -> float:
    """ESTIMATE (no published cycle count): one pass over the largest operand,
    max(elementwise_min, N) cycles for N elements per partition, as the
    streaming element-wise instructions cost. Sort and search instructions
    read far more than they write, so their input sets the time."""
    n = max(free_size(a) for a in op.ins + op.outs if isinstance(a, Access))
    return ctx.ns(ctx.fixed_cycles(op) + max(ctx.table.elementwise_min, n))


__all__ = ["GPSIMD_PARTITIONS", "QUADRANT", "all_ones", "dtype_in", "free_between", "free_is", "gpsimd_sbuf",
           "gpsimd_sbuf_operands",
           "input_streaming_cost",
           "int_arg", "max_dims", "partitions", "same_dtype", "same_partitions", "sbuf_only", "start_partition"]
