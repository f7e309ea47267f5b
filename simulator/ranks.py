"""Multi-rank simulation: one simulator per rank (its own SBUF, PSUM and
timeline), each in a thread, meeting at collectives through one
Communicator. The ranks run the same program; rank_id() and the replica
groups tell them apart."""
from __future__ import annotations

import threading
import time

from ..ir import Kernel, NkiccError
from .comm import Communicator
from .machine import MachineSimulator
from ..ir.numerics import precise_from_env
from .reference import ReferenceMachine

STOP_WAIT_S = 30.0  # how long an interrupted run waits for its parties to stop (at their next loop iteration)


def run_ranks(kernel: Kernel | list[Kernel], inputs_by_rank: list[dict], target=None, simulator: str = "machine",
              timing: bool = True, trace=False, shared_by_rank: list[dict] | None = None,
              precise: bool | None = None, lockstep: bool = False, cores: int = 1,
              batch: bool = True) -> list[tuple[dict, object]]:
    """[(outputs by name, SimReport or None)] per rank. `kernel`: one program
    for every rank, or one per rank (the cores of a multi-core launch). cores:
    the parties are ranks of that many cores each, rank-major (party g is core
    g % cores of rank g // cores: comm.py). batch=False: the machine simulator runs
    one instruction at a time (the oracle of its batched loops).
    shared_by_rank: per rank, HBM tensors by name backed by arrays the ranks
    share (a multi-core launch's common HBM). trace: a path pattern with
    `{rank}` for one Perfetto file per rank. precise: NKI_PRECISE_FP (None
    reads it now), one value for every rank. lockstep: the ranks take turns, one
    top-level statement each (the programs of a launch that race: comm.py)."""
    n = len(inputs_by_rank)
    precise = precise_from_env() if precise is None else bool(precise)
    kernels = kernel if isinstance(kernel, list) else [kernel] * n
    shared_by_rank = shared_by_rank or [None] * n
    comm = Communicator(n, lockstep=lockstep, cores=cores)
    results: list = [None] * n
    errors: list = [None] * n

    def work(rank: int) -> None:
        try:
            if simulator == "machine":
                path = trace.format(rank=rank) if isinstance(trace, str) else trace
                mine = comm.for_rank(rank)
                sim = MachineSimulator(kernels[rank], target, timing=timing, trace=path, comm=mine,
                                       precise=precise, batch=batch)
                try:
                    mine.check()  # (making the plans takes seconds; the run may have stopped meanwhile)
                    results[rank] = sim.run(inputs_by_rank[rank], shared_by_rank[rank])
                finally:
                    sim.close()  # (made for this run: freed now, not by a cyclic collection later)
            else:
                machine = ReferenceMachine(kernels[rank], comm=comm.for_rank(rank), precise=precise)
                results[rank] = (machine.run(inputs_by_rank[rank], shared_by_rank[rank]), None)
        except NkiccError as e:
            errors[rank] = e
            comm.fail(e)
        except BaseException as e:  # a crash in one rank must not leave the others waiting
            errors[rank] = e
            comm.fail(NkiccError("E900", f"rank {rank} stopped: {type(e).__name__}: {e}"))
        finally:
            comm.stop(rank, "finished" if errors[rank] is None else "stopped on an error")
            ended.release()

    ended = threading.Semaphore(0)  # one release per party whose work is over
    threads = [threading.Thread(target=work, args=(r,), name=f"nkicc-rank-{r}", daemon=True) for r in range(n)]
    started = 0
    try:
        for t in threads:
            started += 1  # (before start(): interrupted inside it, the thread may run all the same)
            t.start()
        for t in threads:
            t.join()
    except BaseException:  # the caller's thread stopped (a test's timeout, Ctrl-C): so do the parties
        comm.fail(NkiccError("E900", "the multi-rank run was interrupted"))
        deadline = time.monotonic() + STOP_WAIT_S
        for _ in range(started):
            if not ended.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
        for t in threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        raise
    failed = [e for e in errors if e is not None]
    if failed:
        # the cause, not the ranks that then waited in vain
        causes = [e for e in failed if getattr(e, "code", "") != "E191"] or failed
        first = causes[0]
        if isinstance(first, NkiccError):
            raise first
        raise first
    return results
