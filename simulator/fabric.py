"""The core's share of HBM bandwidth, which all its DMA queues share.

The machine simulator times instructions in program order, but DMA queues
run in parallel: a transfer issued later in the program can start earlier
(its queue was free, its semaphores already met) than one issued before it.
A single "bandwidth free at" time would make every transfer queue behind
all those issued before it, even while the bandwidth sits idle waiting for
an earlier-issued transfer that starts late: the idle time would be lost
and the DMA side of a kernel would look slower than its bytes allow.

`Fabric` keeps the busy intervals instead and fills a new transfer into the
free time from its start on, as a fluid (a transfer may use several gaps):
earlier-issued transfers keep priority, later ones use what they left. The
intervals that end before any later transfer can start are dropped, so the
memory stays bounded (the simulator says how early that is: `floor`).
"""
from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter

# drop finished intervals when this many are kept
_COMPACT_AT = 256
# never keep more intervals than this
_MAX_KEPT = 1024
_START = itemgetter(0)  # an interval's start: what bisect searches by


class Fabric:
    __slots__ = ("_busy", "_limit", "_blocked")

    def __init__(self) -> None:
        self._busy: list[list[float]] = []   # sorted, disjoint [start, end) intervals
        self._limit = _COMPACT_AT
        self._blocked = 0.0  # all time before this counts as busy (intervals dropped to bound memory)

    @property
    def blocked(self) -> float:
        """All time before this counts as busy."""
        return self._blocked

    def live(self, floor: float) -> list[tuple[float, float]]:
        """The busy intervals a reservation that starts at `floor` or later can meet, clipped there
        (the timing model's snapshot: what lies before the floor is history)."""
        return [(max(lo, floor), hi) for lo, hi in self._busy if hi > floor]

    def load(self, busy, blocked: float, dt: float = 0.0) -> None:
        """Hold these busy intervals (sorted, disjoint) moved dt later, and count all time before
        `blocked` as busy (the timing model's restore and shift)."""
        self._busy = [[lo + dt, hi + dt] for lo, hi in busy]
        self._blocked = blocked

    def reserve(self, start: float, duration: float, floor) -> float:
        """Move `duration` ns worth of bytes at the full bandwidth, from
        `start` on, in the time no earlier reservation holds; returns when the
        last byte has moved. floor: a callable giving the earliest start any
        later reservation can have (asked only now and then)."""
        if duration <= 0:
            return start
        busy = self._busy
        t = start if start > self._blocked else self._blocked
        i = bisect_right(busy, t, key=_START) - 1
        if i >= 0 and busy[i][1] > t:  # inside a busy interval: wait for its end
            t = busy[i][1]
        i += 1
        left = duration
        taken = []
        while left > 0:
            nxt = busy[i][0] if i < len(busy) else float("inf")
            gap = nxt - t
            if gap >= left:
                taken.append((t, t + left))
                t += left
                left = 0.0
            else:
                if gap > 0:
                    taken.append((t, nxt))
                    left -= gap
                t = busy[i][1]
                i += 1
        for lo, hi in taken:
            self._insert(lo, hi)
        if len(busy) >= self._limit:
            self._compact(floor())
        return t

    def _insert(self, lo: float, hi: float) -> None:
        busy = self._busy
        i = bisect_right(busy, lo, key=_START)
        # merge with the interval before and after when they touch
        if i > 0 and busy[i - 1][1] >= lo:
            busy[i - 1][1] = max(busy[i - 1][1], hi)
            i -= 1
        else:
            busy.insert(i, [lo, hi])
        while i + 1 < len(busy) and busy[i + 1][0] <= busy[i][1]:
            busy[i][1] = max(busy[i][1], busy[i + 1][1])
            del busy[i + 1]

    def _compact(self, floor: float) -> None:
        busy = [b for b in self._busy if b[1] > floor]
        if len(busy) > _MAX_KEPT:
            # a queue idle since early on holds the floor back: keep the memory (and the cost of a
            # reservation) bounded by treating the time up to the end of the earliest half as busy;
            # a transfer that could have used a gap there moves later, never earlier
            half = len(busy) // 2
            self._blocked = max(self._blocked, busy[half - 1][1])
            busy = busy[half:]
        self._busy = busy
        self._limit = max(_COMPACT_AT, 2 * len(busy))
