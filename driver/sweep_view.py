"""How `nkicc tune` shows a sweep: a live progress bar while it runs, then a
ranked table, the best variant's command line, and optional JSON and plot."""
from __future__ import annotations

from .ir import NkiccError
from .sweep import TuneResult

ENGINES = ("pe", "dve", "act", "pool", "dma")


def console():
    """A rich console for stdout; piped or captured, a wide one, so that tables are not squeezed into 80 columns."""
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=160)


def table(result: TuneResult):
    """The rows as a rich Table, best first; engines idle in every variant are left out."""
    from rich.table import Table

    names = list(result.rows[0].values) if result.rows else []
    engines = [e for e in ENGINES if any(r.engines.get(e) for r in result.rows)]
    failures = any(r.status != "ok" for r in result.rows)
    t = Table(title=f"{result.kernel}: {len(result.rows)} variants on {result.workers} worker"
                    f"{'s' if result.workers != 1 else ''} in {result.wall_s:.1f} s")
    t.add_column("#", justify="right")
    for n in names:
        t.add_column(n, justify="right", no_wrap=True)
    for head in ("est. us", "compile s", "sim s", "spills", *(f"{e} %" for e in engines)):
        t.add_column(head, justify="right", no_wrap=True)
    if failures:
        t.add_column("status")
    for r in result.rows:
        cells = [str(r.rank) if r.rank else "-", *(str(r.values.get(n)) for n in names),
                 _num(r.estimated_us, ".3f"), _num(r.compile_s, ".3f"), _num(r.simulate_s, ".3f"),
                 _num(r.spills, "d"), *(_num(r.engines.get(e), ".1f") for e in engines)]
        if failures:
            cells.append("ok" if r.status == "ok" else f"[red]{r.status}[/]")
        t.add_row(*cells, style="bold" if r.rank == 1 else None)
    return t


def show(console, result: TuneResult) -> None:
    console.print(table(result))
    for r in result.rows:
        if r.status in ("failed", "timeout"):
            label = " ".join(f"{k}={v}" for k, v in r.values.items())
            console.print(f"{r.status}: {label}: {r.error}", markup=False, highlight=False, soft_wrap=True)
    best = result.best
    if best is not None:
        console.print(f"best: {best.estimated_us:.3f} us estimated; to see it again:")
        console.print("  " + best.command, markup=False, highlight=False, soft_wrap=True)
    if result.interrupted:
        left = sum(r.status == "not run" for r in result.rows)
        console.print(f"stopped (Ctrl-C): {left} variant{'s' if left != 1 else ''} not run")


def show_shards(console, result) -> None:
    """Each shard's output under a rule, then one table row per shard."""
    from rich.rule import Rule
    from rich.table import Table

    for s in result.shards:
        console.print(Rule(f"shard {s.shard} of {len(result.shards)}: {s.status}"))
        if s.stdout:
            console.print(s.stdout.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
        if s.status != "ok" and s.stderr:
            console.print(s.stderr.rstrip("\n"), markup=False, highlight=False, soft_wrap=True, style="red")
    t = Table(title=f"{result.script}: {len(result.shards)} shards on {result.workers} worker"
                    f"{'s' if result.workers != 1 else ''} in {result.wall_s:.1f} s")
    for head in ("shard", "status", "wall s", "kernel calls", "compile s", "est. us"):
        t.add_column(head, justify="right", no_wrap=True)
    t.add_column("error")
    for s in result.shards:
        t.add_row(str(s.shard), s.status if s.status == "ok" else f"[red]{s.status}[/]", _num(s.wall_s, ".2f"),
                  str(s.kernel_calls), _num(s.compile_s, ".3f"), _num(s.estimated_us, ".3f"),
                  _escape(s.error or ""))
    console.print(t)
    if result.interrupted:
        left = sum(s.status == "not run" for s in result.shards)
        console.print(f"stopped (Ctrl-C): {left} shard{'s' if left != 1 else ''} not run")


def plot(result: TuneResult, path: str) -> None:
    """An SVG bar chart of the estimated time of each finished variant, best at
    the top. Written by hand: the package does not depend on a plotting library."""
    if not path.lower().endswith(".svg"):
        raise NkiccError("E201", f"--plot {path}: nkicc draws SVG", None, "give a file name ending in .svg")
    rows = [r for r in result.rows if r.status == "ok"]
    labels = [" ".join(f"{k}={v}" for k, v in r.values.items()) for r in rows]
    longest = max((r.estimated_us for r in rows), default=1.0) or 1.0
    left, bar_w, row_h, top = 8 + 7 * max((len(x) for x in labels), default=10), 420, 22, 40
    width, height = left + bar_w + 110, top + row_h * len(rows) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="12">',
           f'<text x="8" y="20" font-size="14">{_xml(result.kernel)}: estimated time per variant (us)</text>']
    for i, (r, label) in enumerate(zip(rows, labels)):
        y = top + i * row_h
        w = max(1.0, bar_w * r.estimated_us / longest)
        colour = "#2a9d4b" if r.rank == 1 else "#3b75af"
        out += [f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{_xml(label)}</text>',
                f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{colour}"/>',
                f'<text x="{left + w + 6:.1f}" y="{y + 14}">{r.estimated_us:.3f}</text>']
    out.append("</svg>")
    try:
        with open(path, "w") as f:
            f.write("\n".join(out) + "\n")
    except OSError as exc:
        raise NkiccError("E205", f"cannot write --plot {path}: {exc.strerror or exc}", None,
                         "give a path in a folder that exists and is writable") from None


def _xml(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _num(value, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)
