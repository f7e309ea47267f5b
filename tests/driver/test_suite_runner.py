"""`pytest --nkicc`: a small stand-in for a library's test suite, written here
(the NKI Library itself is never a dependency of these tests), run through the
plugin in a subprocess. It imports the vendor's simulation-mode modules the
way such a suite does (`nki_cpu_simulator.nki.*` swapped in behind `nki`,
`neuron_dtypes`), and checks the kernels' results against numpy; the runner
must report its passes and failures, time nkicc's calls, run per-rank
collectives on N ranks, and never shadow an installed vendor package."""
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import ml_dtypes
import numpy as np
import pytest

CONFTEST = '''
import builtins
import os
import resource
import sys

if os.environ.get("SUITE_MEMORY_CAP"):  # (set here, not by a preexec_fn: the parent may run threads)
    cap = int(os.environ["SUITE_MEMORY_CAP"])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def pytest_addoption(parser):
    parser.addoption("--test-mode", default=None)


def pytest_configure(config):
    if config.getoption("--test-mode") != "simulation":
        return
    import nki_cpu_simulator.nki.builtin as b
    import nki_cpu_simulator.nki.compiler as c
    import nki_cpu_simulator.nki.isa as i
    import nki_cpu_simulator.nki.language as l
    import nki_cpu_simulator.nki.language.dtypes as d
    import nki_cpu_simulator.nki.tensor as t
    from nki_cpu_simulator import nki as n
    builtins.builtin = b
    sys.modules.update({"nki": n, "nki.language": l, "nki.isa": i, "nki.compiler": c, "nki.dtype": d,
                        "nki.tensor": t})
'''

KERNELS = '''
import numpy as np
import pytest
import neuron_dtypes
import nki
import nki.language as nl
import nki_cpu_simulator


@nki.jit
def scale_add(a, b, s):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, value=nl.add(nl.multiply(x, s), y))
    return out


RNG = np.random.default_rng(7)
A = RNG.standard_normal((128, 96)).astype(np.float32)
B = RNG.standard_normal((128, 96)).astype(np.float32)


def test_passes():
    got = nki.cpu_simulate(scale_add)[1](a=A, b=B, s=1.5)
    np.testing.assert_allclose(got, A * 1.5 + B, rtol=1e-6)


def test_wrong_golden_fails():
    got = nki.cpu_simulate(scale_add)[1](a=A, b=B, s=1.5)
    np.testing.assert_allclose(got, A * 2.5 + B, rtol=1e-6)


def test_bf16_inputs():
    a = neuron_dtypes.static_cast(A, neuron_dtypes.bfloat16)
    b = neuron_dtypes.static_cast(B, neuron_dtypes.bfloat16)
    got = nki.cpu_simulate(scale_add)[1](a=a, b=b, s=0.5)
    want = (a.astype(np.float32) * 0.5 + b.astype(np.float32)).astype(neuron_dtypes.bfloat16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2)


def test_trace_only():
    from nki.compiler.frontend import ParserFrontend
    compiled = ParserFrontend().compile(scale_add, inputs={"a": A, "b": B, "s": 2.0}, target="trn2", lnc=1)
    assert compiled.name == "scale_add"


@pytest.mark.skip(reason="too slow for a CPU simulator")
def test_skipped():
    pass


def test_where_modules_come_from():
    print("SIM", nki_cpu_simulator.__file__)
    print("DTYPES", neuron_dtypes.__file__)
    assert builtin.__name__.endswith("builtin")
'''

# a harness like the library's: per-rank inputs through its simulation path, outputs by rank on disk
HARNESS = '''
import os
import numpy as np


class InferenceException(Exception):
    pass


class PerRankInputs:
    def __init__(self, make):
        self.make = make

    def for_rank(self, rank):
        return self.make(rank)


def normalize_golden_output(golden, rank_id=0):
    return golden(rank_id) if callable(golden) else golden


class Orchestrator:
    def __init__(self, root):
        self.root = root

    def _run_simulator_inference(self, kut):
        import nki
        outs = nki.cpu_simulate(kut.kernel_func)[1](**kut.kernel_input)   # one rank, as the vendor's CPU mode
        return self._dump_output_tensors({"out": outs})

    def _dump_output_tensors(self, tensors):
        path = os.path.join(self.root, "inference")
        self.__dump_tensors__(path, tensors, lambda n: n)
        return path

    def __dump_tensors__(self, directory, tensors, name_fn):
        os.makedirs(directory, exist_ok=True)
        for name, value in tensors.items():
            np.save(os.path.join(directory, name_fn(name) + ".npy"), value)
'''

