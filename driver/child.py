"""One nkicc command run as a process of its own by a cluster task.

A Dask worker runs each variant of a sweep (and each shard of `nkicc run
--shards`) as `python -m nkicc.child_main PARENT_PID COMMAND ...`, the same command
a user would type. A process of its own gives what a thread inside the worker
cannot: a timeout that really stops the work (the process group is killed), a
variant that exhausts memory or crashes the interpreter takes only itself down,
and no module state leaks from one variant into the next. The child dies with
the worker that started it (PR_SET_PDEATHSIG on Linux, a watcher thread
elsewhere), so a worker killed mid-task leaves nothing running.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field


@dataclass
class ChildResult:
    """What one child process did: its exit status, output and wall time."""
    command: list[str]
    returncode: int | None     # None when it was killed at the timeout
    stdout: str
    stderr: str
    seconds: float
    timeout_s: float | None = None
    env: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def error_line(self) -> str | None:
        """The failure in one line: nkicc's own one-line error when it printed
        one, else what the exit status says."""
        if self.ok:
            return None
        if self.timed_out:
            return (f"error[E211] timed out after {self.timeout_s:g} s and was stopped "
                    "(raise --timeout, or make the variant smaller)")
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        for ln in lines:
            if ln.startswith(("error[", "internal error[")):
                return ln
        if self.returncode < 0:
            name = signal.Signals(-self.returncode).name if -self.returncode in signal.valid_signals() else "?"
            return (f"error[E212] the process was killed by {name} "
                    "(out of memory, or killed from outside)")
        if any(ln.startswith("internal error in nkicc") for ln in lines):
            return f"internal error in nkicc: {lines[-1]}"
        return lines[-1] if lines else f"exit status {self.returncode}"


def run_nkicc(args: list[str], env: dict | None = None, timeout: float | None = None,
              cwd: str | None = None) -> ChildResult:
    """Run `nkicc ARGS` in a child process (its own process group) and wait for it,
    at most `timeout` seconds."""
    command = [sys.executable, "-m", "nkicc.child_main", str(os.getpid()), *args]
    full_env = {**os.environ, **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
                            cwd=cwd if cwd and os.path.isdir(cwd) else None, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        code = None
    except BaseException:  # the task was interrupted: leave nothing running
        _kill_group(proc.pid)
        proc.wait()
        raise
    return ChildResult(command[4:], code, out, err, time.perf_counter() - t0, timeout, dict(env or {}))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
