import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
WORKLOADS = REPO.parent / "shared" / "workloads"

needs_workloads = pytest.mark.skipif(not WORKLOADS.is_dir(), reason="../shared/workloads is not present")

# Tests never touch the user's compile cache: one fresh cache folder for the
# session (subprocesses inherit it); tests/test_cache.py uses its own folders.
_TEST_CACHE = tempfile.mkdtemp(prefix="nkicc-test-cache-")
os.environ["NKICC_CACHE_DIR"] = _TEST_CACHE

# Nor the user's third-party pass plugins: an opt-in pass the user installed
# would change what -O3 selects, and a broken one every compile. Only nkicc's
# own passes load (subprocesses inherit this); the tests of plugin loading turn
# autoload back on for their own subprocesses (tests/test_passes.py).
os.environ["NKICC_DISABLE_PLUGIN_AUTOLOAD"] = "1"


def reordered(compiled) -> bool:
    """Whether the last run of a CompiledKernel added some fp32 sums in another order than one
    instruction at a time would (the machine simulator's batched loops: SimReport.reordered_sums)."""
    return bool(compiled.sim is not None and compiled.sim.reordered_sums)


def same_up_to_sums(got, want, sums_reordered: bool, tol: float = 1e-6, err_msg: str = "") -> None:
    """Bit for bit, unless the run reordered fp32 sums: then within `tol` of the largest |want|
    (issue 14 allows 1e-6 relative for reordered sums, and nothing else)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not sums_reordered:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
        return
    scale = float(np.nanmax(np.abs(want), initial=0.0))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale, equal_nan=True, err_msg=err_msg)


def pytest_unconfigure(config):
    shutil.rmtree(_TEST_CACHE, ignore_errors=True)


@pytest.fixture
def trn3(monkeypatch):
    """Compile for NeuronCore-v4 (trn3): for what the reference documents as v4 and newer."""
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")


@pytest.fixture
def rng():
    return np.random.default_rng(int(os.environ.get("NKICC_TEST_SEED", "1234")))


def install_to_target(package: pathlib.Path, tmp_factory) -> pathlib.Path:
    """pip-install `package` into a fresh folder (pip --target), never into the
    environment running the tests; put the folder on PYTHONPATH to use it.
    pip builds from a copy, so the repository gets no build/ or egg-info."""
    src = tmp_factory.mktemp("src") / package.name
    shutil.copytree(package, src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = tmp_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "-q", "install", "--no-deps", "--target", str(target), str(src)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        import pytest
        pytest.fail(f"installing {package.name} into {target} failed: {r.stderr}")
    return target


# --- a real redis-server for the shared cache tier (tests/test_remote_cache.py) -------------------

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed "
                                                              "(apt-get install redis-server; .ci/run does)")


class RedisProcess:
    """One redis-server of a test's own, on a free loopback port, nothing saved."""

    def __init__(self, folder: pathlib.Path, *args: str, tls: tuple | None = None, port: int | None = None) -> None:
        import socket
        import subprocess
        import time

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
        import signal
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test left it stopped
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path):
    """A fresh redis-server for this test (skips when redis-server is not installed)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    server = RedisProcess(tmp_path / "redis")
    yield server
    server.stop()
