"""The entry point of a task's child process (see nkicc.child):
`python -m nkicc.child_main PARENT_PID COMMAND ARGS...` runs `nkicc COMMAND
ARGS...`, and ends when PARENT_PID (the Dask worker that started it) ends."""
from __future__ import annotations

import os
import signal
import sys
import time


def _die_with_parent(parent: int) -> None:
    """Make this process end when `parent` (the worker that started it) ends."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError
    except (OSError, AttributeError):
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)
        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)


def _main() -> None:
    _die_with_parent(int(sys.argv[1]))
    sys.argv = ["nkicc", *sys.argv[2:]]
    from .cli import entry  # after the death signal is armed: importing nkicc takes half a second
    entry()


if __name__ == "__main__":
    _main()
