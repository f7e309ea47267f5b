"""bench/conformance.py on a small library of our own (no NKI Library needed):
variant rows ("kernel[mx]") and typed inputs (packed MX `*_x4` arrays)."""
import sys

import numpy as np
import pytest

from tests.support.bench import load_bench

KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def mx_mm(st, mv, s_sc, m_sc, scale=1.0):
    out = nl.ndarray((st.shape[1], mv.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for x in (st, mv, s_sc, m_sc):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tiles.append(t)
    ps = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=ps, stationary=tiles[0], moving=tiles[1], stationary_scale=tiles[2], moving_scale=tiles[3])
    r = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=r, data=ps, op=nl.copy, scale=scale)
    nisa.dma_copy(dst=out, src=r)
    return out
'''


_load = load_bench  # by its own name: conformance.py's child imports conformance_refs by name


def _library(tmp_path):
    lib = tmp_path / "nkilib"
    (lib / "core").mkdir(parents=True)
    (lib / "experimental").mkdir()
    (lib / "core" / "mxk.py").write_text(KERNEL)
    return str(lib)


def test_variants_follow_their_kernel(tmp_path):
    conf = _load("conformance")
    found = conf.discover(_library(tmp_path), set(), [("mx_mm[x2]", "core/mxk.py", "mx_mm"),
                                                      ("gone[mx]", "core/none.py", "gone")])
    assert [f.name for f in found] == ["mx_mm", "mx_mm[x2]"]   # a variant of a kernel not found is dropped


def test_typed_mx_inputs_run_against_numpy(trn3, tmp_path, monkeypatch):
    conf = _load("conformance")
    refs = _load("conformance_refs")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the child puts the library's folder on the path
    from nkicc.ir import numerics
    rng = np.random.default_rng(5)
    k, m, n = 32, 4, 8
    st, mv = numerics.random_values(rng, "float8_e5m2_x4", (k, m)), numerics.random_values(rng, "float8_e5m2_x4", (k, n))
    s_sc, m_sc = np.full((k, m), 127, np.uint8), np.full((k, n), 128, np.uint8)   # scales 1 and 2

    def dequant(x):  # scale 1 and 2 for every group: the plain sum over partitions and lanes
        return numerics.unpack(x, "float8_e5m2_x4").astype(np.float64).reshape(k, -1, 4)

    want = 2 * np.einsum("kml,knl->mn", dequant(st), dequant(mv))

    def make(scale):
        def case(rng, m_):
            return refs.Inputs({"st": st, "mv": mv, "s_sc": s_sc, "m_sc": m_sc, "scale": scale}, [scale * want],
                               tol=(1e-6, 1e-6), dtypes={"st": "float8_e5m2_x4", "mv": "float8_e5m2_x4"})
        return case

    monkeypatch.setitem(refs.CASES, "mx_mm", refs.Case("core/mxk.py", "mx_mm", make(1.0), target="trn3"))
    monkeypatch.setitem(refs.CASES, "mx_mm[x2]", refs.Case("core/mxk.py", "mx_mm", make(2.0), target="trn3"))
    lib = _library(tmp_path)
    for name in ("mx_mm", "mx_mm[x2]"):
        res = conf.child(lib, "core/mxk.py", "mx_mm", name)
        assert res.status == "pass", res.first_error
        assert res.shapes.startswith("st[32,4] mv[32,8]")
    for mod in [mod for mod in sys.modules if mod == "nkilib" or mod.startswith("nkilib.")]:
        del sys.modules[mod]  # our small library, imported by the child


def test_compare_names_the_kernels_that_stopped_passing(tmp_path):
    """--compare reads the statuses back from a report the script wrote and names each kernel that
    passed there and does not now (what a change to nkicc broke); the others are not named."""
    conf = _load("conformance")
    R = conf.Result
    before = [R("a", "core/a.py", "a", status="pass"), R("b", "core/b.py", "b", status="pass"),
              R("c", "core/c.py", "c", status="error", first_error="E999 old"),
              R("d[mx]", "core/d.py", "d", status="not run")]
    report = tmp_path / "report.md"
    conf.write_report(before, str(report), str(tmp_path), "a snapshot", "python bench/conformance.py X", [])
    assert conf.recorded_statuses(str(report)) == {"a": "pass", "b": "pass", "c": "error", "d[mx]": "not run"}
    now = [R("a", "core/a.py", "a", status="pass"), R("b", "core/b.py", "b", status="error", first_error="E171 x"),
           R("c", "core/c.py", "c", status="pass"), R("d[mx]", "core/d.py", "d", status="error")]
    assert conf.regressions(now, conf.recorded_statuses(str(report))) == ["b: passed, now error: E171 x"]


def test_the_suite_report_counts_the_suites_own_bugs_apart(tmp_path):
    """An item that fails on the suite's or library's own bug is counted apart, with its
    one-line reason; nkicc's failures stay failures."""
    suite = load_bench("conformance_suite")
    test = "test/integration/nkilib/core/attention/test_gen_mask_tkg.py::T::test_mask"
    items = [suite.Item(test + "[a]", "passed", "", 1.0, 0.5),
             suite.Item(test + "[b]", "failed", "KeyError: 'mask_out_hbm'", 0.1),
             suite.Item(test + "[c]", "failed", "error[E400] k.py:3: PSUM is over capacity", 0.2, 0.1),
             suite.Item(test + "[d]", "skipped", "Skipping slow simulation test", 0.0),
             suite.Item(test + "[e]", "failed", "MemoryError: Unable to allocate 4.50 GiB", 0.3, 0.0, 0, 6100.0, 60.0,
                        0.0, "suite")]
    out = tmp_path / "report.md"
    suite.write_report(items, str(out), "abc", "python bench/conformance.py --suite LIB", 3.0, "", {})
    text = out.read_text()
    assert "**5 items: 1 passed, 2 failed, 1 blocked by the suite's own bugs, 0 timed out, 1 skipped" in text
    blocked = text.split("### Blocked by the suite's own bugs")[1].split("###")[0]
    assert "| 1 | the test's output descriptor reads `mask_out_hbm`" in blocked
    failures = text.split("### Failures by first error")[1].split("###")[0]
    assert "E400" in failures and "mask_out_hbm" not in failures
    memory = text.split("### Memory")[1].split("###")[0]
    assert "out of memory under the cap: 1, 1 while the suite's own code ran" in memory
    assert "the highest peak is 6,100 MB (nkicc added 0 MB of it)" in memory


SUITE_CONFTEST = '''
def pytest_addoption(parser):
    parser.addoption("--test-mode")
    parser.addoption("--output-directory")
    try:
        parser.addoption("--timeout")  # (pytest-timeout's, where it is not installed)
    except ValueError:
        pass
