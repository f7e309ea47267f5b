"""Run every benchmark and regenerate docs/benchmarks.md: tables and PNG plots.

    python bench/run_all.py                  # the full run (tens of minutes on 2 CPUs)
    python bench/run_all.py --quick          # fewer points, one repeat: a few minutes
    python bench/run_all.py --only cache,sim --out /tmp/b.md --plots /tmp/img

Benchmarks (each one runs as a subprocess, `python bench/X.py ... --json FILE`,
so that its timings and peak RSS are its own):

    compile  bench/compile_scaling.py   compile time and RSS against trip count and body
                                        size: the default pipeline, `--enable-pass unroll`
                                        under its budget, and the unrolled trace
    cache    bench/cache.py             compile cache: cold, warm, one edit, 8 processes
    sim      bench/sim_throughput.py    machine simulator against numpy
    timing   bench/timing.py            the timing model on the matmul progression, and a
                                        per-engine timeline of the last step

The output file keeps what it does not own. Each benchmark owns one section,
identified by its heading (OWNED below); run_all replaces only those sections,
in place, and leaves every other section (and the text before the first
section) where it was. A section whose benchmark is not run (--only) or fails
keeps its old text. Inside an owned section, blocks between `<!-- keep -->` and
`<!-- /keep -->` lines are hand-written notes: they are carried over into the
regenerated section.

Plots need matplotlib, an optional extra (`pip install '.[bench]'`); without
it the tables are still written and the plots are left out with a note.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from benchenv import commit, machine_info, machine_line  # noqa: E402

# name -> heading of the section it owns, in the order sections are added to a new file
OWNED = {
    "compile": "## Compile scaling",
    "cache": "## Cache",
    "sim": "## Simulator throughput",
    "timing": "## Timing sanity: the matmul progression",
}
KEEP_RE = re.compile(r"^<!-- keep -->\n.*?^<!-- /keep -->\n?", re.S | re.M)
INSTALL_HINT = "pip install '.[bench]'"
DPI = 100


# --- markdown sections ------------------------------------------------------------------

def split_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(preamble, [(heading, section text)]): the text before the first '## '
    heading, then one entry per level-2 section, the heading line and
    everything up to the next one. Lines inside ``` / ~~~ fences are never
    headings. Joining the preamble and the section texts gives `text` back."""
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    fence = None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if fence is None and stripped[:3] in ("```", "~~~"):
            fence = stripped[:3]
        elif fence is not None and stripped.startswith(fence):
            fence = None
        elif fence is None and line.startswith("## "):
            sections.append((line.rstrip("\n").rstrip(), [line]))
            continue
        (sections[-1][1] if sections else preamble).append(line)
    return "".join(preamble), [(h, "".join(body)) for h, body in sections]


def keep_blocks(section: str) -> list[str]:
    """The hand-written `<!-- keep -->` ... `<!-- /keep -->` blocks of a section."""
    return [m.group(0).rstrip("\n") + "\n" for m in KEEP_RE.finditer(section)]


def merge_sections(old: str, new: dict[str, str], order: list[str] | None = None) -> str:
    """Replace the sections of `old` whose heading is a key of `new` with
    new[heading] (plus the old section's keep blocks), in place; every other
    section, and the preamble, stays as it was and where it was. A heading of
    `new` missing from `old` goes after the nearest owned section before it in
    `order` (default: the order of `new`), else before the nearest after it,
    else at the end."""
    order = list(order or new)
    preamble, sections = split_sections(old)
    if not preamble.strip() and not sections:
        preamble = "# Benchmarks\n"
    out: list[tuple[str, str]] = []
    for heading, text in sections:
        if heading in new:
            text = _with_keep(new[heading], keep_blocks(text))
        out.append((heading, text))
    present = {h for h, _ in out}
    for i, heading in enumerate(order):
        if heading not in new or heading in present:
            continue
        headings = [h for h, _ in out]
        before = [h for h in order[:i] if h in headings]
        after = [h for h in order[i + 1:] if h in headings]
        if before:
            at = headings.index(before[-1]) + 1
        elif after:
            at = headings.index(after[0])
        else:
            at = len(out)
        out.insert(at, (heading, new[heading]))
        present.add(heading)
    parts = [preamble.rstrip("\n") + "\n"] if preamble.strip() else []
    parts += [text.strip("\n") + "\n" for _, text in out]
    return "\n".join(parts)


