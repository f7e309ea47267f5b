"""A real redis-server of a test's own, for the shared cache tier (tests/cache/test_remote_cache.py)."""
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest

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
        self.proc = subprocess.Popen(
            [REDIS_SERVER, *ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--logfile", str(folder / "redis.log"), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"{'redis' if tls is None else 'rediss'}://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:  # ready when it accepts a connection
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (folder / "redis.log").read_text() if (folder / "redis.log").exists() else ""
                    raise RuntimeError(f"redis-server did not start: {log[-2000:]}")
                time.sleep(0.02)

    def client(self, **kw):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test left it stopped
            self.proc.kill()
        self.proc.wait(timeout=10)
