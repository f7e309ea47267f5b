"""Instruction costs for the machine simulator.

ESTIMATES, NOT MEASUREMENTS. Every number below comes from the public NKI
instruction documentation and architecture guides (the vendor's NKI docs), not
from a profile of real hardware. They live in one table per target
(`COST_TABLES`) so that recalibrating is a matter of editing numbers here, or of
passing `MachineSimulator(..., costs=replace(cost_table(target), ...))`.

Cycle counts are engine cycles; an engine's clock comes from the Target
(pe_ghz, dve_ghz, act_ghz, pool_ghz). DMA costs are in nanoseconds and bytes
per nanosecond per queue (Target.dma_bytes_per_ns unless the table overrides it).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Access, Op, TensorDecl
from ..ir import dtypes

# engines that run compute instructions; DMA queues are separate resources
COMPUTE_ENGINES = ("pe", "dve", "act", "pool")


@dataclass(frozen=True)
class CostTable:
    """Per-target instruction costs (estimates; see the module docstring)."""
    name: str
    # any instruction: a static overhead, plus the start of an SBUF/PSUM access
    fixed_cycles: int = 100
    onchip_access_cycles: int = 60
    # nc_matmul: max(min(matmul_min_rows, M), N) cycles; fp32 inputs cost x matmul_fp32_factor
    matmul_min_rows: int = 64
    matmul_fp32_factor: int = 4
    # Vector / Scalar / GpSimd element-wise, tensor_copy, memset: max(elementwise_min, N)
    elementwise_min: int = 64
    # tensor_tensor: max(elementwise_min, tensor_tensor_factor * N) (factor 1 when an input is in PSUM)
    tensor_tensor_factor: int = 2
    # tensor_reduce: reduce_factor * N; tensor_tensor_scan: scan_factor * N
    reduce_factor: int = 1
    scan_factor: int = 2
    # GpSimd iota: iota_base_cycles + N
    iota_base_cycles: int = 150
    # DMA: fixed latency, then bytes / bandwidth of one queue
    dma_fixed_ns: float = 1300.0
    dma_bytes_per_ns: float | None = None  # None: Target.dma_bytes_per_ns
    # a minor (innermost) stride above this many bytes scales bandwidth by dma_strided_factor
    dma_strided_bytes: int = 16
    dma_strided_factor: float = 0.5
    # contiguous rows shorter than this scale bandwidth by dma_small_row_factor
    dma_efficient_row_bytes: int = 2048
    dma_small_row_factor: float = 0.5


# One table per target. They are equal today because the public docs give one
# set of cycle counts for all three generations (clocks and DMA bandwidth differ,
# and come from the Target); recalibrate a target by editing its entry.
COST_TABLES: dict[str, CostTable] = {
    "trn1": CostTable("trn1"),
    "trn2": CostTable("trn2"),
    "trn3": CostTable("trn3"),
}


def cost_table(target) -> CostTable:
    """The table for a Target (a generic one for targets not listed)."""
    return COST_TABLES.get(getattr(target, "name", ""), CostTable(getattr(target, "name", "generic")))


def engine_ghz(engine: str, target) -> float:
    return {"pe": target.pe_ghz, "dve": target.dve_ghz, "act": target.act_ghz,
            "pool": target.pool_ghz}.get(engine, target.dve_ghz)


def _free_size(a: Access) -> int:
    """Elements per partition of an on-chip access (the first pair is the partition dim)."""
    n = 1
    for _, num in a.pattern[1:]:
        n *= num
    return n


def _partitions(a: Access) -> int:
    return a.pattern[0][1] if a.pattern else 1


def compute_cycles(op: Op, decls: dict[str, TensorDecl], t: CostTable, engine: str = "pe") -> int:
    """Engine cycles of a compute instruction on `engine`."""
    code = op.opcode
    ins = [a for a in op.ins if isinstance(a, Access)]
    onchip = any(decls[a.tensor].on_chip for a in list(ins) + list(op.outs))
    fixed = t.fixed_cycles + (t.onchip_access_cycles if onchip else 0)
    out = op.outs[0] if op.outs else None
    if code == "nc_matmul":
        st, mv = ins[0], ins[1]
        m, n = _free_size(st), _free_size(mv)
        cycles = max(min(t.matmul_min_rows, m), n)
        if any(decls[a.tensor].dtype == "float32" for a in (st, mv)):
            cycles *= t.matmul_fp32_factor
        return fixed + cycles
    if code == "nc_transpose" and engine == "pe":
        src = ins[0]
        return fixed + max(_partitions(src), min(t.matmul_min_rows, _free_size(src)))
    if code == "tensor_tensor":
        n = _free_size(out)
        factor = 1 if any(decls[a.tensor].buffer == "psum" for a in ins) else t.tensor_tensor_factor
        return fixed + max(t.elementwise_min, factor * n)
    if code == "tensor_reduce":
        return fixed + t.reduce_factor * _free_size(ins[0])
    if code == "tensor_tensor_scan":
        return fixed + t.scan_factor * _free_size(out)
    if code == "iota":
        return fixed + t.iota_base_cycles + _free_size(out)
    # element-wise on Vector / Scalar / GpSimd: tensor_copy, memset, tensor_scalar, activation, select, ...
    n = _free_size(out) if out is not None else (_free_size(ins[0]) if ins else 1)
    return fixed + max(t.elementwise_min, n)


def _run_bytes(a: Access, item: int) -> int:
    """Bytes of the innermost contiguous run of an access."""
    run = 1
    for step, num in reversed(a.pattern):
        if num == 1:
            continue
        if step == run:
            run *= num
        else:
            break
    return run * item


def _minor_stride_bytes(a: Access, item: int) -> int:
    for step, num in reversed(a.pattern):
        if num > 1:
            return abs(step) * item
    return item


def dma_ns(op: Op, decls: dict[str, TensorDecl], t: CostTable, target) -> tuple[float, int]:
    """(nanoseconds, bytes moved) of a DMA instruction on one queue."""
    dst, src = op.outs[0], op.ins[0]
    ddecl, sdecl = decls[dst.tensor], decls[src.tensor]
    ditem, sitem = dtypes.itemsize(ddecl.dtype), dtypes.itemsize(sdecl.dtype)
    nbytes = max(dst.count * ditem, src.count * sitem)
    bw = t.dma_bytes_per_ns or target.dma_bytes_per_ns
    if max(_minor_stride_bytes(dst, ditem), _minor_stride_bytes(src, sitem)) > t.dma_strided_bytes:
        bw *= t.dma_strided_factor
    rows = []
    for a, decl, item in ((dst, ddecl, ditem), (src, sdecl, sitem)):
        if decl.on_chip:  # bytes per partition row
            rows.append(a.count // max(1, _partitions(a)) * item)
        else:
            rows.append(_run_bytes(a, item))
    if min(rows) < t.dma_efficient_row_bytes:
        bw *= t.dma_small_row_factor
    return t.dma_fixed_ns + nbytes / bw, nbytes


def op_cost_ns(op: Op, engine: str, decls: dict[str, TensorDecl], target, table: CostTable) -> float:
    if engine == "dma":
        return dma_ns(op, decls, table, target)[0]
    return compute_cycles(op, decls, table, engine) / engine_ghz(engine, target)


__all__ = ["CostTable", "COST_TABLES", "cost_table", "compute_cycles", "dma_ns", "op_cost_ns", "engine_ghz",
           "COMPUTE_ENGINES"]
