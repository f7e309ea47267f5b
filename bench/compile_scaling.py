"""How compile time and compiler memory scale with a loop's trip count and with
the size of its body, for the rolled pipeline and (for comparison) full
unrolling, which is what a compiler that unrolls every static loop pays.

    python bench/compile_scaling.py                   # print the tables
    python bench/compile_scaling.py --markdown F.md   # also write them as markdown
    python bench/compile_scaling.py --quick           # fewer points, no unrolled trace beyond 1000
    python bench/compile_scaling.py --json F.json     # also write the measurements as JSON (bench/run_all.py)

Every point runs in a fresh Python process (so that peak RSS belongs to that
point alone); the kernels are generated into a temporary .py file, because
rolling needs the loop's source. Time is the wall time of `nkicc.compile`
(trace + passes) inside that process, best of --repeat runs (unrolled: one run),
after a warm-up compile of a loop-free kernel; memory is the process's peak RSS
(interpreter, numpy and nkicc included: the baseline line shows what an empty
compile costs).

Three ways to compile each kernel: the default (rolled) pipeline; the same
pipeline with the `unroll` pass enabled (`--enable-pass unroll`, the vendor
behaviour), under a compile time budget (--unroll-budget, the pipeline's
--max-compile-time): the sweep stops at the first point the budget stops; and
the unrolled trace (`nkicc.compile(..., unroll=True)`: every iteration traced,
as NKI does, then the default pipeline).

`collect()` returns the measurements as plain Python values and `markdown()`
formats them; bench/run_all.py uses both.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402

TRIPS = [1, 10, 100, 1000, 10000, 30000, 100000]  # beyond 10,000: where unrolling passes ~20 s
BODIES = [1, 2, 4, 8, 16, 32]
BODY_TRIP = 100
UNROLL_STOP_S = 20.0     # stop the unrolled sweep after a point slower than this
UNROLL_TIMEOUT_S = 120   # and do not start one that linear extrapolation puts beyond this
POINT_TIMEOUT_S = 300
UNROLL_BUDGET_S = 60.0   # --max-compile-time of the `--enable-pass unroll` compiles
# --quick: every trip count for the rolled pipeline (a few ms each), the unroll pass
# under a 5 s budget (it stops at 30,000), the unrolled trace up to 1,000 iterations
QUICK = {"trips": TRIPS, "bodies": BODIES, "unroll_max": 1000, "unroll_budget": 5.0}

HEADER = '''import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
'''


def trip_kernel(trips: int) -> str:
    """One static loop of `trips` iterations; the body loads a 128-row tile of
    `a` (indexed by the loop) and adds it into an accumulator: 2 instructions."""
    return HEADER + textwrap.dedent(f'''
        @nkicc.jit
        def kernel(a: "float32[{128 * trips},64]"):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 64), dtype=nl.float32)
            for i in nl.static_range({trips}):
                t = nl.load(a[i * 128:(i + 1) * 128, :])
                nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
            nl.store(out, value=acc)
            return out
    ''')


def body_kernel(statements: int, trips: int = BODY_TRIP) -> str:
    """A static loop of `trips` iterations whose body has `statements`
    instructions: a DMA of the loop's tile, then scale / accumulate in turn."""
    lines = ["t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)",
             "nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])"]
    for s in range(1, statements):
        if s % 2:
            lines.append("nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)")
        else:
            lines.append(f"nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0={1 + s / 1000})")
    body = "\n".join("        " + line for line in lines)
    return HEADER + f'''
@nkicc.jit
def kernel(a: "float32[{128 * trips},64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=nl.float32)
    for i in nl.static_range({trips}):
{body}
    nl.store(out, value=acc)
    return out
'''


BASELINE = HEADER + '''
@nkicc.jit
def kernel(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out
'''


# --- one point, in a fresh process ---------------------------------------------------

