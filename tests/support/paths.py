"""Where things are, for tests that read files or start processes: the
repository, its examples and bench scripts, the tests' own folder, and the
user's seed workloads beside the checkout (absent on most machines)."""
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SUPPORT = TESTS / "support"
EXAMPLES = REPO / "examples"
BENCH = REPO / "bench"
WORKLOADS = REPO.parent / "shared" / "workloads"

needs_workloads = pytest.mark.skipif(not WORKLOADS.is_dir(), reason="../shared/workloads is not present")
