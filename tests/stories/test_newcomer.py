"""A newcomer's first hour (issue 17): each point a user tripped over, as a test.

Every test runs the real command line (a subprocess, as a user types it) or the
real API, on random data where results are compared.
"""
import json
import pathlib
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.support.paths import EXAMPLES, REPO
from tests.support.cli import run_cli


def nkicc(*args, cwd=None, env=None):
    return run_cli(*args, cwd=cwd, add_env=env)


def one_line(r, code):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"error[{code}]"), r.stderr
    return lines[0]


ONE_KERNEL = textwrap.dedent('''
    import nkicc
    import nkicc.language as nl


    @nkicc.jit
    def scale(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            ta = nl.load(a[i * 128:(i + 1) * 128, :])
            tb = nl.load(b[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(nl.multiply(ta, 3.0), tb))
        return out
''')

DEV_PASS = textwrap.dedent('''
    from nkicc.pass_api import Pass, hookimpl


    def count_ops(kernel, ctx):
        ctx.note("ops", sum(1 for s in kernel.body.walk() if type(s).__name__ == "Op"), show=True)
        return kernel


    @hookimpl
    def nkicc_passes():
        return [Pass("devpass", count_ops, "count the rolled ops", default=False, scope="kernel")]
''')


@pytest.fixture
def one_kernel(tmp_path):
    (tmp_path / "k.py").write_text(ONE_KERNEL)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "devpass.py").write_text(DEV_PASS)  # in a folder of its own, the current one
    return tmp_path


# -- 1: -p with a file, a relative name, an empty name -------------------------------------------