def worker(path: str, mode: str, repeat: int, budget: float = UNROLL_BUDGET_S) -> None:
    """Compile kernel in `path`; print one JSON line. mode: "rolled" (the
    default pipeline), "pass" (`--enable-pass unroll` under a `budget`-second
    compile time budget) or "trace" (the unrolled trace)."""
    import nkicc
    from nkicc.api import BudgetError
    from nkicc.loader import load_kernel
    from nkicc.specs import annotated_specs
    from nkicc.language.kernel_trace import inspect_unwrap

    # warm up on a loop-free kernel: the first compile in a process loads the
    # pass registry and plugins (reported once, as the baseline's first compile)
    warm = os.path.join(os.path.dirname(path), "bench_warmup.py")
    with open(warm, "w") as f:
        f.write(BASELINE)
    t0 = time.perf_counter()
    nkicc.compile(load_kernel(f"{warm}::kernel"), "float32[128,64]")
    first = time.perf_counter() - t0
    kernel = load_kernel(f"{path}::kernel")
    specs = annotated_specs(inspect_unwrap(kernel.fn))
    passes = {"enable": ["unroll"], "max_compile_time": budget} if mode == "pass" else None
    rss_before = _peak_rss_mb()
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            compiled = nkicc.compile(kernel, *specs.values(), unroll=mode == "trace", passes=passes)
        except BudgetError as exc:
            print(json.dumps({"budget_stopped": True, "seconds": time.perf_counter() - t0, "budget_s": budget,
                              "pass": exc.pass_name, "message": str(exc), "first_s": first,
                              "peak_rss_mb": _peak_rss_mb(), "rss_before_mb": rss_before}))
            return
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    r = compiled.report
    print(json.dumps({
        "seconds": best, "first_s": first, "trace_s": r["trace_s"], "peak_rss_mb": _peak_rss_mb(), "rss_before_mb": rss_before,
        "rolled": r["instructions_rolled"], "unrolled": r["instructions_unrolled"],
        "compiled": r.get("instructions_compiled", r["instructions_rolled"]),
    }))


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def measure(source: str, folder: str, tag: str, mode: str, repeat: int,
            timeout: float = POINT_TIMEOUT_S, budget: float = UNROLL_BUDGET_S) -> dict | None:
    """One point in a fresh process (see worker); None if it failed, {"timeout": ...}
    if it ran past `timeout`."""
    path = os.path.join(folder, f"bench_{tag}.py")
    with open(path, "w") as f:
        f.write(source)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", path, "--mode", mode,
           "--repeat", str(repeat), "--unroll-budget", str(budget)]
    t0 = time.perf_counter()
    try:
        # the compile cache off: the best of several compiles must not be a cache hit
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "NKICC_CACHE": "0"})
    except subprocess.TimeoutExpired:
        return {"timeout": timeout, "seconds": float("inf"), "wall": time.perf_counter() - t0}
    if p.returncode != 0:
        print(f"  {tag} ({mode}) failed:\n{p.stderr[-2000:]}", file=sys.stderr)
        return None
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - t0
    return out


def _log(*args) -> None:
    print(*args, flush=True)


# --- the sweeps -------------------------------------------------------------------------

def fmt_s(x) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def fmt_mb(r) -> str:
    return "-" if r is None else f"{r['peak_rss_mb']:.0f}"


def _ok(r: dict | None) -> dict | None:
    """A finished measurement, or None (failed, timed out, stopped by the budget)."""
    return r if r and not r.get("timeout") and not r.get("budget_stopped") else None


def trip_sweep(folder: str, trips: list[int], repeat: int, unroll_stop: float, unroll_max: int,
               unroll_budget: float = UNROLL_BUDGET_S, log=_log) -> list[dict]:
    """One dict per trip count: "trips"; "rolled", "pass" and "trace": the
    worker's measurement (None when not run or failed; "pass" may be a
    {"budget_stopped": True, ...} record); "pass_note" / "trace_note": why a
    point was not run, or None."""
    points = []
    stopped = None       # why the unrolled-trace sweep stopped, once it has
    pass_stopped = None  # why the `--enable-pass unroll` sweep stopped, once it has
    last = None          # (trip count, seconds) of the previous unrolled-trace point
    for n in trips:
        src = trip_kernel(n)
        rolled = _ok(measure(src, folder, f"trip{n}", "rolled", repeat))
        # `--enable-pass unroll`, under the budget: stops at the first point the budget stops
        unroll_pass, pass_note = None, None
        if pass_stopped:
            pass_note = f"not run ({pass_stopped})"
        else:
            unroll_pass = measure(src, folder, f"trip{n}", "pass", 1, unroll_budget * 3 + 60, unroll_budget)
            if unroll_pass is None:
                pass_stopped = pass_note = "failed"
            elif unroll_pass.get("timeout"):
                pass_stopped = pass_note = f"> {unroll_pass['timeout']:.0f} s, killed"
                unroll_pass = None
            elif unroll_pass.get("budget_stopped"):
                pass_note = f"stopped by the {unroll_budget:g} s budget (in {unroll_pass['pass']})"
                pass_stopped = "the budget stopped a smaller trip count"
        # the unrolled trace: up to unroll_max, and not beyond a point slower than unroll_stop
        trace, trace_note = None, f"not run ({stopped})" if stopped else f"not run (beyond {unroll_max:,})"
        guess = last[1] * n / last[0] if last else 0.0
        if stopped is None and n <= unroll_max and guess > UNROLL_TIMEOUT_S:
            stopped = f"> {guess:.0f} s by linear extrapolation"
            trace_note = f"not run ({stopped})"
        elif stopped is None and n <= unroll_max:
            trace = measure(src, folder, f"trip{n}", "trace", 1, UNROLL_TIMEOUT_S)
            if trace is None:
                stopped = trace_note = "failed"
            elif trace.get("timeout"):
                stopped = trace_note = f"> {UNROLL_TIMEOUT_S} s, stopped"
                trace = None
            else:
                trace_note, last = None, (n, trace["seconds"])
                if trace["seconds"] > unroll_stop:
                    stopped = f"the previous point took over {unroll_stop:.0f} s"
        points.append({"trips": n, "rolled": rolled, "pass": unroll_pass, "pass_note": pass_note,
                       "trace": trace, "trace_note": trace_note})
        log(" | ".join(trip_row(points[-1])))
    return points


