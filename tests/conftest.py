import os
import pathlib
import shutil
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


def pytest_unconfigure(config):
    shutil.rmtree(_TEST_CACHE, ignore_errors=True)


@pytest.fixture
def rng():
    return np.random.default_rng(int(os.environ.get("NKICC_TEST_SEED", "1234")))
