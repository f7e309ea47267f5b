"""The machine simulator's hazard checks: a missing semaphore, found.

Every timed instruction's accesses are checked against the accesses to the
same bytes that have not finished when it starts: a read against unfinished
writes (read-after-write), and with hazards="all" a write against unfinished
reads and writes. A conflict is E171 naming both instructions and the
semaphore the schedule left out. Records are kept per memory group (tensors
the allocator gave shared bytes) and kind, keyed by region so that the newest
access to a region replaces the older one, and dropped once no engine can
start early enough to conflict with them.

HazardChecks is a part of MachineSimulator (simulator/machine.py) kept in a
module of its own. It works out where an access sits (`_region`: the box of
bytes a hazard record, or a rotating DMA's wait, is kept by) and reads the
simulator's memory groups (`neighbours`), clock (the engines' free times:
timing.py, which keeps the records between checks), loop variables and
engine names.
"""
from __future__ import annotations

import numpy as np

from ..ir import NkiccError

_INF = float("inf")
_CLEANUP_AT = 24          # records per group and kind before a cleanup (then twice what remained)
_OVERLAP_CACHE = 1 << 16  # exact overlap answers kept (two accesses and where they sit relative to each other)
_MAX_RECORDS = 4096      # per buffer and kind; beyond this the oldest are forgotten (reported)
_REGION_CACHE = 512      # cached regions per access (distinct start offsets)


class Records(dict):
    """Hazard records of one memory group and kind (reads or writes), keyed by
    region. maxfin is never below the latest finish among them: a check from an
    instruction that starts at or after it skips the scan (almost every check
    does: the records that could still conflict are the few in flight)."""
    __slots__ = ("maxfin", "limit")

    def __init__(self) -> None:
        super().__init__()
        self.maxfin = -_INF
        self.limit = _CLEANUP_AT  # cleanup when more are kept (then twice what remained)


