"""`nkicc run --shards N SCRIPT [ARGS]` / `nkicc.shards.run_shards()`: N copies
of an NKI script, one per shard, as tasks on a Dask cluster (the same machinery
as `nkicc tune`), their outputs and kernel records gathered per shard.

How a shard learns which one it is: every copy runs with the environment
variables SHARD and NSHARDS (what the user's compute_einsum reads) and
NKICC_SHARD and NKICC_NSHARDS (the same values, under names no other tool
uses), and `{shard}` / `{nshards}` in the script's arguments are replaced by
them, for scripts that read their shard from argv:

    nkicc run --shards 4 seed_einsum_affine_driver.py            # reads $SHARD / $NSHARDS
    nkicc run --shards 4 my_script.py {shard} {nshards}          # reads sys.argv[1:3]

Each shard is `nkicc run SCRIPT ARGS` in a process of its own (nkicc.child),
started in the caller's current folder, so relative paths in the arguments
mean what they mean here. With `cluster=`, the script must be at the same
path on the workers' machines.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .child import run_nkicc
from .cluster import Counts, connect, default_workers, run_tasks
from .ir import NkiccError
from .task_progress import progress_bar


@dataclass(frozen=True)
class ShardTask:
    shard: int
    nshards: int
    args: tuple[str, ...]
    cwd: str | None
    timeout: float | None


@dataclass
class ShardResult:
    """One shard: status "ok", "failed" (error: one line), "timeout" or "not run";
    its captured output; and the kernels it ran (count, compile seconds, and the
    simulator's estimated time summed over its calls)."""
    shard: int
    status: str = "ok"
    returncode: int | None = None
    wall_s: float | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    kernel_calls: int = 0
    compile_s: float = 0.0
    estimated_us: float = 0.0
    calls: list = field(default_factory=list)
    worker: str | None = None


@dataclass
class ShardsResult:
    script: str
    shards: list[ShardResult]
    wall_s: float
    workers: int
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(s.status == "ok" for s in self.shards)

    def to_dict(self) -> dict:
        return {"script": self.script, "wall_s": round(self.wall_s, 3), "workers": self.workers,
                "interrupted": self.interrupted, "shards": [dataclasses.asdict(s) for s in self.shards]}


def run_shards(script: str, nshards: int, args: Sequence[str] = (), *, timing: bool = True,
               workers: int | None = None, cluster: str | None = None, timeout: float | None = None,
               progress: bool | Callable[[Counts], None] | None = None,
               undefined: str | None = None) -> ShardsResult:
    """Run `script` once per shard 0..nshards-1 on a Dask cluster (a local one of
    `workers` processes, or the scheduler at `cluster`); `timeout` is per shard;
    progress: True for a live progress bar, or a function given the counts;
    undefined: `nkicc run --undefined` for every shard (None: each shard's NKICC_UNDEFINED)."""
    t0 = time.perf_counter()
    if not os.path.isfile(script):
        raise NkiccError("E200", f"no such script: {script}", None, "give the path to a .py file")
    if nshards < 1:
        raise NkiccError("E201", f"--shards {nshards}", None, "give at least 1 shard")
    path = os.path.abspath(script)
    cwd = os.getcwd()
    tasks = []
    for i in range(nshards):
        shard_args = [a.replace("{shard}", str(i)).replace("{nshards}", str(nshards)) for a in args]
        run_args = ("run", "--timing", "on" if timing else "off",
                    *(("--undefined", undefined) if undefined else ()), path, *shard_args)
        tasks.append(ShardTask(i, nshards, run_args, cwd, timeout))
    keys = [f"nkicc-shard-{os.path.basename(script)}-{i}-{os.urandom(4).hex()}" for i in range(nshards)]
    n_workers = workers or (None if cluster else min(default_workers(), nshards))
    with progress_bar(progress, nshards, "shards") as on_progress, connect(n_workers, cluster) as client:
        n_workers = len(client.nthreads())
        outcomes, interrupted = run_tasks(client, run_shard, tasks, keys, failed=lambda r: r.status != "ok",
                                          on_progress=on_progress)
    results = []
    for task, outcome in zip(tasks, outcomes):
        if outcome.state == "done":
            result = outcome.value
            result.worker = outcome.worker
        else:
            result = ShardResult(task.shard, outcome.state, error=outcome.error, worker=outcome.worker)
        results.append(result)
    return ShardsResult(script, results, time.perf_counter() - t0, n_workers, interrupted)


def run_shard(task: ShardTask) -> ShardResult:
    """(On a worker.) One shard: `nkicc run --report R SCRIPT ARGS` in a child process."""
    env = {"SHARD": str(task.shard), "NSHARDS": str(task.nshards),
           "NKICC_SHARD": str(task.shard), "NKICC_NSHARDS": str(task.nshards)}
    with tempfile.TemporaryDirectory(prefix="nkicc-shard-") as folder:
        report = os.path.join(folder, "calls.json")
        command, rest = task.args[0], list(task.args[1:])
        child = run_nkicc([command, "--report", report, *rest], env=env, timeout=task.timeout, cwd=task.cwd)
        try:
            with open(report) as f:
                records = json.load(f)
        except (OSError, ValueError):
            records = []
    calls = [{"kernel": r.get("kernel"), "compiled_now": r.get("compiled_now"),
              "compile_s": round(r.get("compile_s") or 0.0, 6), "run_s": round(r.get("run_s") or 0.0, 6),
              "estimated_us": round(((r.get("report") or {}).get("sim") or {}).get("total_ns", 0.0) / 1000, 3)}
             for r in records]
    status = "ok" if child.ok else ("timeout" if child.timed_out else "failed")
    return ShardResult(task.shard, status, child.returncode, round(child.seconds, 3), child.stdout, child.stderr,
                       child.error_line(), len(calls), round(sum(c["compile_s"] for c in calls), 6),
                       round(sum(c["estimated_us"] for c in calls), 3), calls)
