"""The constants the instruction cost rules read, one table per target.

ESTIMATES, NOT MEASUREMENTS: every number comes from the public NKI
instruction documentation and architecture guides, not from a profile of real
hardware. Recalibrate a target by editing its entry, or pass
`MachineSimulator(..., costs=replace(cost_table(target), ...))`.
"""
from __future__ import annotations

from dataclasses import dataclass


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
    # dma_transpose: a fraction of a copy's bandwidth (estimate: elements cross partitions one by one)
    dma_transpose_factor: float = 0.25
    # collectives between chips: the inter-chip interconnect (GB/s = bytes/ns per chip: trn1 384,
    # trn2 1280, trn3 2560, about-neuron/arch/neuron-hardware/trainium2.rst and trainium3.rst,
    # "Interconnect"), and a fixed start-up (estimate)
    link_bytes_per_ns: float = 1280.0
    collective_fixed_ns: float = 5000.0


# One table per target. They are equal today because the public docs give one
# set of cycle counts for all three generations (clocks and DMA bandwidth differ,
# and come from the Target); recalibrate a target by editing its entry.
COST_TABLES: dict[str, CostTable] = {
    "trn1": CostTable("trn1", link_bytes_per_ns=384.0),
    "trn2": CostTable("trn2"),
    "trn3": CostTable("trn3", link_bytes_per_ns=2560.0),
}


def cost_table(target) -> CostTable:
    """The table for a Target (a generic one for targets not listed)."""
    return COST_TABLES.get(getattr(target, "name", ""), CostTable(getattr(target, "name", "generic")))
