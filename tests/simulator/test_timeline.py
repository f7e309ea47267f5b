"""Engine active percentages (neuron-profile's engine_active_time_percent) and
the engine timeline picture (simulator/activity.py, simulator/plot.py,
`--timeline`, SimReport in a notebook, collectives on every rank's rows).

Oracles: active times worked out by hand from the cost table's cost of each
instruction and the kernel's dependences; a brute-force union of the trace's
intervals; the PNG signature; a subprocess in which matplotlib cannot be
imported."""
import json
import subprocess
import sys

import numpy as np
import pytest

import nkicc
import nkicc.language as nl
import nkicc.language.collectives as cc
from nkicc.ir import Op
from nkicc.ir.analysis import engine_of
from nkicc.plugins.targets import TRN2
from nkicc.simulator.activity import DmaActivity, union_ns
from nkicc.simulator.machine import MachineSimulator
from nkicc.simulator.timing import cost_ns

from tests.support.paths import REPO
from tests.support.cli import run_cli

PNG = b"\x89PNG\r\n\x1a\n"


@nkicc.jit
def one_matmul(a_t, b):
    """Two loads, one matmul, a PSUM -> SBUF copy, one store: each waits for the one before."""
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a_t)
    y = nl.load(b)
    p = nl.matmul(x, y, transpose_x=True)
    nl.store(out, value=nl.copy(p))
    return out


@nkicc.jit
def tiles(a):
    """Several tiles in flight: loads and stores on several queues overlap in time."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, nl.exp(x)))
    return out


def _costs(compiled):
    """opcode -> [cost ns of each instruction, in program order], from the target's cost table."""
    decls = compiled.ir.tensor_map()
    out = {}
    for op in (s for s in compiled.ir.body.walk() if isinstance(s, Op)):
        out.setdefault(op.opcode, []).append(cost_ns(op, engine_of(op, decls), decls, TRN2, TRN2.costs))
    return out


# --- active percentages --------------------------------------------------------------------

