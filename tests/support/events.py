"""Waiting on what another process does, without guessing how long it takes.

A test that needs a child to reach some point (a kernel started, a server
ready) reads a line the child writes at that point, on a FIFO the test made;
a test that needs a process gone waits on its pidfd. Neither polls: the
kernel wakes the test when the event happens. The bounds below only turn a
hang into a failure, they never decide a result."""
import os
import pathlib
import select

FAILURE_BOUND_S = 300.0  # a child that has not spoken by then is stuck, however loaded the machine


class Announcements:
    """A FIFO children announce themselves on, one line each (tests/driver/tune_kernels.py
    writes "PID PARENT_PID"). The test keeps it open for reading and writing, so a writer never blocks
    and the reader never sees end-of-file between two writers."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        os.mkfifo(path)
        self._fd = os.open(path, os.O_RDWR)
        self._buffer = b""

    def wait(self, n: int, bound_s: float = FAILURE_BOUND_S) -> list[str]:
        """The next `n` lines, as soon as they are written."""
        lines: list[str] = []
        while len(lines) < n:
            while b"\n" not in self._buffer:
                readable, _, _ = select.select([self._fd], [], [], bound_s)
                assert readable, f"no announcement on {self.path} within {bound_s} s (got {lines})"
                self._buffer += os.read(self._fd, 4096)
            line, self._buffer = self._buffer.split(b"\n", 1)
            lines.append(line.decode())
        return lines

    def close(self) -> None:
        os.close(self._fd)


def wait_gone(pid: int, bound_s: float = FAILURE_BOUND_S) -> None:
    """Return once process `pid` (not necessarily our child) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        readable, _, _ = select.select([fd], [], [], bound_s)
        assert readable, f"process {pid} still running after {bound_s} s"
    finally:
        os.close(fd)