class HazardChecks:
    """The hazard-checking part of MachineSimulator."""

    def _hazards(self, p, start: float, finish: float) -> None:
        """Check the op's accesses against the unfinished accesses recorded
        for its memory group (tensors sharing bytes), then record its own.
        A record: (p_lo, p_hi, b_lo, b_hi, start, finish, plan, acc, e, dense, fast, serial),
        kept in a Records per group and kind keyed by its region, so that the
        latest access to a region replaces the older one."""
        check_all = self.hazards == "all"
        region = self._region
        rregions = [(acc, acc.rcache.get(acc.cur) or region(acc)) for acc in p.hz_reads]
        wregions = [(acc, acc.rcache.get(acc.cur) or region(acc)) for acc in p.hz_writes]
        # read after write: the bytes' last writer must have finished
        for acc, r in rregions:
            d = acc.wrecs
            if d.maxfin > start:
                self._scan(d, "read-after-write", p, acc, r, start, "writes")
        if check_all:
            for acc, r in wregions:
                d = acc.wrecs
                if d.maxfin > start:
                    self._scan(d, "write-after-write", p, acc, r, start, "writes")
                d = acc.rrecs
                if d.maxfin > start:
                    self._scan(d, "write-after-read", p, acc, r, start, "reads")
        serial = self.executed
        for acc, r in wregions:
            rec = (r[1], r[2], r[3], r[4], start, finish, p, acc, r[6], r[5], r[7], serial)
            d, key = acc.wrecs, r[8]
            d.pop(key, None)
            d[key] = rec  # the newest write of a region is the one reads must wait for
            if finish > d.maxfin:
                d.maxfin = finish
            if check_all:
                acc.rrecs.pop(key, None)  # a read this write had to wait for (checked above)
            if len(d) > d.limit:
                self._cleanup(acc.wrecs, acc.rrecs)
        if check_all:
            for acc, r in rregions:
                d, key = acc.rrecs, r[8]
                old = d.get(key)
                if old is None or old[5] <= finish:
                    d.pop(key, None)
                    d[key] = (r[1], r[2], r[3], r[4], start, finish, p, acc, r[6], r[5], r[7], serial)
                    if finish > d.maxfin:
                        d.maxfin = finish
                    if len(d) > d.limit:
                        self._cleanup(acc.wrecs, acc.rrecs)

    def _scan(self, d: Records, kind: str, p, acc, r, start: float, verb: str) -> None:
        """Raise E171 for a record of `d` that overlaps region r and finishes after
        `start`; tighten d.maxfin to the latest finish kept."""
        overlap = self._overlap
        latest = -_INF
        for w in d.values():
            f = w[5]
            if f > latest:
                latest = f
            if f > start and overlap(r, acc, w):
                self._raise(kind, p, acc, start, w, verb, f)
        d.maxfin = latest

    def _cleanup(self, wrecs: Records, rrecs: Records) -> None:
        """Drop records no future access can conflict with: finished before any
        engine of the program can start again, or covered by a newer dense write
        (or, for reads, by a newer read that ends no earlier)."""
        efree = self.clock.efree
        horizon = min(efree) if efree else 0.0
        boxes = []  # (serial, box, finish) of dense writes, newest first
        for key, x in reversed(list(wrecs.items())):
            if x[5] <= horizon or any(b0 <= x[0] and x[1] <= b1 and c0 <= x[2] and x[3] <= c1
                                      for _, (b0, b1, c0, c1), _ in boxes):
                del wrecs[key]
            elif x[9] and x[10]:
                boxes.append((x[11], (x[0], x[1], x[2], x[3]), x[5]))
        rboxes = []
        for key, x in reversed(list(rrecs.items())):
            if x[5] <= horizon or any(s > x[11] and b0 <= x[0] and x[1] <= b1 and c0 <= x[2] and x[3] <= c1
                                      for s, (b0, b1, c0, c1), _ in boxes) \
                    or any(f >= x[5] and b0 <= x[0] and x[1] <= b1 and c0 <= x[2] and x[3] <= c1
                           for _, (b0, b1, c0, c1), f in rboxes):
                del rrecs[key]
            elif x[9] and x[10]:
                rboxes.append((x[11], (x[0], x[1], x[2], x[3]), x[5]))
        for d in (wrecs, rrecs):
            d.limit = max(_CLEANUP_AT, 2 * len(d))
            if len(d) > _MAX_RECORDS:  # pathological: forget the oldest
                for key in list(d)[:len(d) - _MAX_RECORDS]:
                    del d[key]
                    self.clock.forgotten += 1

    def _overlap(self, r, acc, rec) -> bool:
        if not (r[1] <= rec[1] and rec[0] <= r[2] and r[3] < rec[3] and rec[2] < r[4]):
            return False
        if (r[5] and r[7]) and (rec[9] and rec[10]):
            return True
        # exact: both (partition set, byte set) materialised, which costs milliseconds for a large
        # strided access; the answer depends only on where the two sit relative to each other, and
        # a loop asks the same question every iteration
        wa, wb = self._shift(acc, r[6], r[7]), self._shift(rec[7], rec[8], rec[10])
        where = (wa[0] - wb[0], wa[1] - wb[1]) if wa is not None and wb is not None else (wa, wb)
        key = (id(acc), id(rec[7]), where)
        hit = self._overlaps.get(key)
        if hit is None:
            pa, ba, ia = self._sets(acc, r[6], r[7])
            pb, bb, ib = self._sets(rec[7], rec[8], rec[10])
            hit = False
            if np.intersect1d(pa, pb, assume_unique=True).size:
                j = np.searchsorted(ba, bb + ib, side="left") - 1
                ok = j >= 0
                hit = bool(np.any(ba[j[ok]] + ia > bb[ok]))
            if len(self._overlaps) >= _OVERLAP_CACHE:
                self._overlaps.clear()
            self._overlaps[key] = hit
        return hit

    @staticmethod
    def _shift(acc, e: int, fast: bool):
        """(partitions, bytes) by which _sets moves the access's pattern at start e; None when
        _sets gives the whole tile, wherever e is."""
        t = acc.t
        if not fast:
            return None
        if not t.onchip:
            return 0, e * t.item
        p0, f0 = divmod(e, t.F)
        return p0, f0 * t.item

    def _sets(self, acc, e: int, fast: bool):
        t = acc.t
        if not fast:
            return (np.arange(t.P), np.arange(t.address, t.address + t.F * t.item, t.item), t.item)
        part, free = acc.sets()
        p0, b0 = self._shift(acc, e, fast)
        base = t.address if t.onchip else 0  # (HBM: bytes from the tensor's start)
        return part + p0, base + free * t.item + b0, t.item

    # --- where an access sits ---------------------------------------------------------------

    def _boxes(self, p) -> list[tuple]:
        """(memory group, p_lo, p_hi, b_lo, b_hi) of every access of the op now."""
        out = []
        for acc in p.accs + p.scalars:  # runtime offsets are read too: their loads must be waited for
            r = self._region(acc)
            out.append((self.neighbours[r[0]], r[1], r[2], r[3], r[4]))
        return out

    def _region(self, acc):
        """(tensor, p_lo, p_hi, b_lo, b_hi (exclusive), dense, e, fast) of an access now."""
        e = acc.cur
        r = acc.rcache.get(e)
        if r is None:
            r = self._region_at(acc, e)
            if len(acc.rcache) < _REGION_CACHE:
                acc.rcache[e] = r
        return r

    def _region_at(self, acc, e: int):
        """(tensor, p_lo, p_hi, b_lo, b_hi (exclusive), dense, e, fast, key): key names
        the region exactly (the box itself when the access fills it)."""
        t = acc.t
        if acc.vector is not None:  # a gather / scatter may touch any row: the whole tensor
            box, dense, fast = (0, 0, 0, t.size * t.item), True, False
        elif not t.onchip:
            box, dense, fast = (0, 0, (e + acc.lo_span) * t.item, (e + acc.hi_span + 1) * t.item), acc.dense, True
        else:
            pf = self._fast(acc, e)
            if pf is None:  # rows wrap or it runs off the tile: conservatively, the whole tile
                box, dense, fast = (0, t.P - 1, t.address, t.address + t.F * t.item), True, False
            else:
                p0, f0 = pf
                box = (p0 + acc.part_lo, p0 + acc.part_hi, t.address + (f0 + acc.free_lo) * t.item,
                       t.address + (f0 + acc.free_hi + 1) * t.item)
                dense, fast = acc.dense, True
        key = box if dense and fast else box + (id(acc), e)
        return (t.name,) + box + (dense, e, fast, key)

    def _fast(self, acc, e: int):
        """(partition, free) start of an on-chip access that maps onto a strided
        view of the tensor's bytes, or None when it wraps rows / runs off the tile."""
        t = acc.t
        p0, f0 = divmod(e, t.F)
        if p0 + acc.part_lo < 0 or p0 + acc.part_hi >= t.P or f0 + acc.free_lo < 0 or f0 + acc.free_hi >= t.F:
            return None
        return p0, f0

    def _raise(self, kind: str, p, acc, start: float, rec, verb: str, rec_finish: float) -> None:
        other = rec[6]
        mine = "reads" if kind == "read-after-write" else "writes"
        where = ", ".join(f"{v}={self.env[v]}" for v in p.loop_vars)
        where = f" (iteration {where})" if where else ""
        raise NkiccError(
            "E171",
            f"{kind} hazard: {p.opcode} (id {p.id}, {p.loc_str}) on {self.engines[p.ekey]} {mine} "
            f"{acc.t.decl.described()} at {start:.1f} ns{where}, before {other.opcode} (id {other.id}, {other.loc_str}) "
            f"on {self.engines[other.ekey]} that {verb} {rec[7].t.decl.described()} finishes at {rec_finish:.1f} ns",
            p.op.loc, f"a semaphore is missing: op {p.id} must wait for op {other.id} (a schedule bug)")
