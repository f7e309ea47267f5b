"""A real redis-server of a test's own, for the shared cache tier (tests/cache/test_remote_cache.py)."""
import os
import pathlib
import select
import shutil
import signal
import socket
import subprocess
import threading

import pytest

from tests.support.events import FAILURE_BOUND_S

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed "
                                                              "(apt-get install redis-server; .ci/run does)")


class RedisProcess:
    """One redis-server of a test's own, on a free loopback port, nothing saved."""

    def __init__(self, folder: pathlib.Path, *args: str, tls: tuple | None = None, port: int | None = None) -> None:
        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        # tls = (cert, key, ca): TLS only, on the port
        ports = ["--port", str(self.port)] if tls is None else [
            "--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(tls[0]), "--tls-key-file",
            str(tls[1]), "--tls-ca-cert-file", str(tls[2]), "--tls-auth-clients", "no"]
        # the log on stdout (--logfile ""): ready when it says so, copied to redis.log from then on
        self.proc = subprocess.Popen(
            [REDIS_SERVER, *ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--logfile", "", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.url = f"{'redis' if tls is None else 'rediss'}://127.0.0.1:{self.port}/0"
        log = self._wait_ready()
        threading.Thread(target=self._keep_log, args=(log,), daemon=True).start()

    def _wait_ready(self) -> bytes:
        """Read the log until redis says it accepts connections (or exits)."""
        fd, log = self.proc.stdout.fileno(), b""
        while b"Ready to accept connections" not in log:
            readable, _, _ = select.select([fd], [], [], FAILURE_BOUND_S)
            chunk = os.read(fd, 65536) if readable else b""
            if not chunk:  # it exited, or said nothing for FAILURE_BOUND_S
                raise RuntimeError(f"redis-server did not start: {log[-2000:].decode(errors='replace')}")
            log += chunk
        return log

    def _keep_log(self, log: bytes) -> None:
        with open(self.folder / "redis.log", "wb") as f:  # and so redis never blocks on a full pipe
            f.write(log)
            for chunk in iter(lambda: os.read(self.proc.stdout.fileno(), 65536), b""):
                f.write(chunk)

    def client(self, **kw):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test left it stopped
            self.proc.kill()
        self.proc.wait(timeout=FAILURE_BOUND_S)