TRIP_HEADER = ["trip count", "rolled: compile", "rolled: peak RSS MB", "instructions (rolled)",
               "instructions (unrolled)", "`--enable-pass unroll`: compile", "unroll pass: peak RSS MB",
               "unrolled trace: compile", "unrolled trace: peak RSS MB", "unroll pass / rolled time"]


def trip_row(p: dict) -> list[str]:
    rolled, up, trace = p["rolled"], _ok(p["pass"]), p["trace"]
    pass_cell = fmt_s(up["seconds"]) if up else (p["pass_note"] or "-")
    trace_cell = fmt_s(trace["seconds"]) if trace else (p["trace_note"] or "-")
    ratio = f"{up['seconds'] / rolled['seconds']:,.0f}x" if rolled and up else "-"
    return [f"{p['trips']:,}", fmt_s(rolled and rolled["seconds"]), fmt_mb(rolled),
            f"{rolled['rolled']:,}" if rolled else "-", f"{rolled['unrolled']:,}" if rolled else "-",
            pass_cell, fmt_mb(p["pass"] if p["pass"] and not p["pass"].get("timeout") else None),
            trace_cell, fmt_mb(trace), ratio]


def body_sweep(folder: str, bodies: list[int], repeat: int, unroll_budget: float = UNROLL_BUDGET_S,
               log=_log) -> list[dict]:
    """One dict per body size: "statements"; "rolled" and "pass" (`--enable-pass unroll`)."""
    points = []
    for s in bodies:
        rolled = _ok(measure(body_kernel(s), folder, f"body{s}", "rolled", repeat))
        unroll_pass = measure(body_kernel(s), folder, f"body{s}", "pass", 1, unroll_budget * 3 + 60, unroll_budget)
        points.append({"statements": s, "rolled": rolled,
                       "pass": unroll_pass if unroll_pass and not unroll_pass.get("timeout") else None})
        log(" | ".join(body_row(points[-1])))
    return points


BODY_HEADER = ["body statements", "rolled: compile", "peak RSS MB", "instructions (rolled)",
               "instructions (unrolled)", "`--enable-pass unroll`: compile"]


def body_row(p: dict) -> list[str]:
    r, up = p["rolled"], p["pass"]
    pass_cell = "-" if up is None else ("stopped by the budget" if up.get("budget_stopped") else fmt_s(up["seconds"]))
    return [str(p["statements"]), fmt_s(r and r["seconds"]), fmt_mb(r),
            f"{r['rolled']:,}" if r else "-", f"{r['unrolled']:,}" if r else "-", pass_cell]


