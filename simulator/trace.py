"""Perfetto / chrome://tracing timelines of a machine simulation.

The file is Chrome trace-event JSON (https://ui.perfetto.dev opens it, as does
chrome://tracing): one track (a thread of process 1) per engine and per DMA
queue, one complete ("X") event per executed instruction (name: the opcode;
args: kernel file:line, op id, loop iteration indices), and loop iterations as
complete events on "loop" tracks (one per loop variable, more where its
iterations overlap in time). Times are
the simulator's estimates (see timing.py). The number of events is capped
(`max_events`); the file's metadata says when the cap cut it short.
"""
from __future__ import annotations

import json

DEFAULT_MAX_EVENTS = 200_000
PID = 1
LOOP_TID = 1000  # loop tracks come after the engine and DMA queue tracks


class TraceRecorder:
    def __init__(self, kernel_name: str, target_name: str, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.kernel_name = kernel_name
        self.target_name = target_name
        self.max_events = max_events
        self.ops: list[tuple] = []     # (plan, start_ns, finish_ns, iteration tuple)
        self.loops: list[tuple] = []   # (var, iteration, start_ns, finish_ns, depth)
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

    def loop(self, var: str, t: int, start: float, finish: float, depth: int) -> None:
        if len(self.ops) + len(self.loops) >= self.max_events:
            self.dropped += 1
            return
        self.loops.append((var, t, start, finish, depth))

    def to_dict(self, track_names: dict[int, str]) -> dict:
        """track_names: tid -> name for every engine / DMA queue track."""
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                               "args": {"name": f"nkicc {self.kernel_name} ({self.target_name})"}}]
        for tid, name in sorted(track_names.items()):
            events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                           "args": {"sort_index": tid}})
        for plan, start, finish, iters, tid in self.ops:
            args = {"loc": plan.loc_str, "id": plan.id}
            if iters:
                args["iter"] = ",".join(f"{v}={i}" for v, i in zip(plan.loop_vars, iters))
            events.append({"name": plan.opcode, "cat": plan.engine, "ph": "X", "pid": PID, "tid": tid,
                           "ts": start / 1000.0, "dur": (finish - start) / 1000.0, "args": args})
        # loop iterations: complete events on "loop" tracks, one set per loop variable;
        # iterations of a loop may overlap in time (the next one's loads start early),
        # so each goes to the first lane of its loop that is free by then
        by_var: dict[str, list] = {}
        for rec in self.loops:
            by_var.setdefault(rec[0], []).append(rec)
        tid = LOOP_TID
        for var, recs in by_var.items():
            lanes: list[float] = []  # end time of each lane's last iteration
            first_tid = tid
            for _, t, start, finish, depth in sorted(recs, key=lambda r: (r[2], r[3])):
                lane = next((i for i, end in enumerate(lanes) if end <= start), None)
                if lane is None:
                    lane = len(lanes)
                    lanes.append(finish)
                    name = f"loop {var}" + (f" ({lane + 1})" if lane else "")
                    events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
                    events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                                   "args": {"sort_index": tid}})
                    tid += 1
                lanes[lane] = finish
                events.append({"name": f"{var}={t}", "cat": "loop", "ph": "X", "pid": PID, "tid": first_tid + lane,
                               "ts": start / 1000.0, "dur": (finish - start) / 1000.0,
                               "args": {"loop": var, "iteration": t, "depth": depth}})
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

    def write(self, path: str, track_names: dict[int, str]) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(track_names), f, separators=(",", ":"))