def _with_keep(section: str, blocks: list[str]) -> str:
    section = section.rstrip("\n") + "\n"
    for b in blocks:
        if b.strip() not in section:
            section += "\n" + b
    return section


def bench_module(name: str):
    """bench/NAME.py as a module (loaded by path: bench/cache.py must not be
    confused with the repository's cache/ package)."""
    import importlib.util
    key = f"nkicc_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


# --- plots ----------------------------------------------------------------------------

class NoMatplotlib(RuntimeError):
    pass


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (an optional extra)."""
    try:
        import matplotlib
    except ImportError:
        raise NoMatplotlib(f"matplotlib is not installed; {INSTALL_HINT} to make the plots") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path, rect=None) -> str:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    pyplot().close(fig)
    return str(path)


def _ok(r):
    return r if r and not r.get("timeout") and not r.get("budget_stopped") else None


def plot_compile_trips(data: dict, path) -> str:
    """(a) compile time (and peak RSS) against trip count, log-log: the default
    pipeline, `--enable-pass unroll` up to the point its budget stopped, and
    the unrolled trace."""
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    pts = data["trips"]
    budget = data.get("unroll_budget_s")
    series = [("rolled", "default pipeline (rolled)", "o-", "tab:blue"),
              ("pass", "--enable-pass unroll", "s-", "tab:red"),
              ("trace", "unrolled trace (unroll=True)", "^--", "tab:orange")]
    for key, label, style, color in series:
        done = [(p["trips"], p[key]) for p in pts if _ok(p.get(key))]
        if done:
            ax.plot([n for n, _ in done], [r["seconds"] for _, r in done], style, color=color, label=label, ms=5)
            ax2.plot([n for n, _ in done], [r["peak_rss_mb"] for _, r in done], style, color=color, ms=5)
    stopped = [p for p in pts if p.get("pass") and p["pass"].get("budget_stopped")]
    if stopped:
        p = stopped[0]
        ax.plot([p["trips"]], [p["pass"]["seconds"]], "x", color="tab:red", ms=10, mew=2,
                label=f"unroll pass stopped by the budget ({p['trips']:,} iterations)")
        ax2.plot([p["trips"]], [p["pass"]["peak_rss_mb"]], "x", color="tab:red", ms=10, mew=2)
    if budget:
        ax.axhline(budget, color="tab:red", lw=0.8, ls=":", alpha=0.8, label=f"compile time budget ({budget:g} s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("trip count of the loop")
    ax.set_ylabel("compile time (s)")
    ax.set_title("compile time (2-instruction loop body)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax2.set_xscale("log")
    ax2.set_xlabel("trip count of the loop")
    ax2.set_ylabel("peak RSS of the process (MB)")
    ax2.set_title("compiler memory", fontsize=10)
    ax2.grid(True, alpha=0.3)
    return _save(fig, path)


def plot_compile_body(data: dict, path) -> str:
    """(b) compile time against the number of statements in the loop body, with
    the least-squares line through the rolled points."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    pts = data["bodies"]
    for key, label, style, color in [("rolled", "default pipeline (rolled)", "o-", "tab:blue"),
                                     ("pass", "--enable-pass unroll", "s-", "tab:red")]:
        done = [(p["statements"], p[key]) for p in pts if _ok(p.get(key))]
        if done:
            ax.plot([s for s, _ in done], [r["seconds"] * 1000 for _, r in done], style, color=color, label=label,
                    ms=5)
    line = least_squares([(p["statements"], p["rolled"]["seconds"] * 1000) for p in pts if _ok(p.get("rolled"))])
    if line:
        a, b = line
        xs = [p["statements"] for p in pts]
        grid = [min(xs) + (max(xs) - min(xs)) * i / 50 for i in range(51)]
        ax.plot(grid, [max(a + b * x, 1e-3) for x in grid], ":", color="tab:blue", lw=1,
                label=f"rolled fit: {a:.1f} ms + {b:.2f} ms per statement")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"statements in the body of a {data.get('body_trip', 100)}-iteration loop")
    ax.set_ylabel("compile time (ms, log scale)")
    ax.set_title("compile time against body size", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line through points, or None."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if not sxx:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def plot_cache(data: dict, path) -> str:
    """(c) compile_s with the cache off, cold, warm and after one edit, per kernel."""
    plt = pyplot()
    groups = []  # (label, {bar: seconds})
    for r in data.get("seeds") or []:
        groups.append((r["seed"].split("::")[0].replace(".py", ""),
                       {"cache off": r["off_s"], "cold": r["cold_s"], "warm (source hit)": r["warm_s"]}))
    for r in data.get("edits") or []:
        groups.append((r["kernel"].split("/")[-1].replace(".py", ""),
                       {"cache off": r["off_s"], "cold": r["cold_s"], "warm (source hit)": r["warm_s"],
                        "after one edit": r["edit_s"]}))
    bars = ["cache off", "cold", "warm (source hit)", "after one edit"]
    colors = ["tab:gray", "tab:blue", "tab:green", "tab:orange"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) + 2), 3.8))
    width = 0.2
    for j, (bar, color) in enumerate(zip(bars, colors)):
        xs = [i + (j - 1.5) * width for i, (_, g) in enumerate(groups) if bar in g]
        ys = [g[bar] * 1000 for _, g in groups if bar in g]
        if not xs:
            continue
        rects = ax.bar(xs, ys, width, label=bar, color=color)
        ax.bar_label(rects, labels=[f"{y:.1f}" for y in ys], fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), [g for g, _ in groups], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("compile_s (ms, log scale)")
    ax.set_title("compile cache: compile_s per kernel (trace excluded)", fontsize=10)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    ax.margins(y=0.15)
    return _save(fig, path)


