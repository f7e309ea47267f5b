"""Kernels for tests/driver/test_tune.py: a small tiled scale whose tile height T is
the swept constant, and a MODE that makes a variant misbehave on purpose
while it is traced: "sleep" (hangs for SLEEP seconds, for --timeout), "slow"
(SLEEP seconds, then compiles), "kill" (SIGKILLs the process that started it:
under `nkicc tune` that is the Dask worker running the variant). Only the
tests ask for those modes."""
import os
import signal
import time

import nkicc
import nkicc.language as nl


def first(path: str) -> bool:  # of all processes; STARTED: the test's FIFO (tests/support/events.py)
    try:
        return os.close(os.open(path + ".held", os.O_CREAT | os.O_EXCL)) is None
    except FileExistsError:
        return False


@nkicc.jit
def scale(a: "float32[256,64]", T=128, MODE="ok", SLEEP=0, STARTED=""):
    if MODE == "hold-first" and first(STARTED):
        MODE, SLEEP = "slow", 600  # held until the test kills its worker
    if MODE in ("sleep", "slow"):
        if STARTED and SLEEP:  # this process and its parent (the worker)
            with open(STARTED, "w") as f:
                f.write(f"{os.getpid()} {os.getppid()}\n")
        time.sleep(SLEEP)
    if MODE == "kill":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // T):
        t = nl.load(a[i * T:(i + 1) * T, :])
        nl.store(out[i * T:(i + 1) * T, :], value=nl.multiply(t, 2.0))
    return out
