"""bench/run_all.py: the parts that need neither long runs nor (except the
plot tests, which skip without it) matplotlib."""
import json
import pathlib
import re
import subprocess
import sys

import pytest

from tests.support.bench import load_bench
from tests.support.paths import BENCH, REPO


ra = load_bench("run_all")

DOC = """# Benchmarks

Intro, hand-written.

## Compile scaling

old compile numbers

<!-- keep -->
A note the author wants to keep.
<!-- /keep -->

## The user's full-size seed kernels

Hand-written table.

```
## not a heading: inside a fence
```

## Cache

old cache numbers

## Timing sanity: the matmul progression

old timing

## Something else

hand-written tail
"""


def test_split_sections_round_trips_and_ignores_fenced_headings():
    preamble, sections = ra.split_sections(DOC)
    assert preamble.startswith("# Benchmarks")
    assert [h for h, _ in sections] == ["## Compile scaling", "## The user's full-size seed kernels", "## Cache",
                                        "## Timing sanity: the matmul progression", "## Something else"]
    assert preamble + "".join(t for _, t in sections) == DOC


def test_merge_replaces_owned_sections_and_keeps_the_others_in_order():
    new = {"## Compile scaling": "## Compile scaling\n\nnew compile numbers\n",
           "## Cache": "## Cache\n\nnew cache numbers\n",
           "## Simulator throughput": "## Simulator throughput\n\nnew sim numbers\n"}
    out = ra.merge_sections(DOC, new, list(ra.OWNED.values()))
    _, sections = ra.split_sections(out)
    assert [h for h, _ in sections] == ["## Compile scaling", "## The user's full-size seed kernels", "## Cache",
                                        "## Simulator throughput", "## Timing sanity: the matmul progression",
                                        "## Something else"]
    text = dict(sections)
    assert "new compile numbers" in text["## Compile scaling"] and "old compile" not in out
    assert "A note the author wants to keep." in text["## Compile scaling"]          # keep block carried over
    assert "Hand-written table." in text["## The user's full-size seed kernels"]
    assert "## not a heading: inside a fence" in text["## The user's full-size seed kernels"]
    assert "old timing" in text["## Timing sanity: the matmul progression"]          # not regenerated: kept
    assert out.startswith("# Benchmarks\n\nIntro, hand-written.\n")
    assert out.rstrip().endswith("hand-written tail")
    # regenerating again changes nothing and does not duplicate the keep block
    again = ra.merge_sections(out, new, list(ra.OWNED.values()))
    assert again == out and again.count("<!-- keep -->") == 1


def test_merge_into_an_empty_file():
    out = ra.merge_sections("", {"## Cache": "## Cache\n\nx\n", "## Compile scaling": "## Compile scaling\n\ny\n"},
                            list(ra.OWNED.values()))
    assert out.startswith("# Benchmarks\n")
    assert [h for h, _ in ra.split_sections(out)[1]] == ["## Compile scaling", "## Cache"]


def test_the_real_doc_keeps_its_hand_written_sections():
    doc = (REPO / "docs" / "benchmarks.md").read_text()
    _, sections = ra.split_sections(doc)
    new = {h: f"{h}\n\nregenerated\n" for h in ra.OWNED.values()}
    out = ra.merge_sections(doc, new, list(ra.OWNED.values()))
    kept = [(h, t) for h, t in sections if h not in new]
    for h, t in kept:
        assert t.strip() in out
    assert [h for h, _ in ra.split_sections(out)[1] if h not in new] == [h for h, _ in kept]