COLLECTIVES = '''
import os
import types
import numpy as np
import nki
import nki.language as nl
import nki.collectives as cc
from utils.test_orchestrator import Orchestrator, PerRankInputs


@nki.jit
def all_reduce(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_reduce(srcs=[x], dsts=[out], replica_group=cc.ReplicaGroup(), op=nl.add)
    return out


def test_all_reduce_on_four_ranks(tmp_path):
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(4)]
    want = np.sum(xs, axis=0)
    kut = types.SimpleNamespace(
        kernel_func=all_reduce, kernel_input=PerRankInputs(lambda r: {"x": xs[r]}),
        inference_args=types.SimpleNamespace(collective_ranks=4),
        compiler_input=types.SimpleNamespace(logical_nc_config=1,
                                             platform_target=types.SimpleNamespace(get_nc_gen=lambda: "gen3")),
        validation_args=types.SimpleNamespace(golden_output=lambda r: {"out": want}))
    root = Orchestrator(str(tmp_path))._run_simulator_inference(kut)
    for r in range(4):
        got = np.load(os.path.join(root, f"output_worker_{r}", "out.npy"))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
'''


def _suite(tmp_path, collectives=False):
    root = tmp_path / "lib"
    (root / "test").mkdir(parents=True)
    (root / "test" / "conftest.py").write_text(CONFTEST)
    (root / "test" / "test_kernels.py").write_text(KERNELS)
    if collectives:
        (root / "test" / "utils").mkdir()
        (root / "test" / "utils" / "__init__.py").write_text("")
        (root / "test" / "utils" / "test_orchestrator.py").write_text(HARNESS)
        (root / "test" / "test_collectives.py").write_text(COLLECTIVES)
    return root


def _run(root, *args, pythonpath=None, memory_cap=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NKICC_"))}
    env["NKICC_CACHE"] = "0"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "--rootdir", str(root),
           "--junitxml", str(root / "out.xml"), *args]
    if memory_cap:
        env["SUITE_MEMORY_CAP"] = str(memory_cap)
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return proc, root / "out.xml"


def _cases(xml_path):
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        status = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                status = tag
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[case.get("name")] = (status, props)
    return out


def test_runs_the_suite_and_reports_each_outcome(tmp_path):
    root = _suite(tmp_path, collectives=True)
    proc, xml = _run(root, "--nkicc", "test", "--test-mode", "simulation")
    cases = _cases(xml)
    assert {n: s for n, (s, _) in cases.items()} == {
        "test_passes": "passed", "test_wrong_golden_fails": "failure", "test_bf16_inputs": "passed",
        "test_skipped": "skipped", "test_where_modules_come_from": "passed", "test_trace_only": "passed",
        "test_all_reduce_on_four_ranks": "passed"}, proc.stdout + proc.stderr
    assert "Mismatched elements" in proc.stdout  # the failure is the suite's own assertion, reported as such
    props = cases["test_passes"][1]
    assert float(props["nkicc_compile_s"]) > 0 and float(props["nkicc_simulate_s"]) > 0
    assert props["nkicc_calls"] == "1"
    assert cases["test_all_reduce_on_four_ranks"][1]["nkicc_calls"] == "1"  # one 4-rank run, not four 1-rank runs
    served = [line for line in proc.stdout.splitlines() if "SIM " in line or "DTYPES " in line]
    assert len(served) == 2 and all("_nki_alias" in line for line in served), served


def test_inert_without_the_option(tmp_path):
    root = _suite(tmp_path)
    proc, _ = _run(root, "test", "--test-mode", "simulation")
    assert proc.returncode != 0
    assert "No module named 'nki_cpu_simulator'" in proc.stdout + proc.stderr


