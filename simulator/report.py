"""What a machine simulation reports: estimated time, engine use, DMA traffic."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

TIMING_NOTE = ("timings are estimates from nkicc's cost table (nkicc/simulator/timing.py), "
               "not measurements of hardware")

DMA_DIRECTIONS = ("hbm->sbuf", "sbuf->hbm", "hbm->hbm", "sbuf->sbuf", "other")


@dataclass
class EngineStats:
    instructions: int = 0
    busy_ns: float = 0.0
    utilisation: float = 0.0  # busy / total time (for "dma": busy / (total * queues used))


@dataclass
class SimReport:
    kernel: str
    target: str
    timing: bool
    executed: int = 0                     # instructions executed (loops unrolled at run time)
    total_ns: float | None = None         # estimated end-to-end time; None with timing off
    engines: dict[str, EngineStats] = field(default_factory=dict)   # pe dve act pool dma
    dma_queues: dict[str, EngineStats] = field(default_factory=dict)  # "q0".. for queues used
    dma_bytes: dict[str, int] = field(default_factory=lambda: {d: 0 for d in DMA_DIRECTIONS})
    spill_bytes: int = 0                  # bytes moved to/from tensors with role "spill"
    dma_transfers: int = 0
    wall_s: float = 0.0                   # host time the simulation took
    trace_file: str | None = None
    trace_events: int = 0
    trace_capped: bool = False
    prints: list = field(default_factory=list)  # nl.device_print output, in execution order
    batched_loops: dict = field(default_factory=dict)  # loop label -> entries run as whole-array ops
    note: str = TIMING_NOTE

    @property
    def total_us(self) -> float | None:
        return None if self.total_ns is None else self.total_ns / 1000.0

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.total_ns is not None:
            d["total_ns"] = round(self.total_ns, 3)
        for group in ("engines", "dma_queues"):
            for stats in d[group].values():
                stats["busy_ns"] = round(stats["busy_ns"], 3)
                stats["utilisation"] = round(stats["utilisation"], 4)
        d["wall_s"] = round(self.wall_s, 6)
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """A few human-readable lines for the CLI."""
        lines = [f"simulated {self.kernel} on {self.target}: {self.executed:,} instructions executed "
                 f"in {self.wall_s:.3f} s host time"]
        if self.total_ns is not None:
            lines.append(f"estimated time {self.total_ns / 1000:.3f} us ({self.note})")
        for name, s in self.engines.items():
            util = f", {100 * s.utilisation:.1f}% busy" if self.timing else ""
            lines.append(f"  {name:5s} {s.instructions:>10,} instructions{util}")
        moved = ", ".join(f"{k} {v:,} B" for k, v in self.dma_bytes.items() if v)
        lines.append(f"  DMA: {self.dma_transfers:,} transfers; {moved or 'no bytes'}"
                     + (f"; spill {self.spill_bytes:,} B" if self.spill_bytes else ""))
        if self.trace_file:
            capped = " (capped)" if self.trace_capped else ""
            lines.append(f"  trace: {self.trace_file}, {self.trace_events:,} events{capped}")
        return "\n".join(lines)
