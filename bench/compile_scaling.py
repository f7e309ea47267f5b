"""How compile time and compiler memory scale with a loop's trip count and with
the size of its body, for the rolled pipeline and (for comparison) the unrolled
trace, which is what a compiler that unrolls every static loop pays.

    python bench/compile_scaling.py                   # print the tables
    python bench/compile_scaling.py --markdown F.md   # also write them as markdown
    python bench/compile_scaling.py --quick           # fewer points, no unrolled beyond 1000

Every point runs in a fresh Python process (so that peak RSS belongs to that
point alone); the kernels are generated into a temporary .py file, because
rolling needs the loop's source. Time is the wall time of `nkicc.compile`
(trace + passes) inside that process, best of --repeat runs (unrolled: one run),
after a warm-up compile of a loop-free kernel; memory is the process's peak RSS
(interpreter, numpy and nkicc included: the baseline line shows what an empty
compile costs).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import textwrap
import time

TRIPS = [1, 10, 100, 1000, 10000, 30000, 100000]  # beyond 10,000: where unrolling passes ~20 s
BODIES = [1, 2, 4, 8, 16, 32]
BODY_TRIP = 100
UNROLL_STOP_S = 20.0     # stop the unrolled sweep after a point slower than this
UNROLL_TIMEOUT_S = 120   # and do not start one that linear extrapolation puts beyond this
POINT_TIMEOUT_S = 300

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

def worker(path: str, unroll: bool, repeat: int) -> None:
    """Compile kernel in `path`; print one JSON line."""
    import nkicc
    from nkicc.loader import load_kernel
    from nkicc.specs import annotated_specs
    from nkicc.trace import inspect_unwrap

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
    rss_before = _peak_rss_mb()
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        compiled = nkicc.compile(kernel, *specs.values(), unroll=unroll)
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


def measure(source: str, folder: str, tag: str, unroll: bool, repeat: int,
            timeout: float = POINT_TIMEOUT_S) -> dict | None:
    path = os.path.join(folder, f"bench_{tag}.py")
    with open(path, "w") as f:
        f.write(source)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", path, "--repeat", str(repeat)]
    if unroll:
        cmd.append("--unroll")
    t0 = time.perf_counter()
    try:
        # the compile cache off: the best of several compiles must not be a cache hit
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "NKICC_CACHE": "0"})
    except subprocess.TimeoutExpired:
        return {"timeout": timeout, "seconds": float("inf"), "wall": time.perf_counter() - t0}
    if p.returncode != 0:
        print(f"  {tag}{' (unrolled)' if unroll else ''} failed:\n{p.stderr[-2000:]}", file=sys.stderr)
        return None
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - t0
    return out


# --- the sweeps -------------------------------------------------------------------------

def fmt_s(x) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def fmt_mb(r) -> str:
    return "-" if r is None else f"{r['peak_rss_mb']:.0f}"


def trip_sweep(folder: str, trips: list[int], repeat: int, unroll_stop: float, unroll_max: int) -> list[list[str]]:
    rows = []
    stopped = None  # why the unrolled sweep stopped, once it has
    last = None     # (trip count, seconds) of the previous unrolled point
    for n in trips:
        src = trip_kernel(n)
        rolled = measure(src, folder, f"trip{n}", False, repeat)
        rolled = None if rolled and rolled.get("timeout") else rolled
        unrolled, cell = None, f"not run ({stopped})" if stopped else "not run"
        guess = last[1] * n / last[0] if last else 0.0
        if stopped is None and n <= unroll_max and guess > UNROLL_TIMEOUT_S:
            stopped = f"> {guess:.0f} s by linear extrapolation"
            cell = f"not run ({stopped})"
        elif stopped is None and n <= unroll_max:
            unrolled = measure(src, folder, f"trip{n}", True, 1, UNROLL_TIMEOUT_S)
            if unrolled is None:
                stopped, cell = "failed", "failed"
            elif unrolled.get("timeout"):
                stopped = cell = f"> {UNROLL_TIMEOUT_S} s, stopped"
                unrolled = None
            else:
                cell, last = fmt_s(unrolled["seconds"]), (n, unrolled["seconds"])
                if unrolled["seconds"] > unroll_stop:
                    stopped = f"the previous point took over {unroll_stop:.0f} s"
        ratio = f"{unrolled['seconds'] / rolled['seconds']:,.0f}x" if rolled and unrolled else "-"
        rows.append([f"{n:,}", fmt_s(rolled and rolled["seconds"]), fmt_mb(rolled),
                     f"{rolled['rolled']:,}" if rolled else "-",
                     f"{rolled['unrolled']:,}" if rolled else "-",
                     cell, fmt_mb(unrolled), ratio])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def body_sweep(folder: str, bodies: list[int], repeat: int) -> tuple[list[list[str]], str]:
    rows, points = [], []
    for s in bodies:
        r = measure(body_kernel(s), folder, f"body{s}", False, repeat)
        r = None if r and r.get("timeout") else r
        rows.append([str(s), fmt_s(r and r["seconds"]), fmt_mb(r),
                     f"{r['rolled']:,}" if r else "-", f"{r['unrolled']:,}" if r else "-"])
        if r:
            points.append((s, r["seconds"]))
        print(" | ".join(rows[-1]), flush=True)
    return rows, fit(points)


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


def machine() -> str:
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    try:
        import numpy
        np_v = numpy.__version__
    except ImportError:  # pragma: no cover
        np_v = "?"
    return (f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}), "
            f"{mem_gb:.0f} GiB memory, {platform.machine()}, Linux {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np_v}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables as markdown to FILE")
    ap.add_argument("--repeat", type=int, default=7, help="rolled compiles per point; the best is kept")
    ap.add_argument("--quick", action="store_true", help="fewer points; unrolled only up to 1,000 iterations")
    ap.add_argument("--worker", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--unroll", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.unroll, args.repeat)
        return

    trips = TRIPS[:4] if args.quick else TRIPS
    bodies = BODIES[:4] if args.quick else BODIES
    unroll_max = 1000 if args.quick else max(TRIPS)
    command = "python bench/compile_scaling.py" + (" --quick" if args.quick else "") + \
              (f" --repeat {args.repeat}" if args.repeat != 7 else "") + \
              (f" --markdown {args.markdown}" if args.markdown else "")
    with tempfile.TemporaryDirectory(prefix="nkicc_bench_") as folder:
        print(f"machine: {machine()}")
        base = measure(BASELINE, folder, "baseline", False, args.repeat)
        baseline = (f"Baseline (a kernel with no loop): {fmt_s(base['seconds'])} per compile, peak RSS "
                    f"{base['peak_rss_mb']:.0f} MB ({base['rss_before_mb']:.0f} MB before compiling: Python, numpy, "
                    f"nkicc). The first compile in a process also loads the pass registry: "
                    f"{fmt_s(base['first_s'])}; it is excluded from the times below.")
        print(baseline)
        print("\n(a) trip count of one static loop (2-instruction body)")
        trip_header = ["trip count", "rolled: compile", "rolled: peak RSS MB", "instructions (rolled)",
                       "instructions (unrolled)", "unrolled trace: compile", "unrolled: peak RSS MB",
                       "unrolled / rolled time"]
        print(" | ".join(trip_header))
        trip_rows = trip_sweep(folder, trips, args.repeat, UNROLL_STOP_S, unroll_max)
        print(f"\n(b) statements in the body of a {BODY_TRIP}-iteration static loop (rolled)")
        body_header = ["body statements", "rolled: compile", "peak RSS MB",
                       "instructions (rolled)", "instructions (unrolled)"]
        print(" | ".join(body_header))
        body_rows, body_fit = body_sweep(folder, bodies, args.repeat)
        print(body_fit)

    if args.markdown:
        text = "\n".join([
            f"Command: `{command}`",
            "",
            f"Machine: {machine()}.",
            "",
            baseline,
            "",
            "(a) Trip count of one static loop whose body has 2 instructions (a load of the loop's "
            "tile and an add). Unrolled = `nkicc.compile(..., unroll=True)`, which traces every iteration as NKI does.",
            "",
            table(trip_header, trip_rows),
            "",
            f"(b) Statements in the body of a {BODY_TRIP}-iteration static loop, rolled pipeline.",
            "",
            table(body_header, body_rows),
            "",
            body_fit + ".",
            "",
        ])
        with open(args.markdown, "w") as f:
            f.write(text)
        print(f"\nwrote {args.markdown}")


if __name__ == "__main__":
    main()
