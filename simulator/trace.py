"""Perfetto / chrome://tracing timelines of a machine simulation.

The file is Chrome trace-event JSON (https://ui.perfetto.dev opens it, as does
chrome://tracing): one track (a thread of process 1) per engine and per DMA
queue, one complete ("X") event per executed instruction (name: the opcode;
args: kernel file:line, op id, the tensors it writes by the kernel's names,
loop iteration indices), and loop iterations as
complete events on "loop" tracks (one per source loop, named with the loop's
variable as the kernel writes it and its file:line; more tracks where its
iterations overlap in time). Times are
the simulator's estimates (see timing.py). The number of events is capped
(`max_events`); the file's metadata says when the cap cut it short.
"""
from __future__ import annotations

import json
import linecache
import os
import re
from dataclasses import dataclass

DEFAULT_MAX_EVENTS = 200_000
PID = 1
LOOP_TID = 1000  # loop tracks come after the engine and DMA queue tracks


_FOR = re.compile(r"^\s*(?:async\s+)?for\s+([A-Za-z_]\w*)\s+in\b")


def loop_label(loop) -> tuple[str, str]:
    """(variable, "file.py:LINE") of an IR loop as the kernel's source writes it:
    the `for NAME in` of its line; else the IR's variable without the suffixes
    passes add (`i7.mb1.mb1` -> `i7`)."""
    var = loop.var.split(".", 1)[0]
    if loop.loc is None:
        return var, "?"
    m = _FOR.match(linecache.getline(loop.loc.file, loop.loc.line))
    return (m.group(1) if m else var), f"{os.path.basename(loop.loc.file)}:{loop.loc.line}"


