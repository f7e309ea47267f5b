"""NKI scripts run unchanged with `nkicc run` (tests/driver/nki_scripts/: `import nki`,
numpy checks inside, a nonzero exit on a mismatch), and how `nkicc run`
treats a script: __main__ blocks, sibling imports, argparse, exit codes, the
user's own traceback, relative paths."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from tests.support.cli import run_cli

SCRIPTS = pathlib.Path(__file__).resolve().parent / "nki_scripts"
RUNS = {
    "tensor_add": ["--rows", "256", "--cols", "1100", "--dtype", "float32", "--dtype", "bfloat16"],
    "transpose2d": [],
    "avgpool": [],
    "matmul_tutorial": [],
    "mamba": [],
}


def _start(script: str, args, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nkicc", "run", script, *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def script_runs():
    """Every script started at once (they are independent), collected as they finish."""
    procs = {name: _start(str(SCRIPTS / f"{name}.py"), args, SCRIPTS.parent)
             for name, args in RUNS.items()}
    return {name: (p, *p.communicate(timeout=300)) for name, p in procs.items()}


@pytest.mark.parametrize("name", list(RUNS))
def test_nki_script(script_runs, name):
    proc, out, err = script_runs[name]
    assert proc.returncode == 0, out + err
    lines = [x for x in out.splitlines() if x.strip()]
    assert lines and all(": ok" in x for x in lines), out


def test_scripts_use_only_the_nki_names():
    for path in SCRIPTS.glob("*.py"):
        text = path.read_text()
        assert "nkicc" not in text.replace("nkicc run", ""), path
        if not path.name.startswith("_"):
            assert "import nki.language as nl" in text and "import nki.isa as nisa" in text, path


EDGE = textwrap.dedent('''
    import argparse
    import os
    import sys

    import numpy as np
    import nki
    import nki.language as nl
    import nki.typing as nt
    from helper import boom, DATA_FILE


    @nki.jit
    def double(a: nt.tensor[[128, 4], nl.float32]):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), 2.0))
        return out


    def main():
        p = argparse.ArgumentParser(description="edge cases of nkicc run")
        p.add_argument("mode")
        args = p.parse_args()
        if args.mode == "data_exit0":
            here = os.path.dirname(os.path.abspath(__file__))
            print(open(os.path.join(here, DATA_FILE)).read().strip(), __name__)
            sys.exit(0)
        if args.mode == "exitmsg":
            sys.exit("giving up: " + os.path.basename(sys.argv[0]))
        if args.mode == "raise":
            boom(3)
        if args.mode == "kernel_error":
            double(np.ones((256, 4), np.float32))   # 256 partitions
        if args.mode == "mismatch":
            got = double(np.ones((128, 4), np.float32))
            if not np.allclose(got, 3.0):
                print("mismatch")
                sys.exit(1)
        print("fell through")


    if __name__ == "__main__":
        main()
''')
HELPER = textwrap.dedent('''
    DATA_FILE = "data.txt"


    def boom(x):
        raise ValueError(f"bad value {x}")
''')


@pytest.fixture(scope="module")
def edge_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("edge")
    (root / "sub").mkdir()
    (root / "sub" / "edge.py").write_text(EDGE)
    (root / "sub" / "helper.py").write_text(HELPER)
    (root / "sub" / "data.txt").write_text("payload\n")
    modes = ["data_exit0", "exitmsg", "raise", "kernel_error", "mismatch", "--help"]
    # run from the folder above the script, with a relative path
    procs = {m: _start(os.path.join("sub", "edge.py"), [m], root) for m in modes}
    return {m: (p, *p.communicate(timeout=120)) for m, p in procs.items()}


def test_run_exit_codes_pass_through(edge_runs):
    p, out, err = edge_runs["data_exit0"]
    assert p.returncode == 0, err
    assert "fell through" not in out
    p, out, err = edge_runs["exitmsg"]
    assert p.returncode == 1 and "giving up: edge.py" in err
    p, out, err = edge_runs["--help"]
    assert p.returncode == 0 and "edge cases of nkicc run" in out
    p, out, err = edge_runs["mismatch"]
    assert p.returncode == 1 and "mismatch" in out


def test_run_user_exception_shows_the_scripts_traceback(edge_runs):
    p, out, err = edge_runs["raise"]
    assert p.returncode == 1, err
    assert err.startswith("Traceback (most recent call last):"), err
    assert 'edge.py", line' in err and 'helper.py", line' in err and "ValueError: bad value 3" in err
    assert "nkicc" not in err and "runpy" not in err and "internal error" not in err


def test_run_kernel_error_is_one_line(edge_runs):
    p, out, err = edge_runs["kernel_error"]
    assert p.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[E") and "edge.py:" in lines[0], err


def test_run_relative_paths_and_sibling_data(edge_runs):
    p, out, err = edge_runs["data_exit0"]
    assert p.returncode == 0, err
    assert out.split() == ["payload", "__main__"]


def test_run_timing_off_and_report(tmp_path):
    """`nkicc run --timing off --report F script args`: the options before the
    script are nkicc's, the rest the script's; one record per kernel call."""
    report = tmp_path / "calls.json"
    r = run_cli("run", "--timing", "off", "--report", str(report),
                str(SCRIPTS / "tensor_add.py"), "--rows", "256", "--cols", "1100", "--dtype", "float32")
    assert r.returncode == 0, r.stdout + r.stderr
    import json
    calls = json.loads(report.read_text())
    assert calls and all(c["kernel"].startswith("tensor_add") for c in calls)
    assert calls[0]["compiled_now"] and calls[0]["compile_s"] > 0 and calls[0]["run_s"] > 0
    sims = [c["report"]["sim"] for c in calls if "sim" in c["report"]]
    assert sims and all(s["timing"] is False and s["total_ns"] is None for s in sims)
    bad = run_cli("run", "--timing", "maybe", str(SCRIPTS / "tensor_add.py"))
    assert bad.returncode == 1 and bad.stderr.startswith("error[E201]"), bad.stderr
    nowhere = run_cli("run", "--report", str(tmp_path / "no" / "r.json"),
                      str(SCRIPTS / "tensor_add.py"), "--rows", "256", "--cols", "1100", "--dtype", "float32")
    assert nowhere.returncode == 1 and nowhere.stderr.strip().startswith("error[E205]"), nowhere.stderr
    assert len(nowhere.stderr.strip().splitlines()) == 1, nowhere.stderr
