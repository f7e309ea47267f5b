"""`nkicc tune` and `nkicc run --shards` on a real Dask LocalCluster of 2 worker
processes: ranking against each variant compiled and simulated alone, one row
per failing variant (user error, timeout, a worker killed with SIGKILL), Ctrl-C,
and shards gathered against numpy."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nkicc
from nkicc import cluster as cluster_module
from nkicc.ir import NkiccError

from tests.support.events import Announcements, wait_gone
from tests.support.paths import REPO
from tests.support.cli import run_cli

KERNELS = str(REPO / "tests" / "driver" / "tune_kernels.py")
SCALE = f"{KERNELS}::scale"
EXIT_BOUND_S = 180  # only turns a hang into a failure


nkicc_cli = run_cli


@pytest.fixture(scope="module")
def dask_cluster():
    """A LocalCluster of 2 worker processes, as `nkicc tune` starts one (a task
    whose worker dies is tried once more), shared by the tests that pass its
    address as --cluster."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 1,
                          "distributed.scheduler.worker-saturation": 1.0}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=50)
    client = Client(cluster)
    yield cluster, client
    client.close()
    cluster.close()


def alone(T: int, target: str) -> float:
    """The oracle: one variant compiled and simulated by the Python API in this process."""
    from tests.driver.tune_kernels import scale

    compiled = nkicc.compile(scale, "float32[256,64]", T=T, passes={"target": target})
    a = np.random.default_rng(T).standard_normal((256, 64)).astype(np.float32)
    np.testing.assert_allclose(compiled.run(a), 2 * a, rtol=1e-6)
    return round(compiled.sim.total_ns / 1000, 3)


def one_line(text) -> bool:
    return isinstance(text, str) and text and "\n" not in text and "Traceback" not in text


def test_sweep_is_ranked_and_equal_to_each_variant_alone(dask_cluster):
    cluster, _ = dask_cluster
    result = nkicc.tune(SCALE, {"T": [32, 64, 128]}, targets=["trn1", "trn2"], cluster=cluster.scheduler_address)
    assert result.workers == 2 and not result.interrupted
    assert len(result) == 6 and all(r.status == "ok" for r in result), [r.error for r in result]
    times = [r.estimated_us for r in result]
    assert times == sorted(times) and [r.rank for r in result] == list(range(1, 7))
    for r in result:
        assert r.estimated_us == alone(r.values["T"], r.values["target"]), r.values
        assert r.compile_s > 0 and r.simulate_s > 0 and r.spills == 0
        assert 0 < r.engines["dma"] <= 100
        assert r.command.startswith(f"nkicc simulate {SCALE} --const T={r.values['T']}")
    assert result.best is result.rows[0]
    assert len({r.worker for r in result}) == 2  # both workers took variants


def test_failing_variant_and_timeout_are_one_row_each(dask_cluster):
    cluster, _ = dask_cluster
    result = nkicc.tune(SCALE, {"T": [64, 256], "MODE": ["ok", "sleep"]}, consts={"SLEEP": 120},
                        cluster=cluster.scheduler_address, timeout=12, cache=False)
    rows = {(r.values["T"], r.values["MODE"]): r for r in result}
    assert len(rows) == 4
    assert rows[64, "ok"].status == "ok" and rows[64, "ok"].rank == 1
    bad = rows[256, "ok"]
    assert bad.status == "failed" and one_line(bad.error)
    assert bad.error.startswith("error[E110]") and "tune_kernels.py:" in bad.error
    for T in (64, 256):
        slow = rows[T, "sleep"]
        assert slow.status == "timeout" and one_line(slow.error) and slow.error.startswith("error[E211]")
        assert slow.wall_s < 30  # stopped at the timeout, not after the 120 s sleep
    assert [r.status for r in result][0] == "ok"  # the finished row first


def test_cli_tune_table_json_and_best_command(dask_cluster, tmp_path):
    cluster, _ = dask_cluster
    out = tmp_path / "rows.json"
    p = nkicc_cli("tune", SCALE, "--sweep", "T=32,64,128,256", "--cluster", cluster.scheduler_address,
                  "--json", str(out), "--plot", str(tmp_path / "rows.svg"))
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert [r["status"] for r in data["rows"]] == ["ok", "ok", "ok", "failed"]
    best = data["rows"][0]
    assert best["estimated_us"] == min(r["estimated_us"] for r in data["rows"][:3])
    assert "est. us" in p.stdout and "failed: T=256: error[E110]" in p.stdout
    assert best["command"] in p.stdout
    svg = (tmp_path / "rows.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") == 3 and f">{best['estimated_us']:.3f}<" in svg
    assert best["command"].startswith("nkicc simulate ")
    again = nkicc_cli(*best["command"].split()[1:], "--sim-json", str(tmp_path / "sim.json"))
    assert again.returncode == 0, again.stderr
    assert round(json.loads((tmp_path / "sim.json").read_text())["total_ns"] / 1000, 3) == best["estimated_us"]


