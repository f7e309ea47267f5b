import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
WORKLOADS = REPO.parent / "shared" / "workloads"

needs_workloads = pytest.mark.skipif(not WORKLOADS.is_dir(), reason="../shared/workloads is not present")


@pytest.fixture
def rng():
    return np.random.default_rng(int(os.environ.get("NKICC_TEST_SEED", "1234")))