def test_an_installed_vendor_package_is_not_shadowed(tmp_path):
    vendor = tmp_path / "vendor"
    (vendor / "nki_cpu_simulator").mkdir(parents=True)
    (vendor / "nki_cpu_simulator" / "__init__.py").write_text("VENDOR = True\n")
    (vendor / "neuron_dtypes.py").write_text(textwrap.dedent('''
        import ml_dtypes
        bfloat16 = ml_dtypes.bfloat16
        def static_cast(a, dtype):
            return a.astype(dtype)
    '''))
    root = _suite(tmp_path)
    (root / "test" / "test_vendor.py").write_text(textwrap.dedent('''
        import neuron_dtypes
        import nki_cpu_simulator
        def test_vendor():
            assert getattr(nki_cpu_simulator, "VENDOR", False), nki_cpu_simulator.__file__
            assert neuron_dtypes.__file__.startswith(%r), neuron_dtypes.__file__
    ''' % str(vendor)))
    # the fake vendor simulator lacks nki.*: run only the file that checks where the modules come from
    proc, xml = _run(root, "--nkicc", "test/test_vendor.py", pythonpath=str(vendor))
    cases = _cases(xml)
    assert list(cases) == ["test_vendor"] and cases["test_vendor"][0] == "passed", proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["float8_e4m3fn_x4", "float4_e2m1fn_x4"])
def test_neuron_dtypes_packs_and_unpacks(name, rng):
    """The dtype stand-in's packed types round-trip through nkicc's own packing."""
    sys.path.append(os.path.join(os.path.dirname(__import__("nkicc").__file__), "_nki_alias"))
    try:
        import neuron_dtypes as nd
    finally:
        sys.path.pop()
    values = rng.uniform(-4, 4, (8, 16)).astype(np.float32)
    packed = nd.static_cast(values, getattr(nd, name))
    assert packed.shape == (8, 4) and nd.name(packed.dtype) == name
    element = "float8_e4m3fn" if name.startswith("float8") else "float4_e2m1fn"
    want = values.astype(getattr(ml_dtypes, element)).astype(np.float32)
    np.testing.assert_array_equal(nd.static_cast(packed, np.float32), want)
    assert nd.sizeinbytes(getattr(nd, name)) == (4 if name.startswith("float8") else 2)
    assert nd.is_float_type(name) and not nd.is_float_type(np.int32)



def test_a_two_core_launch_simulates_without_timing(rng):
    """The suite's simulation mode runs `kernel[2]` for values only: a launch whose
    cores meet (its own programs, the kernel's HBM shared) must run with timing off."""
    import nkicc
    import nkicc.isa as nisa
    import nkicc.language as nl

    @nkicc.jit
    def swap_halves(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
        theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
        nisa.core_barrier(data=out, cores=(0, 1))
        return out

    x = rng.standard_normal((128, 32)).astype(np.float32)
    ck = swap_halves[2].compile(x)
    assert ck.report["cores"] == 2
    outputs, _ = ck.simulate({"x": x}, timing=False)
    got = outputs[ck.ir.outputs[0]]
    np.testing.assert_array_equal(got[:64], x[64:])
    np.testing.assert_array_equal(got[64:], x[:64])


# a suite's tests whose memory goes to the golden, to nkicc, or past the process's cap
MEMORY = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def copy_into_big(a, rows, cols):
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:128, 0:64], src=a)
    return out


A = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)


def test_golden_memory():
    golden = np.random.default_rng(6).standard_normal(40_000_000)  # 305 MiB, the suite's own
    got = nki.cpu_simulate(copy_into_big)[1](a=A, rows=128, cols=64)
    np.testing.assert_array_equal(got, A)
    assert golden.size


def test_nkicc_memory():
    got = nki.cpu_simulate(copy_into_big)[1](a=A, rows=8192, cols=4096)  # a 128 MiB output, nkicc's
    np.testing.assert_array_equal(got[:128, :64], A)


def test_golden_then_fails():
    golden = np.random.default_rng(8).standard_normal(40_000_000)  # 305 MiB, held by the failing frame
    assert golden[0] > 100


def test_after_a_failure():
    got = nki.cpu_simulate(copy_into_big)[1](a=A, rows=128, cols=64)
    np.testing.assert_array_equal(got, A)