CTRL_C_AS_FROM_A_TERMINAL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                             "sys.argv[0] = 'nkicc'; runpy.run_module('nkicc', run_name='__main__', alter_sys=True)")


def test_ctrl_c_stops_the_sweep_and_prints_what_finished(tmp_path):
    """Ctrl-C once both slow variants have started: the tune hands a variant to a worker only
    after it has recorded the one that freed it, so the two quick rows are in by then."""
    started = Announcements(tmp_path / "started")
    # (as from a terminal: a shell that starts a job in the background, as CI may be, has it ignore
    # SIGINT, and a child inherits that)
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_AS_FROM_A_TERMINAL, "tune", SCALE, "--sweep", "SLEEP=0,60",
                             "--sweep", "T=64,128", "--const", "MODE='slow'", "--const", f"STARTED='{started.path}'",
                             "--workers", "2", "--no-cache", "--json", str(tmp_path / "rows.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        slow = [int(line.split()[0]) for line in started.wait(2)]  # both SLEEP=60 variants are tracing
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=EXIT_BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        started.close()
    assert proc.returncode == 130, err
    assert "stopped (Ctrl-C): 2 variants not run" in out
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "not run", "not run"]
    for pid in slow:  # nothing left running: each slow variant's process exits (not after its 60 s)
        wait_gone(pid, bound_s=EXIT_BOUND_S)


def test_sweep_values_read_back_as_given():
    from nkicc.sweep import _literal, parse_sweep

    assert parse_sweep("T=32,64") == ("T", [32, 64])
    assert parse_sweep("SHAPE=(1,2),(2,4)") == ("SHAPE", [(1, 2), (2, 4)])
    assert parse_sweep("MODE=fast,slow") == ("MODE", ["fast", "slow"])
    from nkicc.loader import const_value
    for value in (3, 2.5, "fast", "12", "a b", (1, 2), None, True, ""):
        assert const_value(_literal(value)) == value  # what --const reads back in the variant's command


def test_sweep_mistakes_are_one_line_before_any_task():
    with pytest.raises(NkiccError, match=r"E201.*no parameter 'TILE'"):
        nkicc.tune(SCALE, {"TILE": [1, 2]}, workers=1)
    with pytest.raises(NkiccError, match=r"E202.*unknown target 'trn9'"):
        nkicc.tune(SCALE, {"T": [64]}, targets="trn2,trn9", workers=1)
    with pytest.raises(NkiccError, match=r"E200"):
        nkicc.tune(lambda a: a, {"T": [64]})
    with pytest.raises(NkiccError, match=r"E210.*cannot reach the Dask scheduler"):
        old, cluster_module.CONNECT_TIMEOUT_S = cluster_module.CONNECT_TIMEOUT_S, 1  # nothing listens on port 9
        try:
            nkicc.tune(SCALE, {"T": [64]}, cluster="tcp://127.0.0.1:9")
        finally:
            cluster_module.CONNECT_TIMEOUT_S = old
    p = nkicc_cli("tune", SCALE, "--sweep", "T", "--workers", "1")
    assert p.returncode == 1 and p.stderr.strip().startswith("error[E201]") and "\n" not in p.stderr.strip()


SHARD_SCRIPT = textwrap.dedent('''
    import os
    import sys

    import numpy as np
    import nki
    import nki.language as nl

    @nki.jit
    def scale(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(out, value=nl.multiply(t, 3.0))
        return out

    shard, nshards, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    assert (os.environ["SHARD"], os.environ["NSHARDS"]) == (str(shard), str(nshards))
    assert (os.environ["NKICC_SHARD"], os.environ["NKICC_NSHARDS"]) == (str(shard), str(nshards))
    full = np.load(os.path.join(folder, "input.npy"))
    rows = full.shape[0] // nshards
    np.save(os.path.join(folder, f"out{shard}.npy"), scale(full[shard * rows:(shard + 1) * rows]))
    print(f"shard {shard} of {nshards} done")
    if shard == 3:
        raise ValueError("shard 3 fails on purpose")
''')


