"""Whether the simulator's second thread has a core to itself.

The batched path (batched.py) gives large GEMMs BLAS threads and large
element-wise passes two halves only while a core is to spare: with every core
busy the second thread waits for one and loses. The one-minute load average
cannot tell: it counts this process's own threads, so once they run the load
reaches the CPU count and the threads turn themselves off (the full-size static
seed ran most of its GEMMs on one thread on an idle machine that way). What
counts is the other processes' CPU use: the machine's busy time (/proc/stat)
less this process's own (os.times), over the interval since the last look.
Where /proc/stat is missing, the load average less this process's one busy
thread stands in. `halves` is the element-wise pass that asks.
"""
from __future__ import annotations

import os
import time

import numpy as np

# a core is spare while the other processes use less than (CPUs - 1 - SPARE_CORE) cores
SPARE_CORE = 0.5
MIN_INTERVAL_S = 0.2  # /proc/stat counts 10 ms ticks: a shorter interval is mostly rounding
# element-wise passes over at least this many destination elements run in two halves on two threads:
# a strided 20 MB dst += terms took 3.7-4.2 ms so against 6.6-7.1 ms on one (2 vCPUs at load 2.3).
# Only while a core is to spare, as BLAS threads (gemm.py): with every core busy the second thread
# waits for a core and loses (mm2 --scale 8 at load 3-4: 0.35-0.65 s with threads against 0.21-0.39 s
# without, best of 5, the two alternating)
PARALLEL_ELEMENTS = 1 << 18


def _machine_busy_s() -> float | None:
    """CPU seconds every process on the machine has spent busy since boot, or None."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        return None
    ticks = [int(x) for x in fields[1:9]]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)  # less idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    t = os.times()
    return t.user + t.system


class CpuShare:
    """spare(): whether the other processes leave a core for a second thread of this one."""

    def __init__(self) -> None:
        self.cpus = os.cpu_count() or 1
        self._mark = self._sample()
        self._verdict: bool | None = None

    @staticmethod
    def _sample():
        busy = _machine_busy_s()
        return None if busy is None else (time.monotonic(), busy, _own_s())

    def others(self) -> float | None:
        """Cores the other processes used since the last look (None: too soon to tell, or no
        /proc/stat)."""
        if self._mark is None or time.monotonic() - self._mark[0] < MIN_INTERVAL_S:
            return None
        now = self._sample()
        if now is None:
            return None
        dt = now[0] - self._mark[0]
        used = max(0.0, (now[1] - self._mark[1]) - (now[2] - self._mark[2])) / dt
        self._mark = now
        return used

    def spare(self) -> bool:
        used = self.others()
        if used is not None:
            self._verdict = used < self.cpus - 1 - SPARE_CORE
        elif self._verdict is None:  # no interval yet: the load average, less this process's thread
            try:
                self._verdict = os.getloadavg()[0] - 1 < self.cpus - 1 - SPARE_CORE
            except OSError:  # not Unix: as if busy
                self._verdict = False
        return self._verdict


def halves(sim, fn, read, dst: np.ndarray, split: bool) -> None:
    """fn(read, dst), on two cores for a large dst: each half of the first loop axis on one
    thread (numpy lets go of the GIL in its loops). `split`: that axis is one of dst's own (not
    summed away), so the halves write disjoint elements (batched execution is legal only then)."""
    n = dst.shape[0] if dst.ndim else 0
    if not split or n < 2 or dst.size < PARALLEL_ELEMENTS or not sim.cpu.spare():
        fn(read, dst)
        return
    parts = (slice(0, n // 2), slice(n // 2, n))
    part = lambda h: (lambda a: _first_axis(read(a), h))
    later = sim.helper.submit(fn, part(parts[1]), dst[parts[1]])
    fn(part(parts[0]), dst[parts[0]])
    later.result()


def _first_axis(x, h: slice):
    return x[h] if isinstance(x, np.ndarray) and x.ndim else x
