"""Never-written memory in an output: E173/E174 by default, or the output as the
vendor's simulator returns it (NaN for floats, 4 for ints where nothing wrote) with
undefined="poison", NKICC_UNDEFINED=poison or `nkicc run --undefined poison`."""
import inspect
import textwrap

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError
from tests.support.cli import run_cli


def half_written(a):
    """Columns 0:32 of the output copied from a, columns 32:64 never written (a tile read whole)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t[:, 0:32], src=nl.load(a[:, 0:32]))
    nl.store(out, value=t)
    return out


def half_stored(a):
    """Rows 0:128 of a (256, 64) output stored, rows 128:256 never written."""
    out = nl.ndarray((256, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a))
    return out


@pytest.fixture
def a(rng):
    return rng.standard_normal((128, 64)).astype(np.float32)


def test_default_is_the_error(a, monkeypatch):
    monkeypatch.delenv("NKICC_UNDEFINED", raising=False)
    with pytest.raises(NkiccError) as ei:
        nkicc.jit(half_written)(a)
    assert ei.value.code == "E173" and "NKICC_UNDEFINED=poison" in ei.value.one_line()
    with pytest.raises(NkiccError) as ei:
        nkicc.jit(half_stored)(a)
    assert ei.value.code == "E174"


def test_poison_returns_what_the_vendor_simulator_returns(a, monkeypatch):
    monkeypatch.delenv("NKICC_UNDEFINED", raising=False)
    got = nkicc.jit(half_written, undefined="poison")(a)
    np.testing.assert_array_equal(got[:, :32], a[:, :32])
    assert np.isnan(got[:, 32:]).all()
    got = nkicc.jit(half_stored, undefined="poison")(a)
    np.testing.assert_array_equal(got[:128], a)
    assert np.isnan(got[128:]).all()
    # a compiled variant of the jit kernel, run directly, does as the jit kernel does
    compiled = nkicc.jit(half_written, undefined="poison").compile(a)
    assert np.isnan(compiled.run(a)[:, 32:]).all()
    # the jit's own choice is per kernel: another kernel of the same function still errs
    with pytest.raises(NkiccError):
        nkicc.jit(half_written)(a)


def test_integer_poison_is_four(rng, monkeypatch):
    monkeypatch.delenv("NKICC_UNDEFINED", raising=False)
    x = rng.integers(-1000, 1000, size=(128, 64)).astype(np.int32)
    got = nkicc.jit(half_written, undefined="poison")(x)
    np.testing.assert_array_equal(got[:, :32], x[:, :32])
    assert (got[:, 32:] == 4).all()


def test_the_environment_variable_for_code_left_unchanged(a, monkeypatch):
    kernel = nkicc.jit(half_written)  # as a library or a test writes it
    monkeypatch.setenv("NKICC_UNDEFINED", "poison")
    got = kernel(a)
    assert np.isnan(got[:, 32:]).all() and (got[:, :32] == a[:, :32]).all()
    monkeypatch.setenv("NKICC_UNDEFINED", "error")
    with pytest.raises(NkiccError) as ei:
        kernel(a)
    assert ei.value.code == "E173"
    monkeypatch.setenv("NKICC_UNDEFINED", "nan")
    with pytest.raises(NkiccError) as ei:
        kernel(a)
    assert ei.value.code == "E201" and "NKICC_UNDEFINED='nan'" in ei.value.one_line()


def test_a_bad_choice_is_one_line_at_the_decorator():
    with pytest.raises(NkiccError) as ei:
        nkicc.jit(half_written, undefined="ignore")  # THE-LINE
    err = ei.value
    assert err.code == "E201" and "undefined='ignore'" in err.one_line()
    assert err.loc is not None and err.loc.file == __file__
    assert "THE-LINE" in open(__file__).read().splitlines()[err.loc.line - 1]


# a script written for NKI, the kernel above as it would call it
SCRIPT = "\n".join([
    "import numpy as np", "import nki", "import nki.isa as nisa", "import nki.language as nl", "",
    inspect.getsource(half_written),
    "half_written = nki.jit(half_written)",
    "a = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)",
    "got = half_written(a)",
    'print("nan", int(np.isnan(got).sum()), "same", bool((got[:, :32] == a[:, :32]).all()))', ""])


def test_nkicc_run_undefined(tmp_path, monkeypatch):
    monkeypatch.delenv("NKICC_UNDEFINED", raising=False)
    (tmp_path / "s.py").write_text(SCRIPT)

    def run(*flags):
        return run_cli("run", *flags, "s.py", cwd=tmp_path)
    r = run("--undefined", "poison")
    assert r.returncode == 0, r.stderr
    assert "nan 4096 same True" in r.stdout
    r = run()
    assert r.returncode != 0 and "E173" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("--undefined", "maybe")
    assert r.returncode != 0 and "E201" in r.stderr and "--undefined" in r.stderr


def test_nkicc_simulate_undefined(tmp_path, monkeypatch):
    monkeypatch.delenv("NKICC_UNDEFINED", raising=False)
    (tmp_path / "k.py").write_text(textwrap.dedent('''
        import nkicc
        import nkicc.isa as nisa
        import nkicc.language as nl

        @nkicc.jit
        def half_written(a: "float32[128,64]"):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=t[:, 0:32], src=nl.load(a[:, 0:32]))
            nl.store(out, value=t)
            return out
    '''))

    def simulate(*flags):
        return run_cli("simulate", "k.py", "-o", "out.npz", *flags, cwd=tmp_path)
    r = simulate()
    assert r.returncode != 0 and r.stderr.startswith("error[E173]") and len(r.stderr.strip().splitlines()) == 1
    r = simulate("--undefined", "poison")
    assert r.returncode == 0, r.stderr
    assert "nan 4096" in r.stdout
    out = np.load(tmp_path / "out.npz")["out"]
    assert np.isnan(out[:, 32:]).all() and not np.isnan(out[:, :32]).any()