def test_torch_like_out_of_memory():
    try:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes")
    except RuntimeError as e:
        raise ValueError("the harness's own exception") from e


def test_suite_out_of_memory():
    np.ones((2 ** 15, 2 ** 16), dtype=np.float32)  # 8 GiB, past the cap


def test_nkicc_out_of_memory():
    nki.cpu_simulate(copy_into_big)[1](a=A, rows=2 ** 15, cols=2 ** 16)  # an 8 GiB output


@nki.jit
def builds_a_table(a):
    table = np.ones((2 ** 15, 2 ** 16), dtype=np.float32)  # 8 GiB of the kernel's own, while nkicc traces it
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


def test_suite_code_under_nkicc_out_of_memory():
    nki.cpu_simulate(builds_a_table)(a=A)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS is read from /proc (Linux)")
def test_memory_is_told_apart_from_the_suites(tmp_path):
    """Each item reports its peak RSS and the most an nkicc call added to it; an item
    that runs out of memory says whether nkicc or the suite's own code was running; a failed
    item's memory is given back before the next item starts."""
    root = _suite(tmp_path)
    (root / "test" / "test_memory.py").write_text(MEMORY)
    proc, xml = _run(root, "--nkicc", "test/test_memory.py", "--test-mode", "simulation", memory_cap=4 * 2 ** 30)
    cases = _cases(xml)
    assert {n: s for n, (s, _) in cases.items()} == {
        "test_golden_memory": "passed", "test_nkicc_memory": "passed",
        "test_suite_out_of_memory": "failure", "test_nkicc_out_of_memory": "failure",
        "test_golden_then_fails": "failure", "test_after_a_failure": "passed",
        "test_torch_like_out_of_memory": "failure", "test_suite_code_under_nkicc_out_of_memory": "failure"}, \
        proc.stdout + proc.stderr
    golden = {k: float(v) for k, v in cases["test_golden_memory"][1].items() if k.endswith("_mb")}
    assert golden["rss_peak_mb"] - golden["rss_start_mb"] > 280 and golden["nkicc_added_mb"] < 100, golden
    nkicc = {k: float(v) for k, v in cases["test_nkicc_memory"][1].items() if k.endswith("_mb")}
    assert nkicc["nkicc_added_mb"] > 120, nkicc
    assert cases["test_suite_out_of_memory"][1]["out_of_memory_in"] == "suite"
    assert cases["test_nkicc_out_of_memory"][1]["out_of_memory_in"].startswith("nkicc: nkicc.simulator.")
    assert cases["test_torch_like_out_of_memory"][1]["out_of_memory_in"] == "suite"  # found in the chain
    # the suite's code that nkicc called (the kernel's body, the harness's golden) is the suite's
    assert cases["test_suite_code_under_nkicc_out_of_memory"][1]["out_of_memory_in"] == "suite"
    # a failed item's arrays are not held into the next item (pytest keeps its exception's frames)
    before, after = (float(cases[n][1]["rss_start_mb"]) for n in ("test_golden_then_fails", "test_after_a_failure"))
    assert after - before < 150, (before, after)


LINELESS = '''
def stopped_where_no_line_is():
    raise TimeoutError("a timeout's signal, at an instruction with no line")


stopped_where_no_line_is.__code__ = stopped_where_no_line_is.__code__.replace(co_linetable=b"")


def test_times_out():
    stopped_where_no_line_is()


def test_after_it():
    pass
'''


def test_a_frame_with_no_line_fails_its_item_not_the_session(tmp_path):
    """A traceback frame stopped at an instruction with no line (where a timeout's signal can
    land) made pytest's report raise an INTERNALERROR, which ended the process and every item
    after it; under --nkicc the item fails with its error and the next one runs."""
    root = _suite(tmp_path)
    (root / "test" / "test_lineless.py").write_text(LINELESS)
    proc, xml = _run(root, "--nkicc", "test/test_lineless.py", "--test-mode", "simulation")
    assert "INTERNALERROR" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
    cases = _cases(xml)
    assert {n: s for n, (s, _) in cases.items()} == {"test_times_out": "failure", "test_after_it": "passed"}