def plot_sim(data: dict, path) -> str:
    """(d) the simulator's wall time (functional and timing on) against numpy."""
    plt = pyplot()
    np_wall = data["numpy"]["wall_s"]
    rows = [("numpy, default BLAS threads", np_wall, "tab:gray"),
            ("numpy, 1 BLAS thread", data["numpy_1thread"]["wall_s"], "tab:gray"),
            ("simulator, functional", data["functional"]["wall_s"], "tab:blue"),
            ("simulator, timing on", data["timing_on"]["wall_s"], "tab:purple")]
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ys = list(range(len(rows)))[::-1]
    rects = ax.barh(ys, [w for _, w, _ in rows], color=[c for _, _, c in rows])
    ax.bar_label(rects, labels=[f"{w:.2f} s ({w / np_wall:.1f}x numpy)" for _, w, _ in rows], fontsize=8, padding=3)
    ax.set_yticks(ys, [r for r, _, _ in rows], fontsize=8)
    ax.axvline(1.5 * np_wall, color="tab:red", ls="--", lw=1, label="target (issue 14): 1.5x numpy")
    d = data["dims"]
    ax.set_xlabel("wall time (s, best of %d)" % data["repeat"])
    ax.set_title(f"fused_matmul mm2 M={d['M']} K={d['K']} N={d['N']} L={d['L']}: "
                 f"{data['executed']:,} instructions", fontsize=10)
    ax.set_xlim(0, max(max(w for _, w, _ in rows), 1.5 * np_wall) * 1.45)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, path)


def plot_timing(data: dict, path) -> str:
    """(e) the matmul progression: estimated latency and Tensor Engine utilisation
    per step; with the large blocked matmul ("large" rows: single buffer /
    multi-buffer) when bench/timing.py measured it."""
    plt = pyplot()
    rows, large = data["rows"], data.get("large") or []
    names = [r["step"].replace("matmul_", "") for r in rows]
    if large:
        fig, (ax, ax1, ax2) = plt.subplots(1, 3, figsize=(12, 3.6), gridspec_kw={"width_ratios": [4, 2, 6]})
    else:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.4))
        ax1 = None
    rects = ax.bar(names, [r["latency_us"] for r in rows], color="tab:blue")
    ax.bar_label(rects, labels=[f"{r['latency_us']:,.0f}" for r in rows], fontsize=8, padding=2)
    ax.set_ylabel("estimated latency (us)")
    ax.set_title(f"progression, K,M,N = {data.get('size', '?')}", fontsize=9)
    ax.margins(y=0.15)
    axes = [ax, ax2]
    if ax1 is not None:
        lnames = [r["step"] for r in large]
        rects = ax1.bar(lnames, [r["latency_us"] for r in large], color="tab:purple")
        ax1.bar_label(rects, labels=[f"{r['latency_us']:,.0f}" for r in large], fontsize=8, padding=2)
        ax1.set_title(f"large blocked, {data.get('large_size', '')}", fontsize=9)
        ax1.margins(y=0.15)
        axes.append(ax1)
    labels = names + [r["step"] for r in large]
    util = [r["pe_utilisation"] * 100 for r in rows + large]
    colors = ["tab:green"] * len(rows) + ["tab:purple"] * len(large)
    rects = ax2.bar(labels, util, color=colors)
    ax2.bar_label(rects, labels=[f"{u:.1f}%" for u in util], fontsize=8, padding=2)
    ax2.axhline(60, color="tab:red", ls="--", lw=1, label="60% goal")
    ax2.set_ylim(0, 100)
    ax2.set_ylabel("Tensor Engine utilisation (%)")
    ax2.set_title("Tensor Engine (pe) utilisation" + (" (purple: large blocked)" if large else ""), fontsize=9)
    ax2.legend(fontsize=8, loc="upper left")
    for a in axes:
        a.tick_params(axis="x", labelsize=7.5)
        a.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"bf16 matmul on {data.get('target', '?')}: estimated latency (us) and Tensor Engine "
                 "utilisation, machine simulator estimates", fontsize=10)
    return _save(fig, path)


