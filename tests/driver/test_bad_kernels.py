"""The bad-kernel corpus (tests/driver/bad_kernels/, see its README): every invalid
kernel gets its error code at its own file:line, on one stderr line, with exit
code 1 and no traceback from inside nkicc; the valid near misses compile and
run cleanly. Plus: every code nkicc can raise is catalogued and documented,
and internal errors leave a reproducer that replays.

The corpus runs through the command line's own entry point (nkicc.cli.main,
what the `nkicc` script calls) in this process, which is ~50x faster than a
subprocess per kernel; a sample also runs as real subprocesses."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import nkicc
from tests.support.paths import REPO
from tests.support import cli

CORPUS = REPO / "tests" / "driver" / "bad_kernels"
EXPECT = re.compile(r"#\s*EXPECT:\s*([EW]\d{3})((?:\s+(?:simulate|api|kernel=\w+))*)")
NEAR_MISSES = CORPUS / "near_misses.py"


@dataclass(frozen=True)
class Case:
    file: Path
    line: int
    code: str
    mode: str    # compile | simulate | api
    target: str  # the kernel (compile, simulate) or the call_* function (api)

    @property
    def id(self) -> str:
        return f"{self.file.stem}::{self.target}"


def collect() -> list[Case]:
    cases = []
    for path in sorted(CORPUS.glob("*.py")):
        if path == NEAR_MISSES:
            continue
        text = path.read_text()
        funcs = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
        for line, source in enumerate(text.splitlines(), 1):
            m = EXPECT.search(source)
            if not m:
                continue
            words = m.group(2).split()
            owner = next(f for f in funcs if f.lineno <= line <= f.end_lineno)
            target = next((w.split("=", 1)[1] for w in words if w.startswith("kernel=")), owner.name)
            mode = "api" if "api" in words else "simulate" if "simulate" in words else "compile"
            cases.append(Case(path, line, m.group(1), mode, target))
    return cases


CASES = collect()




def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"bad_kernels_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_line(case: Case, code: int, err: str) -> None:
    assert code == 1, f"exit code {code}, stderr:\n{err}"
    assert "Traceback" not in err and "internal error" not in err, err
    # the deprecation warning of nl.dynamic_range (W150) comes with any error in a kernel that uses it
    lines = [ln for ln in err.strip().splitlines() if "[W150]" not in ln]
    assert len(lines) == 1, f"expected one line:\n{err}"
    assert lines[0].startswith(f"error[{case.code}] {case.file}:{case.line}: "), (lines[0], case)


def test_corpus_is_large_and_covers_every_category():
    assert len(CASES) >= 40, len(CASES)
    codes = {c.code for c in CASES}
    for code in ("E001", "E002", "E101", "E110", "E111", "E120", "E130", "E131", "E132", "E133", "E160",
                 "E170", "E173", "E190"):
        assert code in codes, code
    assert len({c.id for c in CASES}) == len(CASES), "one EXPECT per kernel"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_kernel(case, capsys):
    if case.mode == "api":
        module = load(case.file)
        with pytest.raises(nkicc.NkiccError) as excinfo:
            getattr(module, case.target)()
        err = excinfo.value
        assert err.code == case.code, str(err)
        assert err.loc is not None and Path(err.loc.file) == case.file and err.loc.line == case.line, str(err)
        assert "\n" not in err.one_line()
        return
    code, _, err = cli.run_in_process(capsys, case.mode, f"{case.file}::{case.target}")
    check_line(case, code, err)


@pytest.mark.parametrize("kernel, tensor", [("store_straight_from_psum", "ps"), ("dma_into_psum", "ps"),
                                            ("store_the_accumulator_from_psum", "accum")])
def test_dma_of_a_psum_tile_names_the_tile_as_written(kernel, tensor, capsys):
    """E120 for a DMA that touches PSUM says which tensor, by the kernel's name
    for it and the line that made it, as the other buffer messages do."""
    case = next(c for c in CASES if c.file.name == "buffers.py" and c.target == kernel)
    lines = case.file.read_text().splitlines()
    made = next(n for n in range(case.line, 0, -1) if lines[n - 1].strip().startswith(f"{tensor} = "))
    code, _, err = cli.run_in_process(capsys, "compile", f"{case.file}::{kernel}")
    check_line(case, code, err)
    assert f"DMA cannot access PSUM, where {tensor} (made at line {made}) is" in err, err


SUBPROCESS_SAMPLE = ["bounds::loop_runs_past_end", "runtime_bounds::offset_advanced_too_far",
                     "uninitialised::accumulator_never_zeroed", "python_errors::helper_rejects_shape",
                     "loop_deps::prefix_sum_over_columns"]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in SUBPROCESS_SAMPLE], ids=lambda c: c.id)
def test_bad_kernel_through_a_real_subprocess(case):
    r = cli.run_cli(case.mode, f"{case.file}::{case.target}")
    check_line(case, r.returncode, r.stderr)


def near_misses():
    module = load(NEAR_MISSES)
    return [(name, k) for name, k in vars(module).items() if isinstance(k, nkicc.JitKernel)]


@pytest.mark.parametrize("name,kernel", near_misses(), ids=[n for n, _ in near_misses()])
def test_near_miss_compiles_and_runs(name, kernel, rng):
    from nkicc.specs import annotated_specs
    from nkicc.language.kernel_trace import inspect_unwrap

    specs = annotated_specs(inspect_unwrap(kernel.fn))
    arrays = [rng.standard_normal(s.shape).astype(np.float32) if s.dtype == "float32"
              else np.zeros(s.shape, dtype=np.int32) for s in specs.values()]
    rolled = nkicc.compile(kernel, *arrays).run(*arrays)
    unrolled = nkicc.compile(kernel, *arrays, unroll=True).run(*arrays)
    # the same up to the order of floating-point sums (a rolled loop's accumulation runs batched)
    scale = max(1.0, float(np.nanmax(np.abs(unrolled), initial=0.0)))
    np.testing.assert_allclose(rolled, unrolled, rtol=0, atol=1e-6 * scale, equal_nan=True)


# --- command-line inputs -----------------------------------------------------------------

def test_simulate_with_inputs_of_the_wrong_shape_or_missing(tmp_path, capsys):
    kernel = CORPUS / "near_misses.py"
    line = next(i for i, t in enumerate(kernel.read_text().splitlines(), 1) if "def tiles_of_one_output" in t)
    # the kernel's own line: nothing of the user's calls it on the command line
    np.savez(tmp_path / "bad.npz", a=np.zeros((256, 64), dtype=np.float32))
    code, _, err = cli.run_in_process(capsys, "simulate", f"{kernel}::tiles_of_one_output", "--inputs", str(tmp_path / "bad.npz"))
    assert code == 1 and err.startswith("error[E002]") and "shape [256, 64]" in err, err
    assert f"near_misses.py:{line}:" in err, err
    np.savez(tmp_path / "none.npz", b=np.zeros((512, 64), dtype=np.float32))
    code, _, err = cli.run_in_process(capsys, "simulate", f"{kernel}::tiles_of_one_output", "--inputs", str(tmp_path / "none.npz"))
    assert code == 1 and err.startswith("error[E002]") and "no array for a" in err, err
    assert len(err.strip().splitlines()) == 1


# --- the catalogue ----------------------------------------------------------------------------

SOURCES = [p for d in ("driver", "ir", "language", "simulator", "plugins", "cache")
           for p in (REPO / d).rglob("*.py")]


def test_every_code_raised_is_catalogued_and_documented():
    from nkicc.diagnostics import CODES

    used = set()
    for path in SOURCES:
        used |= set(re.findall(r'["\[]([EW]\d{3})["\]]', path.read_text()))
    used -= {"W000"}  # cached.py's stand-in for a warning that carries no code
    assert not used - set(CODES), f"codes raised but missing from driver/diagnostics.py: {sorted(used - set(CODES))}"
    doc = (REPO / "docs" / "errors.md").read_text()
    missing = [c for c in CODES if f"`{c}`" not in doc]
    assert not missing, f"codes missing from docs/errors.md: {missing}"
    for exit_code in ("0", "1", "2", "3", "4"):
        assert f"| {exit_code} |" in doc


@pytest.mark.parametrize("code", ["E173", "E174", "E190", "E999"])
def test_explain_new_codes(code, capsys):
    rc, out, _ = cli.run_in_process(capsys, "explain", code)
    assert rc == 0 and out.startswith(f"{code}: ")


# --- internal errors ----------------------------------------------------------------------------

CRASH_KERNEL = '''
import nkicc
import nkicc.language as nl

@nkicc.jit
def k(a: "float32[256,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(nl.load(a[i * 128:(i + 1) * 128, :])))
    return out
'''


@pytest.mark.parametrize("command", ["compile", "simulate"])
def test_plugin_crash_reproducer_replays_without_the_kernel_source(tmp_path, command):
    """A crashing test pass (tests/support/broken_plugin.py) under compile or simulate:
    exit 4, a one-line summary, a reproducer that replays to the same error
    even after the kernel's source is gone and from another folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    src = tmp_path / "kern.py"
    src.write_text(CRASH_KERNEL)
    work = tmp_path / "work"
    work.mkdir()
    r = cli.run_cli(command, f"{src}::k", "-p", "tests.support.broken_plugin", "--enable-pass", "crash", cwd=work, env=env)
    assert r.returncode == 4, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("internal error[E999] pass 'crash'") and "Traceback" not in r.stderr
    (repro,) = work.glob("nkicc-repro-*.json")
    data = json.loads(repro.read_text())
    assert "ZeroDivisionError" in data["traceback"] and data["ir"]
    src.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r2 = cli.run_cli("reproduce", str(repro), cwd=elsewhere, env=env)
    assert r2.returncode == 4 and r2.stderr.splitlines()[0] == first


def test_reproduce_rejects_a_file_it_did_not_write(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text('{"format": "something else"}')
    rc, _, err = cli.run_in_process(capsys, "reproduce", str(bad))
    assert rc == 1 and err.startswith("error[E204]") and len(err.strip().splitlines()) == 1
    bad.write_text("not json")
    rc, _, err = cli.run_in_process(capsys, "reproduce", str(bad))
    assert rc == 1 and err.startswith("error[E204]")
