"""A target: one NeuronCore generation's memories, engines, clocks and
instruction costs, defined once. Everything reads it from here: the targets
plugin registers these definitions (a third-party target comes through the
same `nkicc_targets` hook), `nkicc.pass_api` re-exports `Target` for passes,
the cost rules (`ir/ops`) and the machine simulator read `target.costs`, and
the cache key holds every field (the cost table included).

ESTIMATES, NOT MEASUREMENTS of any particular chip. Every cost constant
carries its source on the line above it:

  [doc: FILE, "SECTION"]  a number the vendor's public guides state (FILE is
                          under nki/guides/architecture/ of aws-neuron-sdk);
  [fitted: ...]           chosen by nkicc, with the figure it was chosen on;
  [assumed: ...]          no public figure; the reason for the value.

Engine clocks come from the same guides' "Compute Engine Specifications"
tables. docs/fidelity.md lists every constant in one table and compares the
model with the tutorials' measured figures (bench/fidelity.py). Recalibrate a
target by editing its definition below, or pass
`MachineSimulator(..., costs=replace(target.costs, ...))`.

Documents cited:
  ARCH1 = trainium_inferentia2_arch.rst (NeuronCore-v2, trn1)
  ARCH2 = trainium2_arch.rst (NeuronCore-v3, trn2)
  ARCH3 = trainium3_arch.rst (NeuronCore-v4, trn3)
"""
from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024 ** 3


@dataclass(frozen=True)
class CostTable:
    """A target's instruction costs (see the module docstring for the sources)."""
    # --- every compute instruction ---------------------------------------------------------
    # [doc: ARCH1, "Vector Engine" > "Cost Model"] a static instruction overhead of 100 engine cycles
    fixed_cycles: int = 100
    # [doc: ARCH1, "Accessing SBUF/PSUM tensors using compute engines" > "Tensor access overhead"]
    # about 60 cycles to start an access
    onchip_access_cycles: int = 60
    # --- Tensor Engine ----------------------------------------------------------------------
    # [doc: ARCH1, "Tensor Engine" > "Performance Consideration"] max(N, MM_INIT_LATENCY), MM_INIT_LATENCY 64
    matmul_min_rows: int = 64
    # [doc: ARCH1, "Tensor Engine"] 92 TFLOPS bf16/fp8 vs 23 TFLOPS fp32 inputs: fp32 is 4x slower
    matmul_fp32_factor: int = 4
    # [doc: ARCH1, "Tensor Engine" > "Performance Consideration"] nc_matmul is a LoadStationary then a
    # MultiplyMoving; "background LoadStationary" loads the next stationary while the current one
    # multiplies, and "Fast LoadStationary" is up to 4x faster than a MultiplyMoving of the same free
    # size (the bound taken): it costs only where the matmul waits for its operands
    load_stationary_speedup: int = 4
    # --- Vector / Scalar / GpSimd ---------------------------------------------------------
    # [doc: ARCH1, "Vector Engine" > "Cost Model"] one input: about N cycles (N > 128; below, the fixed
    # cost dominates: the floor is the same MM_INIT-like 64 cycles [assumed])
    elementwise_min: int = 64
    # [doc: ARCH1, "Vector Engine" > "Cost Model"] two input tiles: about 2N cycles (factor 1 when one
    # input streams from PSUM [doc: ARCH2, "Vector Engine" performance mode, 1b/1c conditions])
    tensor_tensor_factor: int = 2
    # [assumed: one pass over the input, like the one-input rule above]
    reduce_factor: int = 1
    # [assumed: tensor_tensor_scan reads two inputs, so the two-input rule: 2N]
    scan_factor: int = 2
    # [assumed: a GpSimd iota start-up; no public figure]
    iota_base_cycles: int = 150
    # --- DMA --------------------------------------------------------------------------------
    # [doc: ARCH1, "Data movement between HBM and SBUF using DMAs"] 16 DMA engines per NeuronCore
    # (ARCH2 / ARCH3: 128 DMA engines for 8 NeuronCores, "paired with 16x DMA engines")
    dma_engines: int = 16
    # [doc: ARCH1, same section] each engine drives a peak of 27 GiB/s (bytes/ns); trn2 [assumed] the
    # same; trn3 [assumed] what lets 16 engines reach its HBM share (no public per-engine figure)
    dma_engine_bytes_per_ns: float = 27 * GIB / 1e9
    # [doc: ARCH1/2/3 device overview] HBM bandwidth of the device / its NeuronCores (bytes/ns per core):
    # the DMA engines of one core share it
    hbm_bytes_per_ns: float = 3000.0 / 8
    # [doc: nki/deep-dives/nki-dma-bandwidth-guide.rst, "Why Large Contiguous DMA Payloads Are Required"]
    # about 1300 ns of fixed cost per transfer (setting up its descriptors and semaphores) before its
    # bytes move: the fixed latency of one DMA instruction
    dma_fixed_ns: float = 1300.0
    # [doc: ARCH1, "Data movement ..."] a transfer is split into DMA buffers (contiguous chunks); each
    # costs an overhead, amortized by "4KiB or above" per partition. [assumed] the overhead, as bytes of
    # transfer time: 4 KiB rows then move at 4096 / (4096 + 512) = 89% of peak, 512 B rows at 50%
    dma_buffer_overhead_bytes: int = 512
    # [doc: ARCH1, "Accessing SBUF/PSUM tensors using compute engines"] a most-minor stride above
    # 16 bytes halves the bandwidth of an SBUF access; [assumed] the same for a DMA's SBUF side
    # (the guide states it for the engines)
    dma_strided_bytes: int = 16
    dma_strided_factor: float = 0.5
    # [doc: ARCH2, "HBM2SBUF DMA transpose" > "Performance Consideration"] up to 90% of a copy's throughput
    dma_transpose_factor: float = 0.9
    # [doc: ARCH2, "SBUF2SBUF DMA transpose" > "Performance Consideration"] up to 50% of DMA throughput
    dma_transpose_sbuf_factor: float = 0.5
    # --- collectives between chips ---------------------------------------------------------
    # [doc: about-neuron/arch/neuron-hardware/trainium2.rst and trainium3.rst, "Interconnect"]
    # GB/s = bytes/ns per chip: trn1 384, trn2 1280, trn3 2560
    link_bytes_per_ns: float = 1280.0
    # [assumed: a collective's start-up; no public figure]
    collective_fixed_ns: float = 5000.0

    def dma_peak_bytes_per_ns(self, engines: int | None = None) -> float:
        """Peak bandwidth of a transfer spread over `engines` DMA engines
        (all of them by default), capped by the core's share of HBM."""
        n = self.dma_engines if engines is None else max(1, min(engines, self.dma_engines))
        return min(n * self.dma_engine_bytes_per_ns, self.hbm_bytes_per_ns)