'''


def _suite(tmp_path, conftest: str = "", **files: str):
    """A library folder holding a suite of our own: test/conftest.py (the suite's options, and
    `conftest`), and test/NAME.py for each file given."""
    lib = tmp_path / "lib"
    (lib / "test").mkdir(parents=True)
    (lib / "test" / "conftest.py").write_text(SUITE_CONFTEST + conftest)
    for name, text in files.items():
        (lib / "test" / f"{name}.py").write_text(text)
    return lib


def test_a_pytest_process_that_dies_costs_one_item(tmp_path):
    """An item that kills its pytest process fails with the reason; the items after it run in
    a new process instead of failing with it."""
    suite = load_bench("conformance_suite")
    lib = _suite(tmp_path, test_x="import os\n\n\ndef test_a():\n    pass\n\n\ndef test_b():\n"
                                  "    os._exit(3)\n\n\ndef test_c():\n    assert False\n\n\n"
                                  "def test_d():\n    pass\n\n\ndef test_e():\n"
                                  "    import numpy\n    numpy.ones(2 ** 50, dtype='u1')\n")
    ids = [f"test/test_x.py::test_{n}" for n in "abcde"]
    items = suite.run_chunk(suite.Chunk(str(lib), ids, 60, 0, False))
    assert [(i.nodeid.rsplit("::", 1)[1], i.status) for i in items] == [
        ("test_a", "passed"), ("test_b", "failed"), ("test_c", "failed"), ("test_d", "passed"), ("test_e", "failed")]
    assert items[4].out_of_memory_in == "suite" and items[3].rss_peak_mb > 0
    assert items[1].message.startswith("the pytest process ended at this item (rc 3")
    assert "assert False" in items[2].message or "AssertionError" in items[2].message


def test_the_suite_runs_in_pieces_and_a_stopped_run_resumes():
    """Each file's items go out in pieces of at most --chunk-items (a cluster shares out the
    suite's largest file, a third of it); --every samples; a resumed run leaves out the items
    its journal holds, and the pieces keep the files' order."""
    suite = load_bench("conformance_suite")
    ids = [f"test/a.py::t[{k}]" for k in range(7)] + [f"test/b.py::t[{k}]" for k in range(3)]
    pieces = suite.chunks("LIB", ids, None, 60, 6, True, size=3, commit="abc")
    assert [len(c.nodeids) for c in pieces] == [3, 3, 1, 3]
    assert [n for c in pieces for n in c.nodeids] == ids and {c.commit for c in pieces} == {"abc"}
    assert [c.nodeids for c in suite.chunks("LIB", ids, None, 60, 6, True, every=3)] == [
        ["test/a.py::t[0]", "test/a.py::t[3]", "test/a.py::t[6]"], ["test/b.py::t[0]"]]
    done = {"test/a.py::t[0]", "test/a.py::t[1]", "test/b.py::t[2]"}
    rest = suite.chunks("LIB", ids, None, 60, 6, True, size=4, done=done)
    assert [c.nodeids for c in rest] == [[f"test/a.py::t[{k}]" for k in range(2, 6)], ["test/a.py::t[6]"],
                                         ["test/b.py::t[0]", "test/b.py::t[1]"]]
    assert [len(c.nodeids) for c in suite.chunks("LIB", ids, 2, 60, 6, True)] == [2, 2]  # --first, whole files


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory cap is RLIMIT_AS")
def test_an_item_that_ran_out_of_memory_runs_again_under_the_larger_cap(tmp_path):
    """--retry-memory-gb: an item that ran out of memory under the per-worker cap runs again,
    alone, under the larger one; the others keep their first result."""
    import argparse
    suite = load_bench("conformance_suite")
    lib = _suite(tmp_path, test_m="import numpy\n\n\ndef test_small():\n    pass\n\n\n"
                                  "def test_big():\n    assert numpy.ones(2 ** 31, dtype='u1').sum() > 0\n")
    ids = [f"test/test_m.py::test_{n}" for n in ("small", "big")]
    first = suite.run_chunk(suite.Chunk(str(lib), ids, 60, 1.5, False))
    assert [i.status for i in first] == ["passed", "failed"] and suite.ran_out_of_memory(first[1])
    args = argparse.Namespace(retry_memory_gb=4.0, timeout=60, all=False, json=str(tmp_path / "r.json"))
    again = suite.retry_out_of_memory(first, str(lib), args, lambda msg: None)
    assert [(i.status, i.mem_gb) for i in again] == [("passed", 1.5), ("passed", 4.0)]


def test_each_file_runs_the_ids_it_collects_alone(tmp_path):
    """The suite draws some parameters at random at collection, so a file's ids depend on
    what was collected before it; the runner takes each file's ids from the file collected
    alone, as the process that runs it collects it, and they all run."""
    suite = load_bench("conformance_suite")
    lib = _suite(tmp_path, "\nimport random\nrandom.seed(0)\n",
                 test_a="import random\nDRAWN = [random.random() for _ in range(5)]\n\n\ndef test_a():\n    pass\n",
                 test_b="import random\n\nimport pytest\n\n\n@pytest.mark.parametrize('v', [random.randint(0, 10 ** 9)])\n"
                        "def test_b(v):\n    pass\n")
    whole, _ = suite._collect(str(lib), False, ("test",))
    ids, broken = suite.collect(str(lib), False, ("test",))
    assert not broken and len(ids) == len(whole) == 2 and ids != whole  # (b's draw came after a's, whole)
    items = [i for c in suite.chunks(str(lib), ids, None, 60, 0, False) for i in suite.run_chunk(c)]
    assert [i.status for i in items] == ["passed", "passed"], [i.message for i in items]


def test_a_stopped_runs_journal_gives_the_report_and_the_per_item_results(tmp_path):
    """--from-journal: the report section and the per-item JSON from the items a stopped run
    finished, the last line of an item winning (its rerun under a larger memory cap)."""
    import argparse
    import json
    suite = load_bench("conformance_suite")
    lib = tmp_path / "lib"
    (lib / "test" / "integration").mkdir(parents=True)
    journal = tmp_path / "run.jsonl"
    rows = [{"nodeid": "test/integration/nkilib/core/x/test_x.py::test_a", "status": "failed",
             "message": "MemoryError", "mem_gb": 8.0},
            {"nodeid": "test/integration/nkilib/core/x/test_x.py::test_b", "status": "passed", "nkicc_s": 1.5},
            {"nodeid": "test/integration/nkilib/core/x/test_x.py::test_a", "status": "passed", "mem_gb": 20.0}]
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, js = tmp_path / "report.md", tmp_path / "items.json"
    out.write_text(f"before\n{suite.BEGIN}\nold\n{suite.END}\nafter\n")
    args = argparse.Namespace(suite=str(lib), from_journal=str(journal), out=str(out), json=str(js),
                              snapshot="abc", command="the command", note="a test")
    assert suite.main(args) == 0
    items = json.loads(js.read_text())["items"]
    assert [(i["nodeid"].rsplit("::", 1)[1], i["status"], i["mem_gb"]) for i in items] == \
        [("test_a", "passed", 20.0), ("test_b", "passed", 0.0)]
    text = out.read_text()
    assert "**2 items: 2 passed" in text and text.startswith("before") and text.rstrip().endswith("after")


def test_a_chained_failure_is_named_by_the_exception_raised():
    """pytest reports a chained exception context first; the runner names the one raised."""
    suite = load_bench("conformance_suite")
    text = ("    def f():\nE   KeyError: 'stop'\n\nx.py:3: KeyError\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "    def g():\nE   Failed: Timeout (>120.0s) from pytest-timeout.\n")
    assert suite.first_error("", text) == "Failed: Timeout (>120.0s) from pytest-timeout."
    assert suite.first_error("", "E   ValueError: plain\n") == "ValueError: plain"


def test_an_item_named_on_the_command_line_runs_alone(tmp_path):
    """A path that names an item (as a report lists it) is that item, not its whole file;
    files and folders beside it are collected as before."""
    suite = load_bench("conformance_suite")
    lib = _suite(tmp_path, test_a="import pytest\n\n\n@pytest.mark.parametrize('v', [1, 2, 3])\n"
                                  "def test_a(v):\n    pass\n",
                 test_b="def test_b():\n    pass\n\n\ndef test_c():\n    pass\n")
    ids, broken = suite.collect(str(lib), False, ("test/test_a.py::test_a[2]",))
    assert ids == ["test/test_a.py::test_a[2]"] and not broken
    ids, _ = suite.collect(str(lib), False, ("test/test_a.py::test_a[3]", "test/test_b.py"))
    assert ids == ["test/test_b.py::test_b", "test/test_b.py::test_c", "test/test_a.py::test_a[3]"]
    items = [i for c in suite.chunks(str(lib), ids[2:], None, 60, 0, False) for i in suite.run_chunk(c)]
    assert [(i.nodeid, i.status) for i in items] == [("test/test_a.py::test_a[3]", "passed")]


def test_a_sample_stands_for_each_file_by_its_own_item_count():
    """Every K-th item of each file: a file of 10 items gives one, and so does a file of 1,000.
    The whole-suite estimate scales each file's sampled mean by the items that file holds, not
    the sample by K (which would count the small file's item 100 times)."""
    suite = load_bench("conformance_suite")
    item = lambda n, nk, s: suite.Item(n, "passed", nkicc_s=nk, seconds=s)  # noqa: E731
    items = [item("test/big.py::t[0]", 1.0, 2.0), item("test/big.py::t[100]", 3.0, 4.0),
             item("test/small.py::t[0]", 50.0, 60.0),
             item("test/small.py::t[0]", 40.0, 50.0)]  # (run again under a larger cap: its last run counts)
    population = {"test/big.py": 1000, "test/small.py": 10, "test/unsampled.py": 5}
    nkicc, own, unsampled = suite.whole_suite_estimate(items, population)
    assert nkicc == pytest.approx(2.0 * 1000 + 40.0 * 10) and own == pytest.approx(3.0 * 1000 + 50.0 * 10)
    assert unsampled == ["test/unsampled.py"]
    assert "nkicc about 2,400 s (0.7 h)" in suite._estimate_line(items, population)
    assert suite._estimate_line(items, {"test/big.py": 2, "test/small.py": 1}) == ""  # (every item ran)


def test_a_stopped_samples_journal_knows_what_it_stands_for(tmp_path):
    """The journal starts with each file's item count, so that a report written from a stopped
    sample (--from-journal) gives the whole-suite estimate too."""
    import argparse
    import json
    suite = load_bench("conformance_suite")
    lib = tmp_path / "lib"
    (lib / "test" / "integration").mkdir(parents=True)
    journal = tmp_path / "run.jsonl"
    journal.write_text(json.dumps({"collected": {"test/integration/x/test_x.py": 300}}) + "\n"
                       + json.dumps({"nodeid": "test/integration/x/test_x.py::t[0]", "status": "passed",
                                     "nkicc_s": 2.0, "seconds": 3.0}) + "\n")
    out, js = tmp_path / "report.md", tmp_path / "items.json"
    args = argparse.Namespace(suite=str(lib), from_journal=str(journal), out=str(out), json=str(js),
                              snapshot="abc", command="the command", note="a test")
    assert suite.main(args) == 0
    assert json.loads(js.read_text())["collected"] == {"test/integration/x/test_x.py": 300}
    assert "nkicc about 600 s (0.2 h)" in out.read_text()