@pytest.mark.parametrize("spec", ["./devpass.py", "devpass.py", "{dir}/dev/devpass.py"])
def test_plugin_given_as_a_file_loads(one_kernel, spec):
    r = nkicc("compile", "../k.py::scale", "--arg", "a=float32[256,64]", "--arg", "b=float32[256,64]",
              "-p", spec.format(dir=one_kernel), "--enable-pass", "devpass", cwd=one_kernel / "dev")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^note\[devpass\] ops: \d+$", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("spec, says", [
    ("devpass", "current folder is not on the import path"),   # not importable by name from its folder
    (".devpass", "relative import name"),
    ("", "empty plugin module name"),
    ("nosuch.py", "dev/nosuch.py (give the path"),
])
def test_plugin_mistakes_are_one_line_e303(one_kernel, spec, says):
    # the console script, as a user runs it (`python -m` would put the current folder on sys.path)
    script = os.path.join(os.path.dirname(sys.executable), "nkicc")
    if not os.path.exists(script):
        pytest.skip("the nkicc console script is not next to this python")
    r = subprocess.run([script, "compile", "../k.py::scale", "--arg", "a=float32[256,64]", "--arg",
                        "b=float32[256,64]", "-p", spec], capture_output=True, text=True, cwd=one_kernel / "dev",
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert says in one_line(r, "E303")
    assert "Traceback" not in r.stderr


# -- 5: --inputs FILE.npz gives the specs -------------------------------------------------------

def test_simulate_takes_specs_from_the_inputs_file(one_kernel, rng):
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((256, 64)).astype(np.float32)
    np.savez(one_kernel / "in.npz", a=a, b=b)
    r = nkicc("simulate", "k.py::scale", "--inputs", "in.npz", "-o", "out.npz", cwd=one_kernel)
    assert r.returncode == 0, r.stderr
    with np.load(one_kernel / "out.npz") as saved:
        (got,) = [saved[k] for k in saved.files]
    np.testing.assert_allclose(got, 3 * a + b, rtol=1e-6, atol=1e-6)
    # an --arg still wins over the file, and then the file must match it
    r = nkicc("simulate", "k.py::scale", "--inputs", "in.npz", "--arg", "a=float32[512,64]",
              "--arg", "b=float32[512,64]", cwd=one_kernel)
    assert one_line(r, "E002")


# -- 8: -o into a missing folder fails before the simulation ------------------------------------

def test_missing_output_folder_fails_before_compiling(one_kernel):
    bad = str(one_kernel / "no-such-folder" / "out.npz")
    # a kernel that would fail to trace: the -o check must come first
    (one_kernel / "bad.py").write_text(ONE_KERNEL.replace("a.shape[0] // 128", "a.shape[0] // 64"))
    r = nkicc("simulate", "bad.py", "--arg", "a=float32[256,64]", "--arg", "b=float32[256,64]", "-o", bad,
              cwd=one_kernel)
    assert bad in one_line(r, "E205")


# -- 10: --version, FILE.py alone, help without <bool>, attempts, "bad value" --------------------

def test_version():
    from nkicc.cache.keys import compiler_version
    r = nkicc("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"nkicc {compiler_version()}"


def test_a_file_with_one_kernel_needs_no_kernel_name(one_kernel):
    r = nkicc("compile", "k.py", "--arg", "a=float32[256,64]", "--arg", "b=float32[256,64]", cwd=one_kernel)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kernel scale:")
    r = nkicc("compile", str(EXAMPLES / "fused_matmul.py"))
    line = one_line(r, "E200")
    assert "3 kernels" in line and "mm2, mm2_dynamic, einsum" in line


def test_help_has_no_type_labels():
    from typer.testing import CliRunner
    from nkicc.cli import app
    for cmd in ([], ["compile"], ["simulate"], ["run"], ["cache", "stats"]):
        r = CliRunner().invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0, r.output
        assert "<bool>" not in r.output and "--help" in r.output, r.output


def test_summary_says_what_the_attempts_are():
    r = nkicc("compile", str(EXAMPLES / "fused_matmul.py") + "::mm2", "--no-cache")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert re.search(r"\((\d+) attempts: one more per loop it split or traced concretely\)", first), first


@pytest.mark.parametrize("cmd", [["simulate", "{k}", "--timing", "maybe"],
                                 ["simulate", "{k}", "--simulator", "fast"],
                                 ["run", "--timing", "maybe", "{s}"]])
def test_bad_option_value_says_bad_value(one_kernel, cmd):
    (one_kernel / "s.py").write_text("print('never')\n")
    args = [c.format(k=str(one_kernel / "k.py"), s=str(one_kernel / "s.py")) for c in cmd]
    line = one_line(nkicc(*args), "E201")
    bad = "'fast'" if "fast" in cmd else "'maybe'"
    assert f"bad value {bad} for {'--simulator' if 'fast' in cmd else '--timing'}" in line, line


# -- 9: the guide's sample summary is the bundled example's -------------------------------------

def test_guide_summary_is_what_the_bundled_example_prints():
    guide = (REPO / "docs" / "guide.md").read_text()
    sample = re.search(r"^## What the compile summary says\n+```\n(.*?)^```", guide, re.M | re.S).group(1)
    r = nkicc("compile", str(EXAMPLES / "fused_matmul.py") + "::mm2")
    assert r.returncode == 0, r.stderr
    printed = r.stdout.splitlines()
    for line in sample.splitlines()[1:]:       # the counts are exact; the first line has times
        assert line in printed, (line, printed)
    assert "fused_matmul.py::mm2" in guide[guide.index("## What the compile summary says"):][:1200]


# -- 12: nkicc reproduce shows the pass's traceback ---------------------------------------------

def test_reproduce_prints_the_traceback_and_says_where_it_is_recorded(tmp_path):
    env = {"PYTHONPATH": str(REPO)}
    r = nkicc("compile", str(EXAMPLES / "fused_matmul.py") + "::mm2", "-p", "tests.support.broken_plugin",
              "--enable-pass", "crash", cwd=tmp_path, env=env)
    assert r.returncode == 4, r.stderr
    (repro,) = tmp_path.glob("nkicc-repro-*.json")
    r2 = nkicc("reproduce", str(repro), cwd=tmp_path, env=env)
    assert r2.returncode == 4
    assert r2.stderr.splitlines()[0] == r.stderr.splitlines()[0]
    assert "Traceback (most recent call last)" in r2.stderr and "ZeroDivisionError" in r2.stderr
    assert "broken_plugin.py" in r2.stderr                        # the pass's own frame
    assert f'"traceback" in {repro}' in r2.stderr
    assert json.loads(repro.read_text())["traceback"].startswith("Traceback")
    assert len(list(tmp_path.glob("nkicc-repro-*.json"))) == 1    # replaying writes no second reproducer


# -- 3: names from the source -------------------------------------------------------------------

NAMED = textwrap.dedent('''
    import nkicc
    import nkicc.language as nl
    import nkicc.isa as nisa


    @nkicc.jit
    def two(a: "float32[128,64]", b: "float32[128,64]"):
        total = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        scaled = nl.ndarray(
            a.shape, dtype=a.dtype,
            buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        s = nl.add(ta, tb)
        nl.store(total, value=s)
        nl.store(scaled, value=nl.multiply(ta, 2.0))
        return total, scaled


    @nkicc.jit
    def psum_stationary(s: "float32[64,8]", m: "float32[64,16]"):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.zeros((64, 8), dtype=nl.float32, buffer=nl.psum)
        acc = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=p, moving=nl.load(m))
        nl.store(out, value=nl.copy(acc))
        return out


    @nkicc.jit
    def half_written(a: "float32[256,64]"):
        result = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(result[0:128, :], value=nl.load(a[0:128, :]))
        return result
''')


@pytest.fixture
def named_file(tmp_path):
    path = tmp_path / "named.py"
    path.write_text(NAMED)
    return path


def test_messages_use_the_variable_names(named_file):
    line = one_line(nkicc("compile", f"{named_file}::psum_stationary"), "E131")
    p_line = NAMED.splitlines().index("    p = nl.zeros((64, 8), dtype=nl.float32, buffer=nl.psum)") + 1
    assert f"p (made at line {p_line}) is in psum" in line, line
    line = one_line(nkicc("simulate", f"{named_file}::half_written"), "E174")
    r_line = NAMED.splitlines().index("    result = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)") + 1
    assert f"output result (made at line {r_line})" in line, line


def test_simulate_output_and_npz_keys_are_the_returned_variables(named_file, tmp_path, rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    r = nkicc("simulate", f"{named_file}::two", "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    assert re.search(r"^total: float32\[128, 64\]", r.stdout, re.M) and re.search(r"^scaled: ", r.stdout, re.M)
    with np.load(tmp_path / "o.npz") as saved:
        assert sorted(saved.files) == ["scaled", "total"]
        np.testing.assert_allclose(saved["total"], a + b, rtol=1e-6)
        np.testing.assert_allclose(saved["scaled"], 2 * a, rtol=1e-6)


def test_tracer_records_assignment_targets(named_file):
    import importlib.util
    import nkicc
    spec = importlib.util.spec_from_file_location("named_kernels", named_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = nkicc.compile(mod.two, "float32[128,64]", "float32[128,64]", cache=False)
    labels = {t.label for t in c.traced_ir.tensors}
    assert {"a", "b", "total", "scaled", "ta", "tb", "s"} <= labels, labels   # tuple targets, a multi-line call
    assert c.output_names == ["total", "scaled"]
    names = [t.name for t in c.traced_ir.tensors]
    assert len(names) == len(set(names))                 # internal names stay unique


def test_labels_are_not_part_of_the_cache_key_but_survive_serialisation(tmp_path):
    import nkicc
    import nkicc.language as nl
    from nkicc.ir.hash import kernel_hash
    from nkicc.ir.serialize import from_json, to_json

    def body(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.load(a)
        nl.store(out, value=nl.exp(tile))
        return out

    def renamed(a):
        result = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        nl.store(result, value=nl.exp(x))
        return result

    one = nkicc.compile(body, "float32[128,32]", cache=False).traced_ir
    two = nkicc.compile(renamed, "float32[128,32]", cache=False).traced_ir
    assert {t.label for t in one.tensors} != {t.label for t in two.tensors}
    assert kernel_hash(one) == kernel_hash(two)
    assert from_json(to_json(one)) == one and "tile" in {t.label for t in from_json(to_json(one)).tensors}


def test_names_from_the_source_cover_the_target_forms():
    from nkicc.language.naming import assigned_name
    import inspect

    class Holder:
        pass

    def made():
        return assigned_name(inspect.currentframe().f_back)

    h = Holder()
    tiles = [None]
    plain = made()
    h.acc = made()
    tiles[0] = made()
    first, second = made(), made()
    nested = str(made())                     # not the whole value: no name
    multi = made(
    )
    assert (plain, h.acc, tiles[0], first, second, nested, multi) == ("plain", "acc", "tiles", "first", "second",
                                                                     "", "multi")


# -- 4: docs/api.md is generated from the definitions and cannot drift --------------------------

def test_api_reference_is_current():
    from nkicc.apidoc import render
    committed = (REPO / "docs" / "api.md").read_text()
    assert committed == render(), "docs/api.md is stale: run `python -m nkicc.apidoc > docs/api.md`"


def test_api_reference_lists_every_public_operation():
    """Independent of the generator's own filter: every name a kernel can use
    (anything of nl / nisa that is not private, a module or an import) is on
    the page with its parameters."""
    import inspect
    import nkicc.isa as nisa
    import nkicc.language as nl
    page = (REPO / "docs" / "api.md").read_text()
    for short, module in (("nl", nl), ("nisa", nisa)):
        names = getattr(module, "__all__", None) or [
            n for n in dir(module) if not n.startswith("_") and inspect.isfunction(getattr(module, n))
            and getattr(module, n).__module__.startswith(module.__name__)]
        assert names
        for n in names:
            fn = getattr(module, n)
            if inspect.ismodule(fn):  # nisa.constants: a namespace of the enums listed on the page
                continue
            if not callable(fn):
                assert f"`{short}.{n}`" in page, n
                continue
            params = ", ".join(p for p in inspect.signature(fn).parameters if not p.startswith("_"))
            assert f"`{short}.{n}(" in page, n
            assert all(p in page[page.index(f"`{short}.{n}("):][:400] for p in params.split(", ") if p), n
    for dt in ("bfloat16", "float32", "tfloat32", "int32"):
        assert f"`nl.{dt}`: dtype `{dt}`" in page
    assert "`nt.tensor`" in page and "`enable_passes=()`" in page


def test_python_m_apidoc_prints_the_page():
    r = subprocess.run([sys.executable, "-m", "nkicc.apidoc"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == (REPO / "docs" / "api.md").read_text()


def test_nothing_points_outside_the_repository():
    """Messages and docs never send a user to a file a clone or an installed
    package does not have (benchmark records name where they ran)."""
    bad = []
    for path in REPO.rglob("*"):
        if not path.is_file() or path.suffix not in (".py", ".md", ".toml", ".ipynb", ".txt"):
            continue
        rel = path.relative_to(REPO)
        if rel.parts[0] in (".venv", "bench", "build") or rel.parts[0].startswith(".") or \
                rel in (pathlib.Path("tests/stories/test_newcomer.py"), pathlib.Path("CHANGELOG.md")) or "egg-info" in str(rel):
            continue
        text = path.read_text(errors="replace")
        if "NKI_SPEC" in text:
            bad.append(f"{rel}: NKI_SPEC")
        if rel.parts[0] not in ("tests",) and rel != pathlib.Path("docs/benchmarks.md") and \
                "../shared/" in text:
            bad.append(f"{rel}: ../shared/")
    assert not bad, bad


# -- 7: the kernel-level cache key is the code, not the file it lives in -------------------------

def _load(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_same_kernel_in_another_file_is_a_kernel_level_hit(tmp_path, rng, monkeypatch):
    """What a restarted notebook does: the same cell code, under another file
    name (ipykernel_<PID>/...). The hit's IR and warnings name the new file."""
    import nkicc
    source = ONE_KERNEL
    (tmp_path / "one").mkdir()
    (tmp_path / "another-folder").mkdir()
    first_path, second_path = tmp_path / "one" / "cell.py", tmp_path / "another-folder" / "cell_2.py"
    monkeypatch.setenv("NKICC_CACHE_DIR", str(tmp_path / "cache"))  # other tests compile this kernel too
    first_path.write_text(source)
    second_path.write_text(first_path.read_text())
    first, second = _load(first_path, "cell_first"), _load(second_path, "cell_second")
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((256, 64)).astype(np.float32)
    c1 = nkicc.compile(first.scale, a, b)
    assert c1.report["cache"]["kernel"] == "miss"
    c2 = nkicc.compile(second.scale, a, b)
    assert c2.report["cache"]["kernel"] == "hit"
    files = {s.loc.file for s in c2.ir.body.walk() if getattr(s, "loc", None) is not None} | \
        {t.loc.file for t in c2.ir.tensors if t.loc is not None}
    assert files == {str(second_path)}, files
    np.testing.assert_allclose(c2.run(a, b), 3 * a + b, rtol=1e-6)
    # an edit (another line) is a miss
    edited = tmp_path / "one" / "edited.py"
    edited.write_text(first_path.read_text().replace("value=nl.add(nl.multiply(ta, 3.0), tb)",
                                                     "value=nl.add(nl.multiply(ta, 4.0), tb)"))
    assert nkicc.compile(_load(edited, "cell_edited").scale, a, b).report["cache"]["kernel"] == "miss"


# -- 7: the notebook runs top to bottom twice, and once more after a restart with kernel hits -----

NOTEBOOK = EXAMPLES / "notebooks" / "incremental.ipynb"


def _outputs(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_notebook_runs_twice_then_hits_after_a_restart(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("NKICC_CACHE_DIR", str(tmp_path / "cache"))  # the kernel process inherits it
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    first_compile = next(i for i in code if "first = nkicc.compile" in nb.cells[i].source)
    edit = next(i for i in code if "edited = nkicc.compile" in nb.cells[i].source)

    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    runs = []
    with client.setup_kernel():
        for _ in range(2):                       # top to bottom, twice, in one kernel
            for i in code:
                client.execute_cell(nb.cells[i], i)
            runs.append((_outputs(nb.cells[first_compile]), _outputs(nb.cells[edit])))
    (first, edit1), (second, edit2) = runs
    assert "'kernel': 'miss'" in first and re.search(r"regions hit after the edit: \d+, run without the cache", edit1), edit1
    assert "'kernel': 'hit'" in second and "'kernel': 'hit'" in edit2

    restarted = nbformat.read(NOTEBOOK, as_version=4)  # a new kernel process: another cell file name
    nbclient.NotebookClient(restarted, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert "'kernel': 'hit'" in _outputs(restarted.cells[first_compile])
    assert "'kernel': 'hit'" in _outputs(restarted.cells[edit])


def test_notebook_has_its_outputs_stored():
    import json
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code)
    printing = [c for c in code if re.search(r"^(show|print)\(", "".join(c["source"]), re.M)]
    assert len(printing) >= 4 and all(c.get("outputs") for c in printing)
    assert "regions hit after the edit: " in json.dumps(nb)


# -- 6: a kernel with no return warns -------------------------------------------------------------

NO_RETURN = textwrap.dedent('''
    import nkicc
    import nkicc.language as nl


    @nkicc.jit
    def forgot(a: "float32[128,64]"):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(a)))


    @nkicc.jit
    def returns_none(a: "float32[128,64]"):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(a)))
        return None
''')


@pytest.mark.parametrize("kernel, line", [("forgot", "def forgot"), ("returns_none", "return None")])
def test_kernel_without_return_warns(tmp_path, kernel, line):
    path = tmp_path / "k.py"
    path.write_text(NO_RETURN)
    at = next(i for i, text in enumerate(NO_RETURN.splitlines(), 1)
              if text.strip().startswith(line) and (line != "return None" or i > 10))
    r = nkicc("simulate", f"{path}::{kernel}")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning[W104] {path}:{at}: kernel {kernel}"), r.stderr
    assert "W104" in nkicc("explain", "W104").stdout


# -- 11: Perfetto loop tracks name the source loop ------------------------------------------------

def test_perfetto_loop_tracks_name_the_source_loop(tmp_path):
    src = textwrap.dedent('''
        import nkicc
        import nkicc.language as nl


        @nkicc.jit
        def rows(a: "float32[1024,64]"):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for row in nl.affine_range(8):
                t = nl.load(a[row * 128:(row + 1) * 128, :])
                nl.store(out[row * 128:(row + 1) * 128, :], value=nl.exp(t))
            return out
    ''')
    path = tmp_path / "rows.py"
    path.write_text(src)
    r = nkicc("simulate", str(path), "--trace", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    loop_line = src.splitlines().index("    for row in nl.affine_range(8):") + 1
    tracks = sorted({n for n in names.values() if n.startswith("loop ")})
    assert tracks and all(n.startswith(f"loop row at rows.py:{loop_line}") for n in tracks), tracks
    loops = [e for e in events if e.get("cat") == "loop"]
    assert all(".mb" not in e["name"] and e["name"].startswith("row=") for e in loops)
    # the source's indices (multi-buffer runs k iterations per slice: 0, k, 2k, ...)
    index = sorted(int(e["name"].split("=")[1]) for e in loops)
    assert index[0] == 0 and len(set(index)) == len(index) and set(index) <= set(range(8)) and 8 % len(index) == 0
    assert index == list(range(0, 8, 8 // len(index)))
    # instructions name what they write as the kernel does
    t_line = src.splitlines().index("        t = nl.load(a[row * 128:(row + 1) * 128, :])") + 1
    written = {e["args"].get("writes") for e in events if e["ph"] == "X" and e.get("cat") != "loop"}
    assert f"t (made at line {t_line})" in written and "out (made at line 8)" in written, written


# -- 13: the summary under --enable-pass unroll -----------------------------------------------------

def test_summary_under_unroll_says_what_is_left(rng):
    import nkicc
    from nkicc.report import summary_lines
    mod = _load(EXAMPLES / "matmul.py", "matmul_examples")
    rolled = summary_lines(nkicc.compile(mod.matmul_tiled, cache=False, **_annotated(mod.matmul_tiled)).report)
    unrolled = summary_lines(nkicc.compile(mod.matmul_tiled, cache=False, passes={"enable": ["unroll"]},
                                           **_annotated(mod.matmul_tiled)).report)
    assert rolled[2].startswith("  loops: ") and "after the passes" not in rolled[2]
    m = re.search(r"\(after the passes: 0 static loops, ([\d,]+) instructions\)$", unrolled[2])
    assert m, unrolled[2]
    executed = re.search(r"([\d,]+) executed", unrolled[1]).group(1)
    assert m.group(1) == executed   # fully unrolled: every executed instruction is in the program


def _annotated(kernel) -> dict:
    """The kernel's annotated specs as keyword arguments of nkicc.compile."""
    from nkicc.specs import annotated_specs
    from nkicc.language.kernel_trace import inspect_unwrap
    return {k: str(v) for k, v in annotated_specs(inspect_unwrap(kernel.fn)).items()}