@dataclass(frozen=True)
class Target:
    """A NeuronCore generation: its memories, engines, clocks and costs."""
    name: str
    sbuf_partition_bytes: int
    psum_partition_bytes: int = 16 * 1024
    psum_bank_bytes: int = 2048
    partitions: int = 128
    # engine clocks: the architecture guides' "Compute Engine Specifications" tables
    pe_ghz: float = 2.4
    dve_ghz: float = 0.96
    act_ghz: float = 1.2
    pool_ghz: float = 1.2
    dma_queues: int = 16
    description: str = ""
    nc_version: int = 3  # NeuronCore generation, what nisa.get_nc_version() answers while tracing
    # the rest of the timing model (DMA and HBM bandwidth included); a target that
    # names none gets the generic table
    costs: CostTable = field(default_factory=CostTable)


# One definition per generation. Cycle counts are the same for all three (the public
# guides give one set, for NeuronCore-v2); clocks and bandwidths differ.
TRN1 = Target("trn1", sbuf_partition_bytes=192 * 1024, pe_ghz=2.8, dve_ghz=1.12, act_ghz=1.4, pool_ghz=1.4,
              description="NeuronCore-v2 (Trainium1)", nc_version=2,
              # [doc: ARCH1 overview] 820 GB/s for 2 NeuronCores
              costs=CostTable(hbm_bytes_per_ns=820.0 / 2, link_bytes_per_ns=384.0))
TRN2 = Target("trn2", sbuf_partition_bytes=224 * 1024, pe_ghz=2.4, dve_ghz=0.96, act_ghz=1.2, pool_ghz=1.2,
              description="NeuronCore-v3 (Trainium2)",
              # [doc: ARCH2 overview] 3 TB/s for 8 NeuronCores; [assumed] 27 GiB/s per engine as on NeuronCore-v2
              costs=CostTable(hbm_bytes_per_ns=3000.0 / 8))
TRN3 = Target("trn3", sbuf_partition_bytes=256 * 1024, pe_ghz=2.4, dve_ghz=1.2, act_ghz=1.2, pool_ghz=1.2,
              description="NeuronCore-v4 (Trainium3)", nc_version=4,
              # [doc: ARCH3 overview] 4.7 TB/s for 8 NeuronCores; [assumed] per-engine rate so that 16 engines
              # reach the HBM share (no public per-engine figure)
              costs=CostTable(hbm_bytes_per_ns=4700.0 / 8, dma_engine_bytes_per_ns=4700.0 / 8 / 16,
                              link_bytes_per_ns=2560.0))
GENERATIONS = (TRN1, TRN2, TRN3)

# NeuronCore generation -> the target of that generation (what E135 tells the user to compile for)
TARGET_OF_GENERATION = {t.nc_version: t.name for t in GENERATIONS}
# the vendor's generation names (NEURON_PLATFORM_TARGET_OVERRIDE=gen3) -> the target
GENERATION_NAMES = {f"gen{t.nc_version}": t.name for t in GENERATIONS}