def plot_gantt(trace: dict, path, title: str | None = None) -> str:
    """(f) per-engine timeline: the package's picture (nkicc.simulator.plot) of a Perfetto trace."""
    from nkicc.ir import NkiccError
    from nkicc.simulator.plot import plot_timeline

    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        plot_timeline(trace, path, title)
    except NkiccError as exc:
        if exc.code == "E206":
            raise NoMatplotlib(f"matplotlib is not installed; {INSTALL_HINT} to make the plots") from None
        raise
    return str(path)


# --- running the benchmarks -------------------------------------------------------------

def run_logged(cmd: list[str], label: str, timeout: float) -> tuple[int, str]:
    """Run cmd from the repository root, echoing its output with a prefix;
    (exit code, the last lines of its output)."""
    print(f"[{label}] $ {shlex.join(cmd)}", flush=True)
    tail: list[str] = []
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"[{label}] {line}", end="", flush=True)
        tail = (tail + [line])[-40:]
        if time.monotonic() > deadline:
            proc.kill()
            tail.append(f"(killed after {timeout:.0f} s)\n")
            break
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        rc = proc.wait()
    return rc, "".join(tail)


def display(cmd: list[str], json_path: str | None = None) -> str:
    """The command as a user would type it: python for sys.executable, FILE for the JSON path."""
    words = ["python" if w == sys.executable else ("FILE" if json_path and w == json_path else w) for w in cmd]
    return shlex.join(words)


class Bench:
    """One benchmark: run() -> data (or raises), section(data) -> markdown."""
    name = ""
    script = ""
    timeout = 3600.0

    def __init__(self, quick: bool, tmp: str, plots: pathlib.Path, out: pathlib.Path) -> None:
        self.quick, self.tmp, self.plots, self.out = quick, tmp, plots, out
        self.json_path = os.path.join(tmp, f"{self.name}.json")
        self.commands: list[str] = []
        self.seconds = 0.0
        self.machine: dict = {}
        self.plot_notes: list[str] = []

    def args(self) -> list[str]:
        return []

    def run(self) -> dict:
        cmd = [sys.executable, f"bench/{self.script}", *self.args(), "--json", self.json_path]
        self.commands.append(display(cmd, self.json_path))
        rc, tail = run_logged(cmd, self.name, self.timeout)
        if rc != 0 or not os.path.exists(self.json_path):
            raise RuntimeError(f"{display(cmd, self.json_path)} exited with {rc}:\n{tail}")
        with open(self.json_path) as f:
            return json.load(f)

    def image(self, fn, data, filename: str, alt: str) -> str:
        """Make one plot; the markdown image line, or a note when it could not be made."""
        path = self.plots / filename
        try:
            fn(data, path)
        except NoMatplotlib as exc:
            self.plot_notes.append(str(exc))
            return f"(Plot not made: {exc}.)"
        except Exception as exc:  # a plot must not lose the section's table
            print(f"[{self.name}] plot {filename} failed: {exc!r}", file=sys.stderr)
            return f"(Plot {filename} not made: {type(exc).__name__}: {exc}.)"
        rel = os.path.relpath(path, self.out.parent).replace(os.sep, "/")
        return f"![{alt}]({rel})"

    def header(self, run_all: str, when: str, revision: str) -> list[str]:
        ran = "; ".join(f"`{c}`" for c in self.commands)
        return [OWNED[self.name], "",
                f"Made by `{run_all}` on {when} ({revision}), which ran {ran} "
                f"({self.seconds:.0f} s).",
                "",
                f"Machine: {machine_line(self.machine)}.",
                ""]


