"""Kernels for tests/driver/test_tune.py: a small tiled scale whose tile height T is
the swept constant, and a MODE that makes a variant misbehave on purpose
while it is traced: "sleep" (hangs for SLEEP seconds, for --timeout), "slow"
(SLEEP seconds, then compiles), "kill" (SIGKILLs the process that started it:
under `nkicc tune` that is the Dask worker running the variant), "hold-first"
(the first trace of the sweep waits until it is killed, the others compile at
once). Only the tests ask for those modes. STARTED names the FIFO a waiting
test reads (tests/support/events.py): a trace that is about to sleep or hold
says so there first, so the test acts on the event, not on a guess of time."""
import os
import signal
import time

import nkicc
import nkicc.language as nl


def announce(fifo: str) -> None:
    """One line on the test's FIFO: this process (the variant's child) and its parent (under
    `nkicc tune`, the Dask worker). No reader (the test is gone): nothing to tell."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()} {os.getppid()}\n")


@nkicc.jit
def scale(a: "float32[256,64]", T=128, MODE="ok", SLEEP=0, STARTED=""):
    if MODE in ("sleep", "slow"):
        if STARTED and SLEEP:
            announce(STARTED)
        time.sleep(SLEEP)
    if MODE == "hold-first":
        try:  # only the first trace of the sweep claims the hold
            os.close(os.open(STARTED + ".held", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            announce(STARTED)
            time.sleep(600)  # until the test kills its worker
    if MODE == "kill":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // T):
        t = nl.load(a[i * T:(i + 1) * T, :])
        nl.store(out[i * T:(i + 1) * T, :], value=nl.multiply(t, 2.0))
    return out