def test_run_shards_gathers_each_shard(dask_cluster, tmp_path, rng):
    cluster, _ = dask_cluster
    script = tmp_path / "sharded.py"
    script.write_text(SHARD_SCRIPT)
    full = rng.standard_normal((4 * 128, 64)).astype(np.float32)
    np.save(tmp_path / "input.npy", full)
    report = tmp_path / "shards.json"
    p = nkicc_cli("run", "--shards", "4", "--cluster", cluster.scheduler_address, "--report", str(report),
                  str(script), "{shard}", "{nshards}", str(tmp_path))
    assert p.returncode == 1, p.stderr  # shard 3 failed
    shards = json.loads(report.read_text())["shards"]
    assert [s["status"] for s in shards] == ["ok", "ok", "ok", "failed"]
    assert shards[3]["error"] == "ValueError: shard 3 fails on purpose"
    for s in shards:
        assert s["stdout"] == f"shard {s['shard']} of 4 done\n" and s["kernel_calls"] == 1
        assert s["calls"][0]["estimated_us"] > 0
        np.testing.assert_allclose(np.load(tmp_path / f"out{s['shard']}.npy"),
                                   3 * full[s["shard"] * 128:(s["shard"] + 1) * 128], rtol=1e-6)
    assert "shard 2 of 4 done" in p.stdout and "ValueError: shard 3 fails on purpose" in p.stdout




def test_run_shards_passes_undefined_to_every_shard(dask_cluster, tmp_path, monkeypatch):
    """`nkicc run --shards N --undefined poison`: each shard's kernel returns NaN where nothing
    wrote instead of failing with E173 (without the flag every shard fails)."""
    monkeypatch.delenv("NKICC_UNDEFINED", raising=False)
    cluster, _ = dask_cluster
    from tests.simulator.test_undefined import SCRIPT
    script = tmp_path / "half.py"
    script.write_text(SCRIPT)
    for flags, status in ((["--undefined", "poison"], "ok"), ([], "failed")):
        report = tmp_path / "shards.json"
        p = nkicc_cli("run", "--shards", "2", "--cluster", cluster.scheduler_address, *flags, "--report",
                      str(report), str(script))
        shards = json.loads(report.read_text())["shards"]
        assert [s["status"] for s in shards] == [status] * 2, p.stderr
        if status == "ok":
            assert all(s["stdout"] == "nan 4096 same True\n" for s in shards)
        else:
            assert all("E173" in s["error"] for s in shards)

# Last: these two kill workers, and on a loaded machine their restart can take a while.
def test_worker_sigkilled_mid_task_from_outside_loses_no_row(dask_cluster, tmp_path):
    """The first variant's trace holds (MODE "hold-first") and says which worker runs it; that
    worker is SIGKILLed while the task is certainly running, and the task is tried again."""
    cluster, client = dask_cluster
    client.wait_for_workers(2, timeout=120)
    workers = set(client.run(os.getpid).values())
    started = Announcements(tmp_path / "started")
    found = {}

    def sweep():
        found["result"] = nkicc.tune(SCALE, {"T": [32, 64, 128]}, consts={"MODE": "hold-first",
                                                                          "STARTED": str(started.path)},
                                     cluster=cluster.scheduler_address, cache=False)

    thread = threading.Thread(target=sweep)
    thread.start()
    try:
        [line] = started.wait(1)
        victim = int(line.split()[1])  # the held trace's parent: the worker running the task
        assert victim in workers, (line, workers)
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=EXIT_BOUND_S)
    finally:
        started.close()
    assert not thread.is_alive()
    result = found["result"]
    assert sorted(r.values["T"] for r in result) == [32, 64, 128]  # no row lost
    for r in result:  # the killed task was tried again on a live worker
        assert r.status == "ok", r.error
        assert r.estimated_us == alone(r.values["T"], "trn2")


def test_a_variant_that_kills_its_worker_is_one_failed_row(dask_cluster):
    cluster, client = dask_cluster
    result = nkicc.tune(SCALE, {"MODE": ["ok", "kill", "ok-too"]}, cluster=cluster.scheduler_address, cache=False)
    rows = {r.values["MODE"]: r for r in result}
    assert len(rows) == 3
    assert rows["ok"].status == "ok" and rows["ok-too"].status == "ok"
    assert rows["ok"].estimated_us == rows["ok-too"].estimated_us == alone(128, "trn2")
    killed = rows["kill"]
    assert killed.status == "failed" and one_line(killed.error) and killed.error.startswith("error[E212]")