class CompileBench(Bench):
    name, script = "compile", "compile_scaling.py"

    def args(self):
        # each point is its own process; the repeats inside it cost milliseconds
        return ["--quick", "--repeat", "3"] if self.quick else []

    def body(self, data: dict) -> list[str]:
        cs = bench_module("compile_scaling")
        return [
            "Each point is one fresh Python process with the compile cache off; time is `nkicc.compile` "
            "(trace + pass pipeline) after a warm-up compile. Left: compile time against the trip count of one "
            "static loop, log-log; the `--enable-pass unroll` line stops where its compile time budget stops it "
            "(the cross). Right: the process's peak RSS.",
            "",
            self.image(plot_compile_trips, data, "compile_trip.png",
                       "compile time and peak RSS against trip count: rolled, unroll pass, unrolled trace"),
            "",
            self.image(plot_compile_body, data, "compile_body.png", "compile time against loop body size"),
            "",
            cs.markdown(data, with_machine=False).rstrip("\n"),
            "",
            compile_summary(data),
        ]


def _fmt_s(x: float) -> str:
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def compile_summary(data: dict) -> str:
    trips = data["trips"]
    rolled = [p for p in trips if _ok(p.get("rolled"))]
    text = "What it shows (generated from the numbers above):"
    if rolled:
        secs = [p["rolled"]["seconds"] for p in rolled]
        rss = [p["rolled"]["peak_rss_mb"] for p in rolled]
        sizes = sorted({p["rolled"]["compiled"] for p in rolled})
        text += (f" the default pipeline compiled every trip count from {rolled[0]['trips']:,} to "
                 f"{rolled[-1]['trips']:,} in {_fmt_s(min(secs))} - {_fmt_s(max(secs))}, at {min(rss):.0f} - "
                 f"{max(rss):.0f} MB peak RSS, into "
                 f"{sizes[0] if len(sizes) == 1 else f'{sizes[0]} - {sizes[-1]}'} instructions.")
    done = [p for p in trips if _ok(p.get("pass"))]
    if done:
        last = done[-1]
        ratio = ""
        if _ok(last.get("rolled")):
            ratio = f", {last['pass']['seconds'] / last['rolled']['seconds']:,.0f} times the rolled compile"
        text += (f" With `--enable-pass unroll` the compile grows with the trip count: "
                 f"{_fmt_s(last['pass']['seconds'])} and {last['pass']['peak_rss_mb']:.0f} MB at "
                 f"{last['trips']:,} iterations ({last['pass']['compiled']:,} instructions){ratio}.")
    stop = next((p for p in trips if p.get("pass") and p["pass"].get("budget_stopped")), None)
    if stop:
        text += (f" At {stop['trips']:,} iterations the {data['unroll_budget_s']:g} s budget stopped it "
                 f"(in the {stop['pass']['pass']} pass)")
        text += ", and the larger trip counts were not run." if stop is not trips[-1] else "."
    traced = [p for p in trips if p.get("trace")]
    if traced:
        t = traced[-1]
        text += (f" The unrolled trace took {_fmt_s(t['trace']['seconds'])} at {t['trips']:,} iterations, "
                 f"the largest it was run at.")
    text += f" Body size, rolled pipeline: {data['body_fit']}."
    return text


class CacheBench(Bench):
    name, script = "cache", "cache.py"

    def args(self):
        return ["--repeat", "1"] if self.quick else ["--repeat", "3"]

    def body(self, data: dict) -> list[str]:
        cb = bench_module("cache")
        lines = []
        if data.get("seeds") is None:
            lines += [f"The full-size seeds were skipped: {data.get('workloads', '../shared/workloads')} is not "
                      "present.", ""]
        lines += [
            "compile_s per kernel (log scale): with the cache off, cold (empty cache folder), warm (the same "
            "kernel again in a new process: a source-level hit, no trace) and, for the edited kernels, after one "
            "loop body was edited.",
            "",
            self.image(plot_cache, data, "cache.png", "compile cache: cache off, cold, warm and one edit"),
            "",
            cb.body(data).rstrip("\n"),
        ]
        return lines