class TraceRecorder:
    def __init__(self, kernel_name: str, target_name: str, max_events: int = DEFAULT_MAX_EVENTS,
                 decls: dict | None = None) -> None:
        self.kernel_name = kernel_name
        self.decls = decls or {}  # tensor declarations: instructions name what they write as the kernel does
        self.target_name = target_name
        self.max_events = max_events
        self.ops: list[tuple] = []     # (plan, start_ns, finish_ns, iteration tuple)
        self.loops: list[tuple] = []   # ((var, file:line), iteration, start_ns, finish_ns, depth)
        self.dropped = 0

    @property
    def count(self) -> int:
        return len(self.ops) + len(self.loops)

    @property
    def capped(self) -> bool:
        return self.dropped > 0

    def full(self) -> bool:
        return len(self.ops) + len(self.loops) >= self.max_events

    def op(self, plan, start: float, finish: float, iters: tuple, tid: int) -> None:
        if len(self.ops) + len(self.loops) >= self.max_events:
            self.dropped += 1
            return
        self.ops.append((plan, start, finish, iters, tid))

    def loop(self, label: tuple[str, str], t: int, start: float, finish: float, depth: int,
             first: int = 0, step: int = 1) -> None:
        """Iteration t of an IR loop; the source's index is first + step * t (a
        split loop's piece starts past 0)."""
        if len(self.ops) + len(self.loops) >= self.max_events:
            self.dropped += 1
            return
        self.loops.append((label, first + step * t, start, finish, depth))

    def to_dict(self, track_names: dict[int, str]) -> dict:
        """track_names: tid -> name for every engine / DMA queue track."""
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                               "args": {"name": f"nkicc {self.kernel_name} ({self.target_name})"}}]
        for tid, name in sorted(track_names.items()):
            events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                           "args": {"sort_index": tid}})
        writes: dict[int, str] = {}
        for plan, start, finish, iters, tid in self.ops:
            args = {"loc": plan.loc_str, "id": plan.id}
            w = writes.get(plan.id)
            if w is None:
                w = writes[plan.id] = ", ".join(dict.fromkeys(
                    self.decls[a.tensor].described() for a in plan.op.outs if a.tensor in self.decls))
            if w:
                args["writes"] = w
            if iters:
                args["iter"] = ",".join(f"{v}={i}" for v, i in zip(plan.loop_vars, iters))
            events.append({"name": plan.opcode, "cat": plan.engine, "ph": "X", "pid": PID, "tid": tid,
                           "ts": start / 1000.0, "dur": (finish - start) / 1000.0, "args": args})
        # loop iterations: complete events on "loop" tracks, one set per source loop
        # (the pieces a split or multi-buffered loop became share its tracks);
        # iterations of a loop may overlap in time (the next one's loads start early),
        # so each goes to the first lane of its loop that is free by then
        by_loop: dict[tuple, list] = {}
        for rec in self.loops:
            by_loop.setdefault(rec[0], []).append(rec)
        tid = LOOP_TID
        for (var, where), recs in by_loop.items():
            lanes: list[float] = []  # end time of each lane's last iteration
            first_tid = tid
            for _, t, start, finish, depth in sorted(recs, key=lambda r: (r[2], r[3])):
                lane = next((i for i, end in enumerate(lanes) if end <= start), None)
                if lane is None:
                    lane = len(lanes)
                    lanes.append(finish)
                    name = f"loop {var} at {where}" + (f" (overlap {lane})" if lane else "")
                    events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
                    events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                                   "args": {"sort_index": tid}})
                    tid += 1
                lanes[lane] = finish
                events.append({"name": f"{var}={t}", "cat": "loop", "ph": "X", "pid": PID, "tid": first_tid + lane,
                               "ts": start / 1000.0, "dur": (finish - start) / 1000.0,
                               "args": {"loop": var, "at": where, "iteration": t, "depth": depth}})
        return {
            "traceEvents": events,
            "displayTimeUnit": "ns",
            "otherData": {
                "generator": "nkicc machine simulator",
                "kernel": self.kernel_name,
                "target": self.target_name,
                "time_unit": "microseconds (estimates from the cost table, not measurements)",
                "max_events": self.max_events,
                "capped": self.capped,
                "dropped_events": self.dropped,
            },
        }

    def timeline(self, track_names: dict[int, str]) -> "Timeline":
        """The instructions by engine / DMA queue track (what the picture draws)."""
        by_tid: dict[int, list] = {}
        for plan, start, finish, _, tid in self.ops:
            by_tid.setdefault(tid, []).append((start / 1000.0, (finish - start) / 1000.0, plan.opcode))
        tracks = [(track_names.get(t, f"track {t}"), by_tid[t]) for t in sorted(by_tid)]
        return Timeline(self.kernel_name, self.target_name, tracks, self.capped)

    def write(self, path: str, track_names: dict[int, str]) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(track_names), f, separators=(",", ":"))


@dataclass
class Timeline:
    """What each engine and DMA queue of one simulation did when: the instructions
    of every track that ran one, in track order (pe, dve, act, pool, then the
    queues). A SimReport holds one when the simulation kept a trace; plot.py
    draws it. Times in microseconds, estimates."""
    kernel: str
    target: str
    tracks: list  # [(track name, [(start us, duration us, opcode)])]
    capped: bool = False  # the trace hit its event cap: later instructions are missing

    @classmethod
    def from_trace(cls, trace: dict) -> "Timeline":
        """From a Perfetto trace as TraceRecorder writes it (loop tracks left out)."""
        names, order, events = {}, {}, {}
        for e in trace.get("traceEvents", []):
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                names[e["tid"]] = e["args"]["name"]
            elif e.get("ph") == "M" and e.get("name") == "thread_sort_index":
                order[e["tid"]] = e["args"]["sort_index"]
            elif e.get("ph") == "X" and e.get("cat") != "loop":
                events.setdefault(e["tid"], []).append((float(e["ts"]), float(e["dur"]), e["name"]))
        tids = sorted(events, key=lambda t: (order.get(t, t), t))
        other = trace.get("otherData", {})
        return cls(other.get("kernel", "kernel"), other.get("target", "?"),
                   [(names.get(t, f"track {t}"), events[t]) for t in tids], bool(other.get("capped")))

    @property
    def end_us(self) -> float:
        return max((s + d for _, evs in self.tracks for s, d, _ in evs), default=0.0)
