"""Installing a package for a test without touching the environment that runs the tests."""
import pathlib
import shutil
import subprocess
import sys

import pytest


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
        pytest.fail(f"installing {package.name} into {target} failed: {r.stderr}")
    return target