class SimBench(Bench):
    name, script = "sim", "sim_throughput.py"

    def args(self):
        # a run is a few seconds; one repeat of numpy alone is too noisy to compare against
        return ["--scale", "8", "--repeat", "3" if self.quick else "5"]

    def body(self, data: dict) -> list[str]:
        st = bench_module("sim_throughput")
        return [
            "Target (issue 14): the functional simulator within 1.5x of numpy (the dashed line), timing on "
            "within 2x.",
            "",
            self.image(plot_sim, data, "sim_throughput.png", "simulator wall time against numpy"),
            "",
            st.table(data),
            "",
            st.analysis(data),
        ]


class TimingBench(Bench):
    name, script = "timing", "timing.py"
    TRACE_KERNEL = "examples/matmul.py::matmul_blocked"

    def run(self) -> dict:
        trace_path = os.path.join(self.tmp, "timing.trace.json")
        md = os.path.join(self.tmp, "timing.md")
        data = None
        # bench/timing.py's interface is settling: try --json with --trace, then
        # --json alone, then only its --markdown table (no plot)
        for extra in (["--json", self.json_path, "--trace", trace_path], ["--json", self.json_path],
                      ["--markdown", md]):
            cmd = [sys.executable, "bench/timing.py", *extra]
            rc, tail = run_logged(cmd, self.name, self.timeout)
            if rc == 0 and os.path.exists(extra[1]):
                self.commands.append(display(cmd, self.json_path).replace(trace_path, "TRACE").replace(md, "FILE"))
                if extra[0] == "--json":
                    with open(self.json_path) as f:
                        data = json.load(f)
                else:
                    data = {"markdown": pathlib.Path(md).read_text()}
                break
            if not ("unrecognized arguments" in tail or "no such option" in tail):
                raise RuntimeError(f"{display(cmd)} exited with {rc}:\n{tail}")
        if data is None:
            raise RuntimeError("bench/timing.py accepted none of --json / --markdown")
        trace = data.get("trace")
        if trace and not os.path.isabs(trace):
            trace = str(REPO / trace)
        self.trace_command = None
        if not trace or not os.path.exists(trace):
            trace = os.path.join(self.tmp, "matmul_blocked.trace.json")
            cmd = [sys.executable, "-m", "nkicc.cli", "simulate", self.TRACE_KERNEL, "--inputs", "random",
                   "--trace", trace]
            rc, tail = run_logged(cmd, self.name, self.timeout)
            if rc != 0:
                raise RuntimeError(f"the trace command exited with {rc}:\n{tail}")
            self.trace_command = f"nkicc simulate {self.TRACE_KERNEL} --inputs random --trace t.json"
            self.commands.append(self.trace_command)
        with open(trace) as f:
            data["trace_data"] = json.load(f)
        return data

    def body(self, data: dict) -> list[str]:
        lines: list[str] = []
        if "rows" in data:
            lines += [self.image(plot_timing, data, "timing_progression.png",
                                 "matmul progression: estimated latency and Tensor Engine utilisation"),
                      "", timing_table(data), "", timing_summary(data)]
        else:
            lines += ["(Plot not made: this bench/timing.py has no `--json` option, which writes the rows the "
                      "plot is drawn from; the table below is its `--markdown` output.)", "",
                      data["markdown"].rstrip("\n")]
        trace = data["trace_data"]
        other = trace.get("otherData", {})
        if self.trace_command:
            src = f"made by `{self.trace_command}`"
        elif data.get("large"):
            src = (f"the large blocked matmul, K,M,N = {data.get('large_size', '?')}, {data['large'][-1]['step']}: "
                   "the trace `bench/timing.py --trace` wrote")
        else:
            src = "the trace `bench/timing.py --trace` wrote"
        capped = " The trace was capped: some instructions are missing." if other.get("capped") else ""
        lines += ["", f"Timeline of {other.get('kernel', 'the kernel')} ({src}): one row per engine and DMA "
                      f"queue, one bar per executed instruction, at the simulator's estimated times; the trace "
                      f"file itself opens in https://ui.perfetto.dev.{capped}", "",
                  self.image(plot_gantt, trace, "timing_timeline.png",
                             "per-engine timeline: one row per engine and DMA queue, one bar per instruction")]
        return lines


