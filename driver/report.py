"""Compile reports: the numbers a kernel author reads after a compile."""
from __future__ import annotations

import resource
import sys


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def summary_lines(report: dict) -> list[str]:
    loops = report["loops"]
    return [
        f"kernel {report['kernel']}: traced in {report['trace_s'] * 1000:.1f} ms "
        f"({report['trace_attempts']} attempt{'s' if report['trace_attempts'] != 1 else ''}), "
        f"total {report['total_s'] * 1000:.1f} ms, peak RSS {report['peak_rss_mb']:.0f} MB",
        f"  instructions: {report['instructions_rolled']:,} rolled, "
        f"{report['instructions_unrolled']:,} if static loops were unrolled, "
        f"{report['instructions_executed']:,} executed",
        f"  loops: {loops['rolled']} rolled, {loops['split']} split, {loops['concrete']} traced concretely, "
        f"{loops['dynamic']} dynamic",
    ] + cache_lines(report)


def cache_lines(report: dict) -> list[str]:
    c = report.get("cache")
    if not c:
        return []
    if c["kernel"] == "bypass" and not c["regions_total"]:
        return [f"  cache: bypassed ({c.get('reason', '?')})"]
    what = f"kernel {c['kernel']}" + (f" ({c['reason']})" if c.get("reason") else "") + \
        (" (remote)" if c.get("tier") == "remote" else "")
    regions = f", regions {c['regions_hit']}/{c['regions_total']} hit" if c["regions_total"] else ""
    return [f"  cache: {what}{regions}, compile {report['compile_s'] * 1000:.1f} ms, saved {c['saved_s'] * 1000:.1f} ms"]


def current_rss_mb() -> float:
    """Resident set size now (Linux /proc; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * _PAGE / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


try:
    import os as _os
    _PAGE = _os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover
    _PAGE = 4096
