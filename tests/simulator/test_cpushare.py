"""simulator/cpushare.py: a core is spare by the other processes' CPU use, not by the load
average (which counts the simulator's own threads and so would turn them off once they run)."""
import os
import time

import pytest

from nkicc.simulator import cpushare


class Clock:
    """Scripted machine counters: wall seconds, the machine's busy CPU seconds, this process's."""

    def __init__(self, monkeypatch):
        self.wall = self.busy = self.own = 0.0
        monkeypatch.setattr(cpushare, "_machine_busy_s", lambda: self.busy)
        monkeypatch.setattr(cpushare, "_own_s", lambda: self.own)
        monkeypatch.setattr(cpushare.time, "monotonic", lambda: self.wall)
        monkeypatch.setattr(cpushare.os, "cpu_count", lambda: 2)

    def run(self, seconds, own_cores, other_cores):
        self.wall += seconds
        self.own += seconds * own_cores
        self.busy += seconds * (own_cores + other_cores)


def test_own_threads_do_not_count(monkeypatch):
    clock = Clock(monkeypatch)
    monkeypatch.setattr(cpushare.os, "getloadavg", lambda: (2.0, 2.0, 2.0))  # ourselves, two threads
    share = cpushare.CpuShare()
    clock.run(1.0, own_cores=2.0, other_cores=0.0)
    assert share.spare()
    clock.run(1.0, own_cores=1.2, other_cores=0.8)  # another process took most of a core
    assert not share.spare()
    clock.run(1.0, own_cores=1.0, other_cores=0.3)
    assert share.spare()


def test_a_short_interval_keeps_the_last_verdict(monkeypatch):
    clock = Clock(monkeypatch)
    share = cpushare.CpuShare()
    clock.run(1.0, own_cores=1.0, other_cores=1.0)
    assert not share.spare()
    clock.run(cpushare.MIN_INTERVAL_S / 4, own_cores=2.0, other_cores=0.0)  # too short to tell
    assert not share.spare()
    clock.run(1.0, own_cores=2.0, other_cores=0.0)  # measured from the last verdict's sample
    assert share.spare()


def test_first_look_uses_the_load_average_less_this_process(monkeypatch):
    Clock(monkeypatch)
    monkeypatch.setattr(cpushare.os, "getloadavg", lambda: (1.3, 1.0, 1.0))
    assert cpushare.CpuShare().spare()  # 0.3 cores of others
    monkeypatch.setattr(cpushare.os, "getloadavg", lambda: (1.8, 1.0, 1.0))
    assert not cpushare.CpuShare().spare()


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat")
def test_machine_busy_time_counts_this_process():
    """The real counters: spinning for 0.4 s of this process's CPU time (the kernel's per-process
    clock, however little of a core a loaded machine gives it) adds about that much to the machine's
    busy time."""
    busy0, own0 = cpushare._machine_busy_s(), cpushare._own_s()
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass
    busy, own = cpushare._machine_busy_s() - busy0, cpushare._own_s() - own0
    assert own >= 0.3 and busy >= own - 0.05