def timing_table(data: dict) -> str:
    lines = [f"bf16 matmul K,M,N = {data.get('size', '?')} on {data.get('target', '?')} (machine simulator, "
             f"estimated from the cost table)", "",
             "| step | estimated latency (us) | Tensor Engine utilisation | matmuls | max abs error |",
             "|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['step']} | {r['latency_us']:,.1f} | {r['pe_utilisation']:.1%} | {r['matmuls']} | "
                     f"{r['max_err']:.2e} |")
    if data.get("large"):
        lines += ["", f"Large blocked bf16 matmul, K,M,N = {data.get('large_size', '?')}:", "",
                  "| pipeline | estimated latency (us) | Tensor Engine utilisation | DMA active | "
                  "matmuls | max abs error | loops multi-buffered |", "|---|---|---|---|---|---|---|"]
        for r in data["large"]:
            dma = f"{r['dma_utilisation']:.1%}" if "dma_utilisation" in r else "-"
            lines.append(f"| {r['step']} | {r['latency_us']:,.1f} | {r['pe_utilisation']:.1%} | {dma} | "
                         f"{r['matmuls']} | {r['max_err']:.2e} | {r.get('multi_buffered', '-')} |")
    return "\n".join(lines)


def timing_summary(data: dict) -> str:
    rows = data["rows"]
    lat = [r["latency_us"] for r in rows]
    falls = all(a > b for a, b in zip(lat, lat[1:]))
    best = max(rows, key=lambda r: r["pe_utilisation"])
    text = (f"What it shows (generated from the numbers above): the estimated latency "
            f"{'falls at each step' if falls else 'does not fall at every step'}, from {lat[0]:,.1f} us "
            f"({rows[0]['step']}) to {lat[-1]:,.1f} us ({rows[-1]['step']}), where the Tensor Engine is "
            f"{best['pe_utilisation']:.1%} busy ({best['step']}; at this size loading the operands is a "
            f"large part of the run).")
    large = data.get("large") or []
    if len(large) >= 2:
        a, b = large[0], large[-1]
        text += (f" On the large blocked matmul, {b['step']} takes the estimate from {a['latency_us']:,.1f} us "
                 f"({a['step']}) to {b['latency_us']:,.1f} us and the Tensor Engine from "
                 f"{a['pe_utilisation']:.1%} to {b['pe_utilisation']:.1%} busy (the goal for a large blocked "
                 f"bf16 matmul: at least 60%).")
    return text


BENCHES = {"compile": CompileBench, "cache": CacheBench, "sim": SimBench, "timing": TimingBench}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer points, one repeat: a few minutes on 2 CPUs")
    ap.add_argument("--out", default="docs/benchmarks.md", help="the markdown file to update (default %(default)s)")
    ap.add_argument("--plots", default="docs/img", help="folder for the PNG plots (default %(default)s)")
    ap.add_argument("--only", default=",".join(BENCHES),
                    help="comma list of benchmarks to run (default: %(default)s); the others' sections are kept")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    out = pathlib.Path(args.out)
    if not out.is_absolute():
        out = pathlib.Path.cwd() / out
    plots = pathlib.Path(args.plots)
    if not plots.is_absolute():
        plots = pathlib.Path.cwd() / plots
    try:
        pyplot()
    except NoMatplotlib as exc:
        print(f"note: {exc}; writing the tables only", file=sys.stderr)

    run_all = "python bench/run_all.py" + (" --quick" if args.quick else "")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    revision = commit()
    new: dict[str, str] = {}
    failed: list[str] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nkicc_run_all_") as tmp:
        for name in names:
            bench = BENCHES[name](args.quick, tmp, plots, out)
            bench.machine = machine_info()
            t0 = time.perf_counter()
            try:
                data = bench.run()
            except Exception as exc:
                failed.append(name)
                print(f"[{name}] FAILED, its section is left as it was: {exc}", file=sys.stderr)
                continue
            bench.seconds = time.perf_counter() - t0
            body = bench.body(data)
            new[OWNED[name]] = "\n".join(bench.header(run_all, when, revision) + body).rstrip("\n") + "\n"
            print(f"[{name}] done in {bench.seconds:.0f} s", flush=True)
    old = out.read_text() if out.exists() else ""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(merge_sections(old, new, list(OWNED.values())))
    total = time.perf_counter() - t_all
    print(f"wrote {os.path.relpath(out)} ({len(new)} section(s) regenerated) in {total:.0f} s; plots in "
          f"{os.path.relpath(plots)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
