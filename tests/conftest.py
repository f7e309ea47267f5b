"""Fixtures and session settings only; the helpers tests import live in tests/support."""
import os
import shutil
import tempfile

import numpy as np
import pytest

from tests.support.redis_server import REDIS_SERVER, RedisProcess

# Tests never touch the user's compile cache: one fresh cache folder for the
# session (subprocesses inherit it); tests/cache/ uses its own folders.
_TEST_CACHE = tempfile.mkdtemp(prefix="nkicc-test-cache-")
os.environ["NKICC_CACHE_DIR"] = _TEST_CACHE

# Nor the user's third-party pass plugins: an opt-in pass the user installed
# would change what -O3 selects, and a broken one every compile. Only nkicc's
# own passes load (subprocesses inherit this); the tests of plugin loading turn
# autoload back on for their own subprocesses (tests/plugins/test_passes.py).
os.environ["NKICC_DISABLE_PLUGIN_AUTOLOAD"] = "1"


def pytest_unconfigure(config):
    shutil.rmtree(_TEST_CACHE, ignore_errors=True)


@pytest.fixture
def trn3(monkeypatch):
    """Compile for NeuronCore-v4 (trn3): for what the reference documents as v4 and newer."""
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")


@pytest.fixture
def rng():
    return np.random.default_rng(int(os.environ.get("NKICC_TEST_SEED", "1234")))


@pytest.fixture
def redis_server(tmp_path):
    """A fresh redis-server for this test (skips when redis-server is not installed)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    server = RedisProcess(tmp_path / "redis")
    yield server
    server.stop()