def test_nkicc_and_run_all_do_not_import_matplotlib():
    code = ("import sys, importlib.util; import nkicc, nkicc.cli, nkicc.simulator.machine; "
            "s = importlib.util.spec_from_file_location('ra', sys.argv[1]); m = importlib.util.module_from_spec(s); "
            "s.loader.exec_module(m); assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    r = subprocess.run([sys.executable, "-c", code, str(BENCH / "run_all.py")], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    # the package draws pictures in one module (an optional extra), importing matplotlib
    # inside the function that draws, never at module level
    imports = re.compile(r"^\s*(import|from)\s+matplotlib", re.M)
    top_level = re.compile(r"^(import|from)\s+matplotlib", re.M)
    for folder in ("driver", "ir", "language", "plugins", "simulator", "cache"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text()
            if path == REPO / "simulator" / "plot.py":
                assert imports.search(text) and not top_level.search(text), path
            else:
                assert not imports.search(text), path


def test_without_matplotlib_the_section_says_how_to_get_the_plots(monkeypatch, tmp_path):
    def missing():
        raise ra.NoMatplotlib(f"matplotlib is not installed; {ra.INSTALL_HINT} to make the plots")
    monkeypatch.setattr(ra, "pyplot", missing)
    bench = ra.SimBench(True, str(tmp_path), tmp_path / "img", tmp_path / "benchmarks.md")
    line = bench.image(ra.plot_sim, SIM, "sim.png", "alt")
    assert "pip install '.[bench]'" in line and not (tmp_path / "img" / "sim.png").exists()


def test_cache_seeds_skip_without_workloads(monkeypatch, tmp_path):
    cb = ra.bench_module("cache")
    monkeypatch.setattr(cb, "WORKLOADS", tmp_path / "absent")
    assert cb.bench_seeds(1, tmp_path / "absent") is None
    assert "not present" in cb.seeds_table(None)[0]
    monkeypatch.setattr(ra, "pyplot", lambda: (_ for _ in ()).throw(ra.NoMatplotlib("no matplotlib")))
    bench = ra.CacheBench(True, str(tmp_path), tmp_path / "img", tmp_path / "benchmarks.md")
    text = "\n".join(bench.body({**CACHE, "seeds": None}))
    assert "seeds were skipped" in text and "not present" in text


# --- fixtures: what the benchmarks' --json files hold, cut down ---------------------------

def _r(s, rss=40.0, compiled=4):
    return {"seconds": s, "peak_rss_mb": rss, "rss_before_mb": 39.0, "first_s": 0.03, "trace_s": s / 2,
            "rolled": 4, "unrolled": compiled, "compiled": compiled}


COMPILE = {
    "machine": "test", "quick": True, "repeat": 1, "unroll_budget_s": 5.0, "unroll_stop_s": 20.0, "unroll_max": 100,
    "body_trip": 100, "baseline": _r(0.0016),
    "trips": [
        {"trips": 1, "rolled": _r(0.003), "pass": _r(0.003), "pass_note": None, "trace": _r(0.0025),
         "trace_note": None},
        {"trips": 100, "rolled": _r(0.003), "pass": _r(0.011, 41, 202), "pass_note": None,
         "trace": _r(0.017, 41, 202), "trace_note": None},
        {"trips": 10000, "rolled": _r(0.0034), "pass": _r(2.5, 75, 20002), "pass_note": None, "trace": None,
         "trace_note": "not run (beyond 100)"},
        {"trips": 30000, "rolled": _r(0.0028),
         "pass": {"budget_stopped": True, "seconds": 5.1, "budget_s": 5.0, "pass": "schedule", "message": "E320",
                  "first_s": 0.03, "peak_rss_mb": 128.0, "rss_before_mb": 39.0},
         "pass_note": "stopped by the 5 s budget (in schedule)", "trace": None, "trace_note": "not run (beyond 100)"},
    ],
    "bodies": [{"statements": s, "rolled": _r(0.002 + 0.0003 * s), "pass": _r(0.003 * s)} for s in (1, 2, 4, 8)],
    "body_fit": "least-squares fit: 2.0 ms + 0.30 ms per statement (R^2 = 1.000)",
}
CACHE = {
    "machine": "test", "commit": "abc", "repeat": 1, "workloads": "../shared/workloads",
    "seeds": [{"seed": "seed_mm2_static.py::mm2", "trace_s": 0.02, "off_s": 0.014, "cold_s": 0.035, "warm_s": 0.0015,
               "warm_median_s": 0.0015}],
    "edits": [{"what": "stages edit", "kernel": "tests/support/cache_kernels.py::stages", "regions_hit": 56,
               "regions_total": 68, "off_s": 0.0066, "cold_s": 0.023, "warm_s": 0.0015, "edit_s": 0.024}],
    "processes": [{"run": "cold (empty folder)", "processes": 8, "wall_s": 8.4, "kernel_hit": 25, "kernel_miss": 7,
                   "region_hit": 64, "region_miss": 112, "corrupt": 0}],
}
SIM = {
    "scale": 8, "repeat": 1, "target": "trn2", "dims": {"M": 4096, "K": 512, "N": 2048, "L": 512}, "compile_s": 0.2,
    "lowered_by": "the pipeline", "executed": 17912, "opcodes": {"nc_matmul": 7872, "dma_copy": 2098},
    "numpy": {"wall_s": 0.4, "cpu_s": 0.27}, "numpy_1thread": {"wall_s": 0.31, "cpu_s": 0.2},
    "functional": {"timing": False, "wall_s": 0.83, "cpu_s": 0.54, "executed": 17912, "total_ns": 0.0,
                   "max_rel_err": 5.7e-7},
    "timing_on": {"timing": True, "wall_s": 0.86, "cpu_s": 0.6, "executed": 17912, "total_ns": 1.9e7,
                  "max_rel_err": 5.7e-7},
    "machine": "test",
}
TIMING = {"size": "1024,512,2048", "target": "trn2", "trace": None, "rows": [
    {"step": "matmul_tiled", "latency_us": 1875.5, "pe_utilisation": 0.019, "matmuls": 128, "max_err": 2.3e-05},
    {"step": "matmul_hoisted", "latency_us": 1729.9, "pe_utilisation": 0.021, "matmuls": 128, "max_err": 2.3e-05},
    {"step": "matmul_block_free", "latency_us": 405.3, "pe_utilisation": 0.088, "matmuls": 128, "max_err": 2.3e-05},
    {"step": "matmul_blocked", "latency_us": 259.6, "pe_utilisation": 0.138, "matmuls": 128, "max_err": 2.3e-05}]}


TIMING_LARGE = {**TIMING, "large_size": "4096,2048,4096", "large": [
    {"step": "single buffer", "latency_us": 2087.6, "pe_utilisation": 0.549, "dma_utilisation": 0.241,
     "matmuls": 4096, "max_err": 4.7e-05, "multi_buffered": "off"},
    {"step": "multi-buffer", "latency_us": 1446.8, "pe_utilisation": 0.793, "dma_utilisation": 0.348,
     "matmuls": 4096, "max_err": 4.7e-05, "multi_buffered": "matmul.py:125"}]}


def _trace():
    meta = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": n}}
            for t, n in [(1, "Tensor Engine (pe)"), (2, "Vector Engine (dve)"), (10, "DMA queue 0"),
                         (11, "DMA queue 1"), (1000, "loop i")]]
    meta += [{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": t, "args": {"sort_index": t}}
             for t in (1, 2, 10, 11, 1000)]
    ops = [{"name": "dma_copy", "cat": "dma", "ph": "X", "pid": 1, "tid": 10 + i % 2, "ts": 5.0 * i, "dur": 5.0,
            "args": {}} for i in range(8)]
    ops += [{"name": "nc_matmul", "cat": "pe", "ph": "X", "pid": 1, "tid": 1, "ts": 5.0 + 5 * i, "dur": 2.0,
             "args": {}} for i in range(7)]
    ops += [{"name": "tensor_copy", "cat": "dve", "ph": "X", "pid": 1, "tid": 2, "ts": 40.0, "dur": 3.0, "args": {}}]
    ops += [{"name": "i=0", "cat": "loop", "ph": "X", "pid": 1, "tid": 1000, "ts": 0.0, "dur": 43.0, "args": {}}]
    return {"traceEvents": meta + ops, "otherData": {"kernel": "matmul_blocked", "target": "trn2"}}


def test_timeline_from_a_trace_reads_engine_and_queue_rows_in_order():
    from nkicc.simulator.trace import Timeline
    tracks = Timeline.from_trace(_trace()).tracks
    assert [n for n, _ in tracks] == ["Tensor Engine (pe)", "Vector Engine (dve)", "DMA queue 0", "DMA queue 1"]
    assert len(tracks[0][1]) == 7 and tracks[2][1][0] == (0.0, 5.0, "dma_copy")


def test_summaries_from_fixtures():
    text = ra.compile_summary(COMPILE)
    assert "30,000 iterations the 5 s budget stopped it (in the schedule pass)." in text
    assert "latency falls at each step" in ra.timing_summary(TIMING)
    assert "| matmul_blocked | 259.6 | 13.8% | 128 |" in ra.timing_table(TIMING)
    assert "| multi-buffer | 1,446.8 | 79.3% | 34.8% | 4096 |" in ra.timing_table(TIMING_LARGE)
    assert "from 54.9% to 79.3% busy" in ra.timing_summary(TIMING_LARGE)


def test_timing_without_json_falls_back_to_its_markdown_table(monkeypatch, tmp_path):
    """Until bench/timing.py has --json: its --markdown table, no progression plot,
    and a trace of matmul_blocked made with `nkicc simulate ... --trace`."""
    calls = []

    def fake_run(cmd, label, timeout):
        calls.append(cmd)
        if "--json" in cmd:
            return 2, "timing.py: error: unrecognized arguments: --json x\n"
        if "--markdown" in cmd:
            pathlib.Path(cmd[cmd.index("--markdown") + 1]).write_text("| step | table |\n")
            return 0, ""
        pathlib.Path(cmd[cmd.index("--trace") + 1]).write_text(json.dumps(_trace()))
        return 0, ""

    monkeypatch.setattr(ra, "run_logged", fake_run)
    monkeypatch.setattr(ra, "pyplot", lambda: (_ for _ in ()).throw(ra.NoMatplotlib("no matplotlib")))
    bench = ra.TimingBench(True, str(tmp_path), tmp_path / "img", tmp_path / "benchmarks.md")
    data = bench.run()
    text = "\n".join(bench.body(data))
    assert "| step | table |" in text and "no `--json` option" in text
    assert "nkicc simulate examples/matmul.py::matmul_blocked --inputs random --trace t.json" in text
    assert any("simulate" in c for c in calls[-1])


@pytest.mark.parametrize("plot,data", [
    ("plot_compile_trips", COMPILE), ("plot_compile_body", COMPILE), ("plot_cache", CACHE),
    ("plot_cache", {**CACHE, "seeds": None}), ("plot_sim", SIM), ("plot_timing", TIMING),
    ("plot_timing", TIMING_LARGE),
    ("plot_gantt", None)])
def test_plots_write_small_pngs(plot, data, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "img" / f"{plot}.png"
    getattr(ra, plot)(data if data is not None else _trace(), path)
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert 2_000 < len(png) < 150_000


def test_sections_link_their_plots_relative_to_the_doc(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "docs" / "benchmarks.md"
    bench = ra.CompileBench(True, str(tmp_path), tmp_path / "docs" / "img", out)
    bench.commands = ["python bench/compile_scaling.py --quick --repeat 1 --json FILE"]
    bench.machine = ra.machine_info()
    text = "\n".join(bench.header("python bench/run_all.py --quick", "today", "commit abc") + bench.body(COMPILE))
    assert text.startswith("## Compile scaling\n")
    assert "![compile time and peak RSS" in text and "](img/compile_trip.png)" in text
    assert "`python bench/compile_scaling.py --quick --repeat 1 --json FILE`" in text
    assert "| 30,000 |" in text and "CPUs" in text
    assert (tmp_path / "docs" / "img" / "compile_trip.png").exists()
    assert (tmp_path / "docs" / "img" / "compile_body.png").exists()
    json.dumps(COMPILE)  # the fixture is what --json writes: plain values
