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


@nkicc.jit
def scale(a: "float32[256,64]", T=128, MODE="ok", SLEEP=0):
    if MODE in ("sleep", "slow"):
        time.sleep(SLEEP)
    if MODE == "kill":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // T):
        t = nl.load(a[i * T:(i + 1) * T, :])
        nl.store(out[i * T:(i + 1) * T, :], value=nl.multiply(t, 2.0))
    return out
