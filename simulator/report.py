"""What a machine simulation reports: estimated time, engine use, DMA traffic."""
from __future__ import annotations

import base64
import html
import json
from dataclasses import asdict, dataclass, field, fields

from .plot import INSTALL, have_matplotlib, plot_timeline
from .trace import Timeline

TIMING_NOTE = ("timings are estimates from nkicc's cost table (nkicc/simulator/timing.py), "
               "not measurements of hardware")

DMA_DIRECTIONS = ("hbm->sbuf", "sbuf->hbm", "hbm->hbm", "sbuf->sbuf", "other")

# the names neuron-profile and the vendor's guides give the engines
ENGINE_NAMES = {"pe": "TensorE", "dve": "VectorE", "act": "ScalarE", "pool": "GpSimd", "dma": "DMA"}


@dataclass
class EngineStats:
    instructions: int = 0
    busy_ns: float = 0.0
    # the share of the estimated time the engine is executing, as neuron-profile's
    # engine_active_time_percent; for "dma", the time at least one queue moves data
    active_pct: float = 0.0


@dataclass
class SimReport:
    kernel: str
    target: str
    timing: bool
    executed: int = 0                     # instructions executed (loops unrolled at run time)
    total_ns: float | None = None         # estimated end-to-end time; None with timing off
    engines: dict[str, EngineStats] = field(default_factory=dict)   # pe dve act pool dma
    # engine -> percent of the estimated time it spends on the critical path (the chain of
    # instructions, each started by the one before it, that ends last); the largest bounds the kernel
    critical_path: dict[str, float] = field(default_factory=dict)
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
    unbatched_loops: dict = field(default_factory=dict)  # loop label -> why it ran per iteration
    # loop label -> iterations whose timing was not walked instruction by instruction but
    # added in closed form: whole periods of a loop whose timing repeats (periodic.py)
    closed_form_loops: dict = field(default_factory=dict)
    # batched instructions whose sums ran in another order than one instruction at a time (a
    # matmul as a bigger GEMM, an accumulation summed over its loop): results may differ from
    # the per-instruction path in the last bits there, and only there
    reordered_sums: int = 0
    note: str = TIMING_NOTE
    # the engines' instructions in time, when the simulation kept a trace (trace=...);
    # not part of the JSON (the Perfetto file is that)
    timeline: Timeline | None = field(default=None, repr=False, compare=False)

    @property
    def total_us(self) -> float | None:
        return None if self.total_ns is None else self.total_ns / 1000.0

    @property
    def active(self) -> dict[str, float]:
        """Engine -> active time in percent (pe, dve, act, pool, dma), as neuron-profile shows it."""
        return {name: s.active_pct for name, s in self.engines.items()}

    @property
    def bound(self) -> str | None:
        """The engine with the largest share of the critical path: what bounds the kernel."""
        return max(self.critical_path, key=self.critical_path.get) if self.critical_path else None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "timeline"}
        d["engines"] = {k: asdict(v) for k, v in self.engines.items()}
        d["dma_queues"] = {k: asdict(v) for k, v in self.dma_queues.items()}
        d["dma_bytes"], d["prints"] = dict(self.dma_bytes), list(self.prints)
        d["critical_path"] = dict(self.critical_path)
        if self.total_ns is not None:
            d["total_ns"] = round(self.total_ns, 3)
        for group in ("engines", "dma_queues"):
            for stats in d[group].values():
                stats["busy_ns"] = round(stats["busy_ns"], 3)
                stats["active_pct"] = round(stats["active_pct"], 2)
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
        if self.bound is not None:
            parts = ", ".join(f"{ENGINE_NAMES.get(e, e)} {v:.1f}%" for e, v in
                              sorted(self.critical_path.items(), key=lambda kv: -kv[1]))
            lines.append(f"  bound by {ENGINE_NAMES.get(self.bound, self.bound)}: critical path {parts}")
        for name, s in self.engines.items():
            active = f"  {s.active_pct:5.1f}% active" if self.timing else ""
            if self.timing and name == "dma" and len(self.dma_queues) > 1:
                active += " (any queue)"
            lines.append(f"  {name:5s} {ENGINE_NAMES.get(name, ''):8s}{s.instructions:>10,} instructions{active}")
        if self.timing and len(self.dma_queues) > 1:
            lines.append("        queues: " + ", ".join(f"{q} {s.active_pct:.1f}%" for q, s in self.dma_queues.items()))
        moved = ", ".join(f"{k} {v:,} B" for k, v in self.dma_bytes.items() if v)
        lines.append(f"  DMA: {self.dma_transfers:,} transfers; {moved or 'no bytes'}"
                     + (f"; spill {self.spill_bytes:,} B" if self.spill_bytes else ""))
        if self.trace_file:
            capped = " (capped)" if self.trace_capped else ""
            lines.append(f"  trace: {self.trace_file}, {self.trace_events:,} events{capped}")
        return "\n".join(lines)

    # --- the timeline picture (plot.py; matplotlib is an optional extra) ------------------

    def plot(self, path: str | None = None) -> bytes:
        """The engine timeline as PNG bytes (and written to `path`); needs a
        simulation that kept a trace, and matplotlib (E206 without it)."""
        return plot_timeline(self, path)

    def _repr_png_(self) -> bytes | None:
        """Jupyter: the timeline picture, when there is one and matplotlib is installed."""
        if self.timeline is None or not have_matplotlib():
            return None
        return self.plot()

    def _repr_html_(self) -> str:
        """Jupyter: the summary, and below it the timeline picture when there is one."""
        text = f"<pre>{html.escape(self.summary())}</pre>"
        png = self._repr_png_()
        if png is not None:
            text += f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" alt="engine timeline"/>'
        elif self.timeline is not None:
            text += f"<p>The timeline picture needs matplotlib: <code>{html.escape(INSTALL)}</code></p>"
        elif self.timing:
            text += ("<p>No timeline: simulate with <code>trace=True</code> (or a path) to keep one.</p>")
        return text