def test_active_percentages_of_a_hand_computed_kernel(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    c = nkicc.compile(one_matmul, a, b, passes={"target": "trn2"})
    costs = _costs(c)
    (load_a, load_b, store), (mm,), (copy,) = costs["dma_copy"], costs["nc_matmul"], costs["tensor_copy"]
    # the loads start at once on two queues, but each spreads over all 16 DMA engines (128 rows), so
    # after their fixed latency they share the engines: the first issued moves its bytes first, the
    # second's follow (simulator/fabric.py); the matmul waits for both, the copy for it, the store for it
    fixed = TRN2.costs.dma_fixed_ns
    loads = fixed + (load_a - fixed) + (load_b - fixed)
    total = loads + mm + copy + store
    out, rep = c.simulate({"a_t": a, "b": b})
    np.testing.assert_allclose(out[c.ir.outputs[0]], a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert rep.total_ns == pytest.approx(total)
    assert rep.engines["pe"].active_pct == pytest.approx(100 * mm / total)
    assert rep.engines["dve"].active_pct == pytest.approx(100 * copy / total)
    assert rep.engines["act"].active_pct == rep.engines["pool"].active_pct == 0
    # DMA: a moment counts once however many queues move data (the loads overlap)
    assert rep.engines["dma"].active_pct == pytest.approx(100 * (loads + store) / total)
    assert sorted(q.active_pct for q in rep.dma_queues.values()) == pytest.approx(
        sorted(100 * x / total for x in (load_a, loads, store)))
    assert rep.active == {name: s.active_pct for name, s in rep.engines.items()}
    # the same numbers in the JSON and the printed summary
    d = json.loads(rep.to_json())
    assert d["engines"]["pe"]["active_pct"] == pytest.approx(100 * mm / total, abs=0.01)
    assert "timeline" not in d and "utilisation" not in json.dumps(d)
    summary = rep.summary()
    assert f"{100 * mm / total:5.1f}% active" in summary and "TensorE" in summary
    assert f"{rep.engines['dma'].active_pct:5.1f}% active (any queue)" in summary


def test_active_time_is_the_union_of_the_trace_intervals(rng):
    a = rng.standard_normal((8 * 128, 256)).astype(np.float32)
    c = nkicc.compile(tiles, a, passes={"target": "trn2"})
    out, rep = c.simulate({"a": a}, trace=True)
    np.testing.assert_allclose(out[c.ir.outputs[0]], a + np.exp(a), rtol=1e-5)
    tracks = dict(rep.timeline.tracks)
    dma = [(s, s + d) for name, evs in tracks.items() if name.startswith("DMA queue") for s, d, _ in evs]
    assert len({name for name in tracks if name.startswith("DMA queue")}) > 1
    # brute force: sample the time axis finely and count the moments some queue is busy
    grid = np.linspace(0, rep.total_ns / 1000, 200_001)[:-1] + rep.total_ns / 1000 / 400_000
    busy = np.zeros(grid.shape, bool)
    for lo, hi in dma:
        busy |= (grid >= lo) & (grid < hi)
    assert rep.engines["dma"].active_pct == pytest.approx(100 * busy.mean(), abs=0.05)
    assert rep.engines["dma"].active_pct < sum(q.active_pct for q in rep.dma_queues.values())
    for name, label in (("act", "Scalar Engine (act)"), ("dve", "Vector Engine (dve)")):
        busy_us = sum(d for _, d, _ in tracks[label])
        assert rep.engines[name].active_pct == pytest.approx(100 * busy_us * 1000 / rep.total_ns)


def test_dma_activity_unions_interleaved_queues_in_bounded_memory(rng):
    """Many queues, each in time order, arriving interleaved: the union equals the
    brute-force one, and the kept intervals stay few (compaction below the floor)."""
    queues = 5
    free = [0.0] * queues
    act = DmaActivity()
    every = []
    for _ in range(3000):
        q = int(rng.integers(queues))
        start = free[q] + float(rng.choice([0.0, rng.exponential(20.0)]))
        finish = start + float(rng.exponential(10.0))
        free[q] = finish
        every.append((start, finish))
        act.add(start, finish, lambda: min(free))
    assert act.active_ns() == pytest.approx(union_ns(every))
    assert len(act._pending) < 600
    merged = sorted(every)  # an independent union: sweep the sorted intervals
    covered, end = 0.0, -1.0
    for lo, hi in merged:
        if hi > end:
            covered += hi - max(lo, end)
            end = hi
    assert act.active_ns() == pytest.approx(covered)


def test_tune_rows_and_table_show_the_reports_active_percentages(rng):
    """`nkicc tune`'s engine columns are the simulation report's active_pct, as
    `nkicc simulate` prints them (the row is filled from the --report JSON)."""
    from nkicc.sweep import Row, TuneResult, fill_row
    from nkicc.sweep_view import table
    from rich.console import Console
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    c = nkicc.compile(one_matmul, a, b)
    _, rep = c.simulate({"a_t": a, "b": b})
    row = fill_row(Row(0, {"T": 1}), json.loads(json.dumps(c.report, default=str)))
    assert row.engines == {name: round(pct, 1) for name, pct in rep.active.items()}
    row.rank = 1
    result = TuneResult(kernel="one_matmul", sweeps={"T": [1]}, rows=[row], workers=1, wall_s=1.0)
    out = Console(width=200, record=True)
    out.print(table(result))
    text = out.export_text()
    assert "pe %" in text and "dma %" in text and f"{rep.engines['dma'].active_pct:.1f}" in text


# --- the picture -------------------------------------------------------------------------

def test_report_draws_its_timeline_as_png(rng, tmp_path):
    pytest.importorskip("matplotlib")
    a = rng.standard_normal((4 * 128, 256)).astype(np.float32)
    c = nkicc.compile(tiles, a)
    _, rep = c.simulate({"a": a}, trace=True)
    png = rep._repr_png_()
    assert png[:8] == PNG and 2_000 < len(png) < 300_000
    assert "data:image/png;base64," in rep._repr_html_() and "% active" in rep._repr_html_()
    path = tmp_path / "t.png"
    assert c.plot_timeline(str(path)) == path.read_bytes()
    assert path.read_bytes()[:8] == PNG
    # without a trace there is nothing to draw: no picture, and the notebook says how to get one
    _, plain = c.simulate({"a": a})
    assert plain.timeline is None and plain._repr_png_() is None and "trace=True" in plain._repr_html_()
    with pytest.raises(nkicc.NkiccError) as e:
        plain.plot()
    assert e.value.code == "E206"


def test_cli_simulate_timeline_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "t.png"
    r = run_cli("simulate", "examples/matmul.py::matmul_blocked", "--timeline", str(path), cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 2_000
    assert f"timeline: {path}" in r.stdout and "% active" in r.stdout


def test_cli_run_timeline_one_picture_per_kernel_call(tmp_path):
    pytest.importorskip("matplotlib")
    script = tmp_path / "script.py"
    script.write_text(
        "import numpy as np\nimport nki\nimport nki.language as nl\n\n"
        "@nki.jit\ndef double(a):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, value=nl.multiply(nl.load(a), 2.0))\n    return out\n\n"
        "x = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)\n"
        "assert np.allclose(double(x), 2 * x)\nassert np.allclose(double(x[:64]), 2 * x[:64])\n")
    path = tmp_path / "t.png"
    r = run_cli("run", "--timeline", str(path), str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for p in (path, tmp_path / "t-2.png"):
        assert p.read_bytes()[:8] == PNG, p
    assert "written to" in r.stderr


BLOCKED = ("import sys\n"
           "class Block:\n"
           "    def find_spec(self, name, path=None, target=None):\n"
           "        if name == 'matplotlib' or name.startswith('matplotlib.'):\n"
           "            raise ImportError('blocked: ' + name)\n"
           "sys.meta_path.insert(0, Block())\n")


def test_without_matplotlib_one_line_says_what_to_install(tmp_path):
    """A subprocess in which `import matplotlib` fails (a meta path hook): the
    command line refuses --timeline before compiling, in one line, and the
    report's notebook form falls back to text."""
    cli = BLOCKED + ("sys.argv = ['nkicc', 'simulate', 'examples/matmul.py::matmul_blocked', '--timeline', "
                     f"{str(tmp_path / 't.png')!r}]\nfrom nkicc.cli import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", cli], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "E206" in lines[0] and "pip install 'nkicc[plot]'" in lines[0], r.stderr
    assert not (tmp_path / "t.png").exists() and "Traceback" not in r.stderr
    api = BLOCKED + (
        "import numpy as np, nkicc\n"
        "from tests.simulator.test_timeline import tiles\n"
        "a = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)\n"
        "c = nkicc.compile(tiles, a)\n_, rep = c.simulate({'a': a}, trace=True)\n"
        "assert rep._repr_png_() is None\nassert 'nkicc[plot]' in rep._repr_html_()\n"
        "try:\n    rep.plot()\nexcept nkicc.NkiccError as e:\n    print(e)\n"
        "assert 'matplotlib' not in sys.modules or sys.modules['matplotlib'] is None\n")
    r = subprocess.run([sys.executable, "-c", api], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "E206" in r.stdout and "pip install 'nkicc[plot]'" in r.stdout


# --- collectives on the timeline -----------------------------------------------------------

@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_collectives_are_on_every_ranks_timeline(rng, ranks, tmp_path):
    """all_reduce, all_gather and reduce_scatter over N ranks: each rank's
    timeline holds each collective once, at the same start on every rank (they
    start together, when the last rank is ready), as long as the cost table
    says, and counted in the rank's DMA active time; the picture stacks every
    rank's rows."""
    xs = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(ranks)]
    group = cc.ReplicaGroup([list(range(ranks))])

    @nkicc.jit
    def k(x):
        red = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        gat = nl.ndarray((64 * ranks, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        sca = nl.ndarray((64 // ranks, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        cc.all_reduce(srcs=[x], dsts=[red], replica_group=group, op=nl.add)
        cc.all_gather(srcs=[red], dsts=[gat], replica_group=group, collective_dim=0)
        cc.reduce_scatter(srcs=[x], dsts=[sca], replica_group=group, collective_dim=0, op=nl.add)
        return red, gat, sca

    ck = nkicc.compile(k, xs[0])
    outputs, reports = ck.run_ranks([{"x": x} for x in xs], trace=True)
    total = np.sum(xs, axis=0)
    for r, out in enumerate(outputs):
        red, gat, sca = (out[o] for o in ck.ir.outputs)
        np.testing.assert_allclose(red, total, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(gat, np.concatenate([total] * ranks), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sca, total[r * 64 // ranks:(r + 1) * 64 // ranks], rtol=1e-5, atol=1e-5)
    decls = ck.ir.tensor_map()
    want = {op.opcode: cost_ns(op, "dma", decls, TRN2, TRN2.costs, ranks) / 1000
            for op in ck.ir.body.walk() if isinstance(op, Op) and op.opcode in ("all_reduce", "all_gather",
                                                                                  "reduce_scatter")}
    assert len(want) == 3
    starts = {}
    for rep in reports:
        events = [(s, d, o) for _, evs in rep.timeline.tracks for s, d, o in evs if o in want]
        assert sorted(o for _, _, o in events) == sorted(want)
        for s, d, o in events:
            assert d == pytest.approx(want[o]) and d > 0
            starts.setdefault(o, set()).add(round(s, 6))
        coll_us = union_ns([(s, s + d) for s, d, _ in events])  # (reduce_scatter overlaps the others)
        assert rep.engines["dma"].active_pct >= 100 * coll_us * 1000 / rep.total_ns - 1e-6
    assert all(len(s) == 1 for s in starts.values()), starts  # every rank starts each collective together
    # all_gather reads what all_reduce wrote: it starts when that ends
    assert min(starts["all_gather"]) >= min(starts["all_reduce"]) + want["all_reduce"] - 1e-6
    if ranks == 2:  # the picture: every rank's rows, one PNG
        pytest.importorskip("matplotlib")
        from nkicc.simulator.plot import rows
        labels = [name for name, _ in rows([rep.timeline for rep in reports])]
        assert any(n.startswith("rank 0: DMA queue") for n in labels)
        assert any(n.startswith("rank 1: DMA queue") for n in labels)
        png = ck.plot_timeline(str(tmp_path / "ranks.png"))
        assert png[:8] == PNG and (tmp_path / "ranks.png").read_bytes() == png


def test_a_two_core_launch_keeps_both_cores_timelines(rng, tmp_path):
    """kernel[2] whose cores meet at sendrecv / core_barrier: each core's
    timeline (and, with a trace path, its own Perfetto file), both in the picture."""
    import nkicc.isa as nisa

    @nkicc.jit
    def swap(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
        theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
        return out

    x = rng.standard_normal((128, 32)).astype(np.float32)
    ck = swap[2].compile(x)
    ck.trace_path = str(tmp_path / "t.json")
    got = ck.run(x)
    np.testing.assert_array_equal(got, np.concatenate([x[64:], x[:64]]))
    assert len(ck.sim_ranks) == 2
    for r, rep in enumerate(ck.sim_ranks):
        trace = json.loads((tmp_path / f"t.rank{r}.json").read_text())
        assert any(e.get("name") == "sendrecv" for e in trace["traceEvents"])
        assert any(o == "sendrecv" for _, evs in rep.timeline.tracks for _, _, o in evs)
    pytest.importorskip("matplotlib")
    assert ck.plot_timeline()[:8] == PNG
