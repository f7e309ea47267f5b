"""Compile reports: the numbers a kernel author reads after a compile."""
from __future__ import annotations

import resource
import sys


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def attempts_text(n: int) -> str:
    """Why a trace took more than one attempt, said where the count is shown."""
    if n == 1:
        return "1 attempt"
    return f"{n} attempts: one more per loop it split or traced concretely"


def summary_lines(report: dict) -> list[str]:
    loops = report["loops"]
    return [
        f"kernel {report['kernel']}: traced in {report['trace_s'] * 1000:.1f} ms "
        f"({attempts_text(report['trace_attempts'])}), "
        f"total {report['total_s'] * 1000:.1f} ms, peak RSS {report['peak_rss_mb']:.0f} MB",
        f"  instructions: {report['instructions_rolled']:,} rolled, "
        f"{report['instructions_unrolled']:,} if static loops were unrolled, "
        f"{report['instructions_executed']:,} executed" + _executed_after_passes(report),
        f"  loops: {loops['rolled']} rolled, {loops['split']} split, {loops['concrete']} traced concretely, "
        f"{loops['dynamic']} dynamic" + _after_passes(report),
    ] + cache_lines(report)


def _executed_after_passes(report: dict) -> str:
    """The counts above are of the program as traced; passes fuse, add and delete
    instructions, and the simulator counts the compiled program's: say both."""
    n = report.get("instructions_compiled_executed")
    if n is None or n == report["instructions_executed"]:
        return ""
    return f" as traced, {n:,} after the passes"


def _after_passes(report: dict) -> str:
    """The trace's loop counts are what the tracer made; a pass such as unroll
    changes the compiled program, so say what is left of it."""
    n = report.get("static_loops")
    if not n or n["traced"] == n["compiled"]:
        return ""
    return (f" (after the passes: {n['compiled']} static loop{'s' if n['compiled'] != 1 else ''}, "
            f"{report['instructions_compiled']:,} instructions)")


def cache_lines(report: dict) -> list[str]:
    c = report.get("cache")
    if not c:
        return []
    if c["kernel"] == "bypass" and not c["regions_total"]:
        return [f"  cache: bypassed ({c.get('reason', '?')})"]
    what = f"kernel {c['kernel']}" + (f" ({c['reason']})" if c.get("reason") else "")
    if c.get("source") == "hit":
        what += " (source hit: not traced)"
    if c.get("tier") == "remote":
        what += " (remote)"
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
