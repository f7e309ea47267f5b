"""Where a benchmark ran: the machine and the commit, said the same way by
every script in bench/ (each adds this folder to sys.path to import it)."""
from __future__ import annotations

import os
import pathlib
import platform
import subprocess

REPO = pathlib.Path(__file__).resolve().parent.parent


def machine_info() -> dict:
    try:
        import numpy
        np_v = numpy.__version__
    except ImportError:  # pragma: no cover
        np_v = "not installed"
    try:
        mem = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2 ** 30:.0f} GiB"
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        mem = "?"
    return {
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory": mem, "arch": platform.machine(), "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "numpy": np_v,
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def machine_line(m: dict | None = None) -> str:
    m = machine_info() if m is None else m
    load = f"; load average {m['load']:.1f} at the start" if m.get("load") is not None else ""
    return (f"{m['cpus']} CPUs ({m['usable_cpus']} usable), {m['memory']} memory, {m['arch']}, {m['system']}, "
            f"Python {m['python']}, numpy {m['numpy']}{load}")


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=REPO, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=REPO, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "an unknown commit"
    if not head:
        return "an unknown commit"
    return f"commit {head}" + (" plus uncommitted changes" if dirty else "")
