"""When the executions of a rotating DMA that touched some memory finish.

A DMA whose executions write disjoint memory (a load into a[:, k, :] for
each k) rotates over the DMA queues, so its executions finish out of order.
An instruction that waits for such a DMA needs only the executions whose
memory it touches: matmul k waits for the load of tile k, not for the loads
of tiles k + 1.. issued before it. That is what the unrolled program a
compiler emits does (one semaphore per tile); a rolled wait on "every
execution so far" would serialize the loads of a whole loop before the
first use of any of them.

Narrowing a wait so drops what a wait on the whole DMA would have implied
(its other executions, and what they waited for); plugins/schedule.py
therefore names every dependence through a rotating DMA in full.

`RegionFinishes` keeps, per DMA, the latest finish for each memory box
(group of tensors sharing bytes, partition range, byte range) its executions
read or wrote; a box is a superset of the bytes touched, so a wait computed
from it is never too short (the hazard checker would report one that is).
"""
from __future__ import annotations

# prune finished boxes when this many are kept
_PRUNE_AT = 64
# never keep more than this many boxes per DMA
_MAX_KEPT = 512


class RegionFinishes:
    __slots__ = ("_fin", "_limit", "latest_ns", "_dropped_ns")

    def __init__(self) -> None:
        self._fin: dict[tuple, float] = {}
        self._limit = _PRUNE_AT
        self.latest_ns = 0.0  # the latest finish of any execution so far
        # the latest finish among the boxes pruned: every wait is at least this (a wait from an engine
        # that had not run yet when they were pruned must not start before them; for the others it is
        # no later than their engine frees, so it costs nothing)
        self._dropped_ns = float("-inf")

    @property
    def dropped_ns(self) -> float:
        """The latest finish among the boxes pruned: every wait is at least this."""
        return self._dropped_ns

    def live(self, after: float) -> dict[tuple, float]:
        """The boxes whose executions finish after `after`, with their finishes."""
        return {b: t for b, t in self._fin.items() if t > after}

    def load(self, boxes: dict[tuple, float], latest_ns: float, dropped_ns: float) -> None:
        """Hold these boxes and finishes (the timing model's restore and shift)."""
        self._fin, self.latest_ns, self._dropped_ns = boxes, latest_ns, dropped_ns

    def record(self, boxes, finish: float, horizon) -> None:
        """An execution that touched `boxes` (group, p_lo, p_hi, b_lo, b_hi)
        finishes at `finish`. horizon: a callable giving a time no later
        instruction of the engines that have run so far can start before
        (asked only now and then)."""
        fin = self._fin
        for b in boxes:
            if fin.get(b, -1.0) < finish:
                fin[b] = finish
        if finish > self.latest_ns:
            self.latest_ns = finish
        if len(fin) > self._limit:
            h = horizon()
            for b in [b for b, f in fin.items() if f <= h]:
                self._dropped_ns = max(self._dropped_ns, fin.pop(b))
            if len(fin) > _MAX_KEPT:
                # an engine idle since early on holds the horizon back: keep the memory (and the cost
                # of each wait) bounded by dropping the earliest-finishing half; waits on them become
                # at least their latest finish, longer than needed perhaps, never shorter
                for b, f in sorted(fin.items(), key=lambda kv: kv[1])[:len(fin) // 2]:
                    del fin[b]
                    self._dropped_ns = max(self._dropped_ns, f)
            self._limit = max(_PRUNE_AT, 2 * len(fin))

    def latest(self, boxes, after: float) -> float:
        """The latest finish after `after` of an execution whose boxes overlap
        any of `boxes` (`after` when none)."""
        best = max(after, self._dropped_ns)
        for (g, p0, p1, b0, b1), f in self._fin.items():
            if f > best:
                for (h, q0, q1, c0, c1) in boxes:
                    if g == h and p0 <= q1 and q0 <= p1 and b0 < c1 and c0 < b1:
                        best = f
                        break
        return best
