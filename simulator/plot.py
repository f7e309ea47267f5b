"""The engine timeline as a picture: one row per engine and DMA queue, one bar
per executed instruction, coloured by opcode, at the simulator's estimated
times (a Gantt chart of trace.Timeline). Several timelines (the ranks of a
multi-rank run, the cores of a launch) stack, each row named by its rank.

matplotlib is an optional extra (`pip install 'nkicc[plot]'`), imported only
when a picture is drawn; without it drawing is a one-line E206. The figure is
drawn on matplotlib's Agg canvas directly, not through pyplot, so that a
notebook's own pyplot state and backend are left alone.
"""
from __future__ import annotations

import importlib.util
import io
import os
import sys

from ..ir import NkiccError
from .trace import Timeline

INSTALL = "pip install 'nkicc[plot]'"
DPI = 100


def have_matplotlib() -> bool:
    """Whether matplotlib can be imported, without importing it (nkicc never does until it draws)."""
    if "matplotlib" in sys.modules:
        return sys.modules["matplotlib"] is not None
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def _matplotlib():
    try:
        import matplotlib
        import matplotlib.patches  # noqa: F401 (the legend's swatches)
        from matplotlib.figure import Figure
    except ImportError:
        raise NkiccError("E206", "the timeline picture needs matplotlib, which is not installed", None,
                         f"{INSTALL} (or pip install matplotlib)") from None
    return matplotlib, Figure


def as_timeline(x) -> Timeline:
    """A Timeline from a Timeline, a SimReport that kept one, or a Perfetto trace dict."""
    if isinstance(x, Timeline):
        return x
    if isinstance(x, dict):
        return Timeline.from_trace(x)
    timeline = getattr(x, "timeline", None)
    if timeline is None:
        raise NkiccError("E206", "this simulation kept no timeline to draw", None,
                         "simulate with a trace (trace=True or a path; --timeline on the command line)")
    return timeline


def rows(timelines: list[Timeline]) -> list[tuple[str, list]]:
    """(row label, instructions) of every track, the ranks one after another;
    with more than one timeline each label starts with its rank."""
    if len(timelines) == 1:
        return list(timelines[0].tracks)
    return [(f"rank {r}: {name}", evs) for r, t in enumerate(timelines) for name, evs in t.tracks]


def plot_timeline(source, path: str | os.PathLike | None = None, title: str | None = None) -> bytes:
    """Draw the timeline of one simulation, or of several ranks (a list), as PNG;
    return its bytes and write them to `path` when given. source: SimReport(s)
    that kept a trace, Timeline(s), or Perfetto trace dict(s)."""
    timelines = [as_timeline(x) for x in (source if isinstance(source, (list, tuple)) else [source])]
    matplotlib, Figure = _matplotlib()
    tracks = rows(timelines)
    opcodes = sorted({op for _, evs in tracks for _, _, op in evs})
    cmap = matplotlib.colormaps["tab10"] if hasattr(matplotlib, "colormaps") else matplotlib.cm.get_cmap("tab10")
    color = {op: cmap(i % 10) for i, op in enumerate(opcodes)}
    height = 1.4 + 0.3 * max(len(tracks), 1)
    fig = Figure(figsize=(10, height))
    ax = fig.add_subplot()
    for row, (_, evs) in enumerate(tracks):
        y = len(tracks) - 1 - row
        for op in opcodes:
            spans = [(s, max(d, 1e-3)) for s, d, o in evs if o == op]
            if spans:
                edge = tuple(0.65 * c for c in color[op][:3])
                ax.broken_barh(spans, (y - 0.38, 0.76), facecolors=color[op], edgecolors=edge, linewidth=0.4)
    end = max((t.end_us for t in timelines), default=0.0)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([name for name, _ in tracks][::-1], fontsize=8)
    ax.set_ylim(-0.6, len(tracks) - 0.4)
    ax.set_xlim(0, end * 1.01 or 1)
    ax.set_xlabel("estimated time (us)")
    first = timelines[0] if timelines else Timeline("kernel", "?", [])
    ranks = f", {len(timelines)} ranks" if len(timelines) > 1 else ""
    capped = " (trace capped: later instructions missing)" if any(t.capped for t in timelines) else ""
    ax.set_title(title or f"{first.kernel} on {first.target}{ranks}: one bar per instruction "
                          f"(simulator estimates){capped}", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    if opcodes:
        handles = [matplotlib.patches.Rectangle((0, 0), 1, 1, color=color[op]) for op in opcodes]
        fig.legend(handles, opcodes, fontsize=8, ncol=min(len(opcodes), 8), loc="lower center", frameon=False,
                   handlelength=1.2, columnspacing=1.2)
    legend_rows = -(-len(opcodes) // 8) if opcodes else 0
    fig.tight_layout(rect=(0, 0.3 * legend_rows / height, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    png = buf.getvalue()
    if path is not None:
        with open(path, "wb") as f:
            f.write(png)
    return png


__all__ = ["INSTALL", "as_timeline", "have_matplotlib", "plot_timeline"]
