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


def pytest_unconfigure(config):
    shutil.rmtree(_TEST_CACHE, ignore_errors=True)


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