def fit(points: list[tuple[int, float]]) -> str:
    """Least-squares line through (statements, seconds)."""
    if len(points) < 2:
        return "-"
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    ss_tot = sum((y - my) ** 2 for _, y in points)
    ss_res = sum((y - (my + slope * (x - mx))) ** 2 for x, y in points)
    r2 = 1 - ss_res / ss_tot if ss_tot else 1.0
    return (f"least-squares fit: {(my - slope * mx) * 1000:.1f} ms + {slope * 1000:.2f} ms per statement "
            f"(R^2 = {r2:.3f})")


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def collect(quick: bool = False, repeat: int = 7, unroll_budget: float | None = None,
            trips: list[int] | None = None, bodies: list[int] | None = None, log=_log) -> dict:
    """Run both sweeps; return the measurements as plain values (JSON-ready)."""
    trips = trips or (QUICK["trips"] if quick else TRIPS)
    bodies = bodies or (QUICK["bodies"] if quick else BODIES)
    unroll_max = QUICK["unroll_max"] if quick else max(TRIPS)
    if unroll_budget is None:
        unroll_budget = QUICK["unroll_budget"] if quick else UNROLL_BUDGET_S
    with tempfile.TemporaryDirectory(prefix="nkicc_bench_") as folder:
        log(f"machine: {machine_line()}")
        base = measure(BASELINE, folder, "baseline", "rolled", repeat)
        log(baseline_text(base))
        log("\n(a) trip count of one static loop (2-instruction body)")
        log(" | ".join(TRIP_HEADER))
        trip_points = trip_sweep(folder, trips, repeat, UNROLL_STOP_S, unroll_max, unroll_budget, log=log)
        log(f"\n(b) statements in the body of a {BODY_TRIP}-iteration static loop")
        log(" | ".join(BODY_HEADER))
        body_points = body_sweep(folder, bodies, repeat, unroll_budget, log=log)
    data = {"machine": machine_line(), "quick": quick, "repeat": repeat, "unroll_budget_s": unroll_budget,
            "unroll_stop_s": UNROLL_STOP_S, "unroll_max": unroll_max, "body_trip": BODY_TRIP,
            "baseline": base, "trips": trip_points, "bodies": body_points}
    data["body_fit"] = fit([(p["statements"], p["rolled"]["seconds"]) for p in body_points if p["rolled"]])
    log(data["body_fit"])
    return data


def baseline_text(base: dict | None) -> str:
    if not base:
        return "Baseline (a kernel with no loop): failed."
    return (f"Baseline (a kernel with no loop): {fmt_s(base['seconds'])} per compile, peak RSS "
            f"{base['peak_rss_mb']:.0f} MB ({base['rss_before_mb']:.0f} MB before compiling: Python, numpy, "
            f"nkicc). The first compile in a process also loads the pass registry: "
            f"{fmt_s(base['first_s'])}; it is excluded from the times below.")


def markdown(data: dict, command: str | None = None, with_machine: bool = True) -> str:
    """The tables (and the baseline and fit lines) as markdown."""
    budget = data["unroll_budget_s"]
    parts = []
    if command:
        parts += [f"Command: `{command}`", ""]
    if with_machine:
        parts += [f"Machine: {data['machine']}.", ""]
    parts += [
        baseline_text(data["baseline"]),
        "",
        "(a) Trip count of one static loop whose body has 2 instructions (a load of the loop's "
        "tile and an add). Rolled: the default pipeline, best of "
        f"{data['repeat']}. `--enable-pass unroll`: the same pipeline with the unroll pass (the vendor behaviour), "
        f"under a {budget:g} s compile time budget (`--max-compile-time {budget:g}`); the sweep stops at the first "
        "point the budget stops. Unrolled trace: `nkicc.compile(..., unroll=True)`, which traces every iteration "
        "as NKI does (not beyond "
        f"{data['unroll_max']:,} iterations, nor past a point slower than {data['unroll_stop_s']:.0f} s).",
        "",
        table(TRIP_HEADER, [trip_row(p) for p in data["trips"]]),
        "",
        f"(b) Statements in the body of a {data['body_trip']}-iteration static loop: the default pipeline "
        "(rolled) and `--enable-pass unroll`.",
        "",
        table(BODY_HEADER, [body_row(p) for p in data["bodies"]]),
        "",
        "Rolled pipeline, " + data["body_fit"] + ".",
        "",
    ]
    return "\n".join(parts)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables as markdown to FILE")
    ap.add_argument("--json", metavar="FILE", help="also write the measurements as JSON to FILE")
    ap.add_argument("--repeat", type=int, default=7, help="rolled compiles per point; the best is kept")
    ap.add_argument("--quick", action="store_true",
                    help="fewer points; unrolled trace only up to 1,000 iterations; a 5 s unroll budget")
    ap.add_argument("--unroll-budget", type=float, default=None, metavar="S",
                    help=f"compile time budget of the --enable-pass unroll compiles (default {UNROLL_BUDGET_S:g} s, "
                         f"--quick {QUICK['unroll_budget']:g} s)")
    ap.add_argument("--worker", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="rolled", choices=["rolled", "pass", "trace"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.mode, args.repeat,
               UNROLL_BUDGET_S if args.unroll_budget is None else args.unroll_budget)
        return

    command = "python bench/compile_scaling.py" + (" --quick" if args.quick else "") + \
              (f" --repeat {args.repeat}" if args.repeat != 7 else "") + \
              (f" --unroll-budget {args.unroll_budget:g}" if args.unroll_budget is not None else "") + \
              (f" --markdown {args.markdown}" if args.markdown else "")
    data = collect(args.quick, args.repeat, args.unroll_budget)
    data["command"] = command
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"\nwrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(data, command))
        print(f"\nwrote {args.markdown}")


if __name__ == "__main__":
    main()
