"""The command line as a user meets it: exit codes, one-line errors, reports."""
import json
import subprocess
import sys
import textwrap

import numpy as np

import pytest

from tests.support.events import FAILURE_BOUND_S
from tests.support.paths import REPO
from tests.support.cli import run_cli


nkicc = run_cli


KERNEL = textwrap.dedent('''
    import nkicc
    import nkicc.language as nl

    @nkicc.jit
    def scale(a: "float32[256,64]", factor=2.0):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t, factor))
        return out

    @nkicc.jit
    def broken(a: "float32[256,64]"):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a[0:256, :])
        nl.store(out, value=t)
        return out

    @nkicc.jit
    def pyerror(a: "float32[256,64]"):
        x = {}["missing"]
        return a
''')


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    return path


def test_compile_prints_summary_and_report(kernel_file, tmp_path):
    report = tmp_path / "r.json"
    r = nkicc("compile", f"{kernel_file}::scale", "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert "rolled" in r.stdout
    data = json.loads(report.read_text())
    for key in ("kernel", "trace_s", "compile_s", "total_s", "peak_rss_mb", "instructions_rolled",
                "instructions_unrolled", "instructions_executed", "loops"):
        assert key in data
    assert data["loops"]["rolled"] == 1
    assert data["instructions_unrolled"] == 2 * data["instructions_rolled"]


def test_compile_args_and_consts_override_defaults(kernel_file, tmp_path):
    report = tmp_path / "r.json"
    r = nkicc("compile", f"{kernel_file}::scale", "--arg", "a=float32[512,32]", "--const", "factor=3.5",
              "--print-ir", "--report", str(report), "--disable-pass", "multi-buffer")
    assert r.returncode == 0, r.stderr
    assert "for i0 in static[0, 4)" in r.stdout
    assert "3.5" in r.stdout
    assert json.loads(report.read_text())["args"] == {"a": "float32[512,32]"}


def test_user_error_is_one_line_with_code_and_kernel_line(kernel_file):
    r = nkicc("compile", f"{kernel_file}::broken")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    line_no = KERNEL.splitlines().index("    t = nl.load(a[0:256, :])") + 1
    assert lines[0].startswith("error[E110]")
    assert f"{kernel_file}:{line_no}:" in lines[0]
    assert "Traceback" not in r.stderr


def test_python_error_in_kernel_points_at_user_line(kernel_file):
    r = nkicc("compile", f"{kernel_file}::pyerror")
    assert r.returncode == 1
    line_no = KERNEL.splitlines().index('    x = {}["missing"]') + 1
    assert r.stderr.startswith("error[E001]")
    assert f"k.py:{line_no}:" in r.stderr and "KeyError" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("target,code", [
    ("nope.py::k", "E200"),
    ("{k}::scal", "E200"),
    ("{k}", "E200"),
])
def test_bad_targets(kernel_file, target, code):
    r = nkicc("compile", target.format(k=kernel_file))
    assert r.returncode == 1
    assert r.stderr.startswith(f"error[{code}]")
    if "scal" in target and "::" in target:
        assert "did you mean scale" in r.stderr


def test_bad_arg_spec(kernel_file):
    r = nkicc("compile", f"{kernel_file}::scale", "--arg", "a=float32[12,x]")
    assert r.returncode == 1 and r.stderr.startswith("error[E201]")
    r = nkicc("compile", f"{kernel_file}::scale", "--arg", "zz=float32[4,4]")
    assert r.returncode == 1 and "no parameter 'zz'" in r.stderr


def test_usage_error_exit_code():
    r = nkicc("compile")
    assert r.returncode == 2


def test_simulate_prints_stats(kernel_file, tmp_path):
    out = tmp_path / "o.npz"
    r = nkicc("simulate", f"{kernel_file}::scale", "--inputs", "random", "--seed", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "float32[256, 64]" in r.stdout and "nan 0" in r.stdout
    import numpy as np
    expected = np.random.default_rng(3).standard_normal((256, 64), dtype=np.float32) * 2.0
    got = np.load(out)
    np.testing.assert_allclose(got[got.files[0]], expected, rtol=1e-6)


def test_simulate_from_npz(kernel_file, tmp_path):
    import numpy as np
    a = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    np.savez(tmp_path / "in.npz", a=a)
    out = tmp_path / "o.npz"
    r = nkicc("simulate", f"{kernel_file}::scale", "--inputs", str(tmp_path / "in.npz"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    got = np.load(out)
    np.testing.assert_allclose(got[got.files[0]], a * 2.0, rtol=1e-6)


NKI_SCRIPT = textwrap.dedent('''
    import argparse
    import sys

    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl
    from sibling import rows

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            ta = nl.load(a[i * 128:(i + 1) * 128, :])
            tb = nl.load(b[i * 128:(i + 1) * 128, :])
            t = nl.ndarray(ta.shape, dtype=ta.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=t, data1=ta, data2=tb, op=nl.add)
            nl.store(out[i * 128:(i + 1) * 128, :], value=t)
        return out

    if __name__ == "__main__":
        p = argparse.ArgumentParser()
        p.add_argument("--tiles", type=int, default=1)
        args = p.parse_args()
        rng = np.random.default_rng(0)
        a = rng.standard_normal((rows(args.tiles), 32)).astype(np.float32)
        b = rng.standard_normal(a.shape).astype(np.float32)
        c = nki.simulate(add)(a, b)
        print("err", float(np.abs(c - (a + b)).max()), c.shape)
        sys.exit(7)
''')


def test_run_unmodified_nki_script(tmp_path):
    (tmp_path / "script.py").write_text(NKI_SCRIPT)
    (tmp_path / "sibling.py").write_text("def rows(n):\n    return 128 * n\n")
    r = run_cli("run", "script.py", "--tiles", "3", cwd=tmp_path)
    assert r.returncode == 7, r.stderr
    assert "err 0.0 (384, 32)" in r.stdout


def test_run_never_shadows_a_real_nki(tmp_path):
    real = tmp_path / "site" / "nki"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    (tmp_path / "s.py").write_text("import nki\nprint('real' if getattr(nki, 'REAL', False) else 'alias')\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path / "site")}
    r = run_cli("run", "s.py", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "real"


def test_help_texts():
    r = nkicc("--help")
    assert r.returncode == 0
    for cmd in ("compile", "simulate", "run"):
        assert cmd in r.stdout
    r = nkicc("compile", "--help")
    assert "--arg" in r.stdout and "DTYPE" in r.stdout


@pytest.mark.parametrize("args", [
    ["compile", "{k}", "--report", "{bad}"],
    ["compile", "{k}", "--emit", "ir", "-o", "{bad}"],
    ["simulate", "{k}", "--sim-json", "{bad}"],
    ["simulate", "{k}", "-o", "{bad}"],
    ["simulate", "{k}", "--trace", "{bad}"],
], ids=["compile-report", "compile-output", "simulate-sim-json", "simulate-output", "simulate-trace"])
def test_unwritable_output_is_one_line(kernel_file, tmp_path, args):
    bad = str(tmp_path / "no-such-folder" / "out")
    r = nkicc(*[a.format(k=f"{kernel_file}::scale", bad=bad) for a in args])
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[E205]") and bad in lines[0], r.stderr


def test_simulate_output_keeps_numpys_npz_name(kernel_file, tmp_path):
    r = nkicc("simulate", f"{kernel_file}::scale", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "out.npz") as saved:
        assert list(saved.keys())


def test_compile_counts_what_the_simulator_executes():
    """The summary's counts are of the program as traced; passes fuse (psum-legalize folds the
    copy-in / copy-out around each matmul) and add instructions, and `nkicc simulate` counts the
    compiled program's. The summary says both, and its second agrees with the simulator's."""
    from nkicc.api import compile as compile_kernel  # (this module's `nkicc` runs the command line)
    from nkicc.loader import load_kernel
    from nkicc.report import summary_lines

    kernel = load_kernel(f"{REPO / 'examples' / 'fused_matmul.py'}::mm2")
    c = compile_kernel(kernel, "float32[256,1160]", "float32[256,1024]", "float32[1024,256]")  # its defaults
    rng = np.random.default_rng(1)
    inputs = {n: rng.standard_normal(tuple(c.ir.tensor(n).shape), dtype=np.float32) for n in c.ir.args}
    _, sim = c.simulate(inputs, timing=False)
    r = c.report
    assert r["instructions_compiled_executed"] == sim.executed < r["instructions_executed"]
    line = next(s for s in summary_lines(r) if s.strip().startswith("instructions:"))
    assert (f"{r['instructions_executed']:,} executed as traced, {sim.executed:,} after the passes"
            in line), line


def test_simulation_progress_draws_the_running_count_on_a_terminal():
    """`nkicc simulate` shows, on a terminal, how many instructions the running simulation has
    executed (read from its counter by a thread) and for how long; nothing when the output is not
    a terminal, and nothing for a run shorter than `after`."""
    import io
    import threading
    from types import SimpleNamespace

    from rich.console import Console

    from nkicc.sim_progress import simulation_progress

    class Compiled:
        """What simulation_progress reads. The drawing thread reads `running` once per frame, just
        before the counter: the test waits for that read instead of sleeping while it draws."""
        name = "mm2"
        report = {"instructions_compiled_executed": 1000}

        def __init__(self, sim):
            self._running, self.frame = sim, threading.Event()

        @property
        def running(self):
            self.frame.set()
            return self._running

    sim = SimpleNamespace(executed=0)
    compiled = Compiled(sim)

    def run(console, after, drawn=True):
        """drawn: the thread draws frames (a terminal, after=0); wait for a frame after each count."""
        import sys
        streams = (sys.stdout, sys.stderr)
        with simulation_progress(compiled, console=console, after=after, every=0.01):
            for n in (250, 500, 750):
                sim.executed = n
                compiled.frame.clear()
                if drawn:
                    assert compiled.frame.wait(FAILURE_BOUND_S)  # a frame that reads this count
                assert (sys.stdout, sys.stderr) == streams  # what the run prints stays on its own stream
        return console.file.getvalue()

    term = Console(file=io.StringIO(), force_terminal=True, width=120)
    drawn = run(term, after=0.0)
    assert "simulating mm2" in drawn and "750/1,000 instructions" in drawn, drawn
    compiled._running = None  # a multi-core launch: the time alone, no count
    drawn = run(Console(file=io.StringIO(), force_terminal=True, width=120), after=0.0)
    assert "simulating mm2" in drawn and "instructions" not in drawn, drawn
    compiled._running = sim
    assert run(Console(file=io.StringIO(), force_terminal=True, width=120), after=5.0, drawn=False) == ""
    assert run(Console(file=io.StringIO(), force_terminal=False), after=0.0, drawn=False) == ""
    assert not [t for t in threading.enumerate() if t.name == "nkicc-sim-progress"]


def test_only_the_commands_own_process_freezes_its_imports():
    """`nkicc` (cli.entry) moves what its imports made out of the cyclic collector's reach;
    cli.main, called from someone else's program (or a test), leaves that program's heap alone."""
    code = textwrap.dedent("""
        import gc, sys
        from nkicc.cli import {fn} as run
        sys.argv = ["nkicc", "--version"]
        try:
            run()
        except SystemExit:
            pass
        print(gc.get_freeze_count())
    """)
    counts = {}
    for fn in ("entry", "main"):
        r = subprocess.run([sys.executable, "-c", code.format(fn=fn)], capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 0, r.stderr
        counts[fn] = int(r.stdout.split()[-1])
    assert counts["entry"] > 10_000 and counts["main"] == 0, counts
