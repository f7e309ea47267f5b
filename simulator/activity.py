"""Engine active time, as neuron-profile's summary reports it.

neuron-profile gives, per engine, the share of the kernel's run during which
the engine is executing an instruction (`tensor_engine_active_time_percent`,
..., `dma_active_time_percent`). A compute engine runs its instructions in
order, one at a time, so its active time is the sum of their durations. The
DMA figure counts a moment as active when any queue is moving data: the union
of the intervals of every DMA queue, not their sum, which `DmaActivity`
keeps as the simulator times each transfer.
"""
from __future__ import annotations

# merge the kept intervals when this many are pending
_COMPACT_AT = 256


class DmaActivity:
    """The union of busy intervals over several DMA queues, in bounded memory.

    Each queue's transfers come in start order (a queue runs one at a time), but
    the queues interleave, so an interval may arrive that starts before one
    already kept. The simulator says (`floor`) how early any later interval can
    start: the earliest time a DMA queue becomes free. Everything that ends
    by then is final and is folded into `closed_ns`."""

    __slots__ = ("closed_ns", "_pending", "_limit")

    def __init__(self) -> None:
        self.closed_ns = 0.0
        self._pending: list[tuple[float, float]] = []
        self._limit = _COMPACT_AT

    def add(self, start: float, finish: float, floor) -> None:
        """One transfer busy from start to finish (ns). floor: a callable giving
        the earliest start any later transfer can have; asked only now and then."""
        if finish <= start:
            return
        pending = self._pending
        pending.append((start, finish))
        if len(pending) >= self._limit:
            self._compact(floor())
            # an idle queue holds the floor back: wait for twice as many before trying again
            self._limit = max(_COMPACT_AT, 2 * len(self._pending))

    def _compact(self, floor: float) -> None:
        merged = _merge(self._pending)
        keep = []
        for lo, hi in merged:
            if hi <= floor:
                self.closed_ns += hi - lo
            else:
                keep.append((lo, hi))
        self._pending = keep

    def active_ns(self) -> float:
        return self.closed_ns + sum(hi - lo for lo, hi in _merge(self._pending))

    def state(self, floor: float) -> tuple[float, list[tuple[float, float]]]:
        """(active time so far, as active_ns gives it; the merged intervals a transfer that starts
        at `floor` or later can still overlap, clipped there)."""
        merged = _merge(self._pending)
        total = self.closed_ns + sum(hi - lo for lo, hi in merged)
        return total, [(max(lo, floor), hi) for lo, hi in merged if hi > floor]

    def load(self, total: float, live, dt: float = 0.0) -> None:
        """Active time `total`, of which the disjoint intervals `live` are still open; those move
        dt later (the timing model's shift)."""
        self._pending = [(lo + dt, hi + dt) for lo, hi in live]
        self.closed_ns = total - sum(hi - lo for lo, hi in live)

    def copy(self) -> "DmaActivity":
        new = DmaActivity()
        new.closed_ns, new._pending, new._limit = self.closed_ns, list(self._pending), self._limit
        return new


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time."""
    out: list[list[float]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def union_ns(intervals) -> float:
    """Total time covered by (start, finish) intervals (a trace's, for one track or several)."""
    return sum(hi - lo for lo, hi in _merge([(s, f) for s, f in intervals if f > s]))


def percent(part_ns: float, total_ns: float | None) -> float:
    """part / total in percent (0 when nothing ran)."""
    return 100.0 * part_ns / total_ns if total_ns else 0.0
