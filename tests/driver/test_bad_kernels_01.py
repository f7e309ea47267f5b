"""The bad-kernel corpus in NKI 0.1 (tests/driver/bad_kernels_01/, see its README):
every invalid 0.1 kernel gets its error code at its own file:line, on one stderr
line, with exit code 1 and no traceback; the valid near misses compile and run,
rolled as unrolled. The same contract as tests/driver/test_bad_kernels.py, whose
runner this reuses."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import nkicc
from nkicc.loader import load_module
from tests.driver.test_bad_kernels import EXPECT, Case
from tests.support.cli import run_in_process
from tests.support.paths import REPO

CORPUS = REPO / "tests" / "driver" / "bad_kernels_01"
NEAR_MISSES = CORPUS / "near_misses.py"
NOTICE = "nkicc: NKI "  # the one line that says which dialect was assumed (once per process)


def collect() -> list[Case]:
    cases = []
    for path in sorted(CORPUS.glob("*.py")):
        if path == NEAR_MISSES:
            continue
        text = path.read_text()
        funcs = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
        for line, source in enumerate(text.splitlines(), 1):
            m = EXPECT.search(source)
            if m:
                words = m.group(2).split()
                owner = next(f for f in funcs if f.lineno <= line <= f.end_lineno)
                mode = "api" if "api" in words else "simulate" if "simulate" in words else "compile"
                cases.append(Case(path, line, m.group(1), mode, owner.name))
    return cases


CASES = collect()


def test_corpus_covers_the_01_forms():
    assert len(CASES) >= 20, len(CASES)
    assert {"E101", "E103", "E110", "E120", "E130", "E140", "E160", "E161", "E201"} <= {c.code for c in CASES}
    assert len({c.id for c in CASES}) == len(CASES), "one EXPECT per kernel"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_01_kernel(case, capsys):
    if case.mode == "api":
        module = load_module(str(case.file))
        with pytest.raises(nkicc.NkiccError) as excinfo:
            getattr(module, case.target)()
        err = excinfo.value
        assert err.code == case.code, str(err)
        assert err.loc is not None and Path(err.loc.file) == case.file and err.loc.line == case.line, str(err)
        return
    code, _, err = run_in_process(capsys, case.mode, f"{case.file}::{case.target}")
    assert code == 1, f"exit code {code}, stderr:\n{err}"
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(NOTICE)]
    assert len(lines) == 1, f"expected one line:\n{err}"
    assert lines[0].startswith(f"error[{case.code}] {case.file}:{case.line}: "), (lines[0], case)
    if case.code == "E161":
        assert "see the migration guide, section '" in lines[0], lines[0]


def near_misses():
    module = load_module(str(NEAR_MISSES))
    return [(name, k) for name, k in vars(module).items() if isinstance(k, nkicc.JitKernel)]


@pytest.mark.parametrize("name,kernel", near_misses(), ids=[n for n, _ in near_misses()])
def test_01_near_miss_compiles_and_runs(name, kernel, rng):
    from nkicc.language.kernel_trace import inspect_unwrap
    from nkicc.specs import annotated_specs

    specs = annotated_specs(inspect_unwrap(kernel.fn))
    arrays = [rng.standard_normal(s.shape).astype(np.float32) for s in specs.values()]
    rolled = nkicc.compile(kernel, *arrays).run(*arrays)
    unrolled = nkicc.compile(kernel, *arrays, unroll=True).run(*arrays)
    scale = max(1.0, float(np.nanmax(np.abs(unrolled), initial=0.0)))
    np.testing.assert_allclose(rolled, unrolled, rtol=0, atol=1e-6 * scale)
