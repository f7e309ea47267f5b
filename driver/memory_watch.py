"""How much of a test item's memory is nkicc's: the item's peak resident set,
and the most that any nkicc call within it added on top of what the process
already held when the call began.

Linux keeps a process's peak RSS (VmHWM in /proc/self/status) and lets the
process reset it (writing 5 to /proc/self/clear_refs). A watch resets it as
each nkicc call begins, so that the call's own peak can be read when it ends;
the item's peak is the highest of the peaks read between resets. Elsewhere
(no /proc, or a kernel that refuses the reset) a watch is not `available` and
measures nothing.

Resetting the peak also resets `getrusage`'s ru_maxrss, which `nkicc run`
reports as the process's peak; so only the suite plugin, which reports per
item, starts a watch."""
from __future__ import annotations

import contextlib
import os
import sys

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status_mb(field: str) -> float:
    with open(_STATUS) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class MemoryWatch:
    """Peak RSS of one test item, and of the nkicc calls in it (MB)."""

    def __init__(self) -> None:
        self.available = sys.platform.startswith("linux") and os.path.exists(_STATUS) and _reset_peak()
        self.start_mb = _status_mb("VmRSS") if self.available else 0.0
        self.item_peak_mb = self.start_mb
        self.nkicc_added_mb = 0.0  # the most one nkicc call added to the RSS it began with, at its peak

    @contextlib.contextmanager
    def nkicc_call(self):
        if not self.available:
            yield
            return
        self.item_peak_mb = max(self.item_peak_mb, _status_mb("VmHWM"))
        before = _status_mb("VmRSS")
        _reset_peak()
        try:
            yield
        finally:
            peak = _status_mb("VmHWM")
            self.nkicc_added_mb = max(self.nkicc_added_mb, peak - before)
            self.item_peak_mb = max(self.item_peak_mb, peak)

    def finish(self) -> dict:
        """The item's numbers, by the names the plugin reports them under (empty when not available)."""
        if not self.available:
            return {}
        self.item_peak_mb = max(self.item_peak_mb, _status_mb("VmHWM"))
        return {"rss_start_mb": round(self.start_mb, 1), "rss_peak_mb": round(self.item_peak_mb, 1),
                "nkicc_added_mb": round(self.nkicc_added_mb, 1)}


def watched_call(settings):
    """The context an nkicc call of the suite runs in: its watch's, when the run settings carry one."""
    watch = getattr(settings, "memory", None)
    return watch.nkicc_call() if watch is not None else contextlib.nullcontext()
