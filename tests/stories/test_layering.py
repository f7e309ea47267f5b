"""The layering of docs/architecture.md, on the package as it installs.

grimp (under import-linter) reads nkicc where Python finds it; an editable
install maps only driver/ there, so these tests lay the source folders out
as pyproject.toml installs them (no build, no copy of anything else) and
read that. `.ci/run` runs `lint-imports` on the real install as well.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory) -> pathlib.Path:
    """A folder holding package nkicc exactly as pyproject.toml's package-dir installs it."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    root = tmp_path_factory.mktemp("installed")
    for package in config["packages"]:
        source = REPO / config["package-dir"][package]
        target = root.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for f in source.glob("*.py"):
            shutil.copy2(f, target / f.name)
    return root


def _run(root: pathlib.Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_contracts_hold(laid_out):
    lint = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).with_name("lint-imports"))
    r = _run(laid_out, lint, "--config", str(REPO / "pyproject.toml"), "--no-cache")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


CYCLES = textwrap.dedent("""
    import grimp
    graph = grimp.build_graph("nkicc", cache_dir=None)
    assert "nkicc.language.tensor" in graph.modules and "nkicc.ir.nodes" in graph.modules, sorted(graph.modules)
    for m in sorted(graph.modules):
        # what m imports, directly or not, that imports m back: m's import circle
        circle = graph.find_upstream_modules(m) & graph.find_downstream_modules(m)
        if circle:
            print(m, "<->", ", ".join(sorted(circle)))
""")


def test_no_module_imports_itself_back(laid_out):
    """No import circle between nkicc's modules, function-local imports included
    (a circle is one module: each of its modules needs the others first)."""
    r = _run(laid_out, sys.executable, "-c", CYCLES)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout == "", "import circles:\n" + r.stdout
