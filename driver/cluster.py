"""Where nkicc fans out: a Dask distributed cluster, and the loop that runs a
list of tasks on it.

`connect()` gives a Client: to an embedded LocalCluster of worker processes
(one thread each, as many as the machine has cores unless told), or to an
existing scheduler (`--cluster tcp://HOST:PORT`). `run_tasks()` submits one
task per item and waits for all of them, counting done / failed / running for
a progress display; every item ends as exactly one Outcome, whatever happened
to it (a task that raised, a worker that died under it twice, Ctrl-C).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from .ir import NkiccError

# A task whose worker dies is run once more elsewhere (the death may have been
# a neighbour's fault, or a kill from outside); a second death fails its row.
ALLOWED_FAILURES = 1
CONNECT_TIMEOUT_S = 10
WAIT_FOR_WORKERS_S = 30
POLL_S = 0.2


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def connect(workers: int | None = None, address: str | None = None) -> Iterator:
    """A dask.distributed Client: to `address` when given, else to a LocalCluster
    of `workers` processes started here and closed on exit."""
    import dask
    from distributed import Client, LocalCluster

    if address and workers:
        raise NkiccError("E201", "--workers and --cluster both given", None,
                         "--workers sizes a local cluster; an existing cluster has its own workers")
    if address:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise NkiccError("E210", f"cannot reach the Dask scheduler at {address}: {_one_line(exc)}", None,
                             "start one with `dask scheduler` and workers with `dask worker ADDRESS`, "
                             "or drop --cluster to run on local worker processes") from None
        try:
            try:
                client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
            except TimeoutError:
                raise NkiccError("E210", f"the Dask scheduler at {address} has no workers", None,
                                 "start some with `dask worker ADDRESS`") from None
            yield client
        finally:
            client.close()
        return
    n = workers or default_workers()
    if n < 1:
        raise NkiccError("E201", f"--workers {n}", None, "give at least 1 worker")
    settings = {"distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                # a worker takes one task at a time, so "processing" on the scheduler is "running"
                "distributed.scheduler.worker-saturation": 1.0}
    with dask.config.set(settings):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.CRITICAL)
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@dataclass
class Outcome:
    """How one task ended: `value` is what it returned; otherwise `error` says why
    not in one line and `state` is "failed" or "not run"."""
    value: object = None
    error: str | None = None
    state: str = "done"
    worker: str | None = None


@dataclass
class Counts:
    total: int
    done: int = 0
    failed: int = 0
    running: int = 0


def run_tasks(client, fn: Callable, items: list, keys: list[str], failed: Callable[[object], bool] = lambda v: False,
              on_progress: Callable[[Counts], None] | None = None) -> tuple[list[Outcome], bool]:
    """Run `fn(item)` for every item on the cluster. Returns one Outcome per item,
    in order, and whether Ctrl-C stopped the run (unfinished items are then
    "not run"). `failed(value)` tells a returned value that reports a failure.

    Items are handed to the scheduler only as worker threads free up: a task
    waiting in a worker's own queue would be blamed (and eventually failed) when
    that worker dies under another task, and Ctrl-C has fewer tasks to cancel."""
    futures: list = [None] * len(items)
    where: dict = {}
    outcomes: list[Outcome | None] = [None] * len(items)
    counts = Counts(len(items))
    workers: dict[int, str] = {}
    submitted = 0
    finished = threading.Event()
    try:
        while counts.done + counts.failed < counts.total:
            finished.clear()  # before looking, so a task that finishes from here on is not missed
            for i in range(submitted):
                if outcomes[i] is not None or futures[i].status == "pending":
                    continue
                outcomes[i] = _outcome(futures[i], workers.get(i))
                if outcomes[i].state == "done" and not failed(outcomes[i].value):
                    counts.done += 1
                else:
                    counts.failed += 1
            in_flight = submitted - counts.done - counts.failed
            free = max(1, _threads(client)) - in_flight
            while free > 0 and submitted < len(items):
                futures[submitted] = client.submit(fn, items[submitted], key=keys[submitted], pure=False)
                futures[submitted].add_done_callback(lambda _: finished.set())
                where[futures[submitted].key] = submitted
                submitted, free = submitted + 1, free - 1
            counts.running = 0
            for worker, keys_there in _processing(client).items():
                for key in keys_there:
                    if key in where and outcomes[where[key]] is None:
                        counts.running += 1
                        workers[where[key]] = worker
            if on_progress:
                on_progress(counts)
            if counts.done + counts.failed < counts.total:
                finished.wait(POLL_S)  # a finished task wakes the loop: a free worker gets its next task at once
    except KeyboardInterrupt:
        left = [futures[i] for i in range(submitted) if outcomes[i] is None]
        with contextlib.suppress(Exception):
            client.cancel(left, force=True)
        for i in range(len(outcomes)):
            if outcomes[i] is None:
                outcomes[i] = Outcome(None, "not run: the run was stopped (Ctrl-C)", "not run")
        return outcomes, True
    return outcomes, False


def _threads(client) -> int:
    try:
        return sum(client.nthreads().values())
    except Exception:  # noqa: BLE001  a busy scheduler: hand out one more task at a time
        return 1


def _processing(client) -> dict[str, list[str]]:
    try:
        return client.processing()
    except Exception:  # noqa: BLE001  the count is for display only; a busy scheduler may not answer
        return {}


def _outcome(future, worker: str | None) -> Outcome:
    from distributed import KilledWorker

    if future.status == "finished":
        return Outcome(future.result(), worker=worker)
    if future.status == "cancelled":
        return Outcome(None, "error[E212] the task was cancelled by the scheduler (its workers or the "
                             "scheduler went away)", "failed", worker)
    exc = future.exception()
    if isinstance(exc, KilledWorker):
        last = getattr(exc.last_worker, "address", "?")
        return Outcome(None, f"error[E212] the worker running this task died, on each of {exc.allowed_failures + 1} "
                             f"tries (last {last}: killed, out of memory, or crashed; see its log)", "failed", last)
    return Outcome(None, f"internal error in nkicc: {type(exc).__name__}: {_one_line(exc)}", "failed", worker)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
