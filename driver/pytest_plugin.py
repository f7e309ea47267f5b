"""pytest plugin: run the NKI Library's own test suite on nkicc.

    pytest --nkicc test/integration --test-mode simulation      (in the library's checkout)

nkicc registers this module under pytest's entry point group `pytest11`; it does
nothing unless `--nkicc` is given (with PYTEST_DISABLE_PLUGIN_AUTOLOAD set:
`-p nkicc.pytest_plugin --nkicc`).
With it, before the suite's conftest is imported:

- the `nki` alias path goes on sys.path (loader.enable_nki_alias, last on it, and
  only when no real `nki` is installed), which serves `nki`, `nki_cpu_simulator`
  (its `nki.cpu_simulate` calls nkicc.suite) and `neuron_dtypes`: each only where
  the vendor's package is absent, since whatever sys.path finds first wins;
- each test runs with nkicc simulating values only (no timing), and the seconds
  nkicc spent (trace and compile; simulate) go into the test's report as
  `user_properties` (`nkicc_compile_s`, `nkicc_simulate_s`, `nkicc_calls`), with
  the item's peak RSS and the most any nkicc call added to it (`rss_start_mb`,
  `rss_peak_mb`, `nkicc_added_mb`: driver/memory_watch.py), and for an item
  that ran out of memory whether nkicc or the suite's own code was running
  (`out_of_memory_in`: "suite", or "nkicc: " and nkicc's innermost function);
- the suite's harness runs its collectives tests (per-rank inputs, N ranks) on
  nkicc's N-rank simulation: the vendor's CPU simulator has no collectives, so
  the harness's simulation path passes a per-rank generator to a one-rank call.
  The plugin wraps `Orchestrator._run_simulator_inference` of the suite's
  `utils/test_orchestrator.py` for those tests and writes each rank's outputs
  where the suite's validator reads them (`output_worker_R/`).
"""
from __future__ import annotations

import gc
import os
import sys
import sysconfig

import pytest

OPTION = "--nkicc"


def pytest_addoption(parser) -> None:
    parser.getgroup("nkicc").addoption(
        OPTION, action="store_true", default=False,
        help="run an NKI test suite (the NKI Library's: --test-mode simulation) on nkicc: nkicc serves nki, "
             "nki_cpu_simulator and neuron_dtypes where they are not installed")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    if not getattr(early_config.known_args_namespace, "nkicc", False):
        return
    # start-up: nkicc (numpy, pluggy, the front end) is imported only when asked for, not by every pytest run
    from .loader import enable_nki_alias

    served = enable_nki_alias()
    early_config.pluginmanager.register(SuiteRunner(served), "nkicc-suite")


class SuiteRunner:
    """The hooks of a `--nkicc` session."""

    def __init__(self, served: bool) -> None:
        self.served = served  # False: a real nki is installed, and the suite runs on it

    def pytest_report_header(self, config) -> str:
        where = "nkicc serves nki, nki_cpu_simulator, neuron_dtypes where absent" if self.served \
            else "a real nki is installed: nkicc serves nothing"
        return f"nkicc: {where}"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        from .api import RUN_SETTINGS, RunSettings
        from .memory_watch import MemoryWatch
        from .suite import nkicc_seconds

        _route_collectives()
        settings = RunSettings(timing=False, memory=MemoryWatch())
        token = RUN_SETTINGS.set(settings)
        try:
            yield
        finally:
            RUN_SETTINGS.reset(token)
            compile_s, simulate_s = nkicc_seconds(settings.records)
            item.user_properties += [("nkicc_compile_s", round(compile_s, 4)),
                                     ("nkicc_simulate_s", round(simulate_s, 4)),
                                     ("nkicc_calls", len(settings.records)),
                                     *settings.memory.finish().items()]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None:
            _drop_lineless_frames(call.excinfo)
        yield
        oom = _out_of_memory(call.excinfo.value) if call.when == "call" and call.excinfo is not None else None
        if oom is not None:
            # (junit's properties are the teardown report's, which copies the item's)
            where = _nkicc_frame(oom.__traceback__)
            item.user_properties.append(("out_of_memory_in", f"nkicc: {where}" if where else "suite"))

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item, nextitem) -> None:
        # pytest keeps a failed item's exception for post-mortem debugging (sys.last_value) until
        # the next item's call, and its frames, which hold the item's arrays, sit in reference
        # cycles that only the cyclic collector frees: a golden of several GB would still be held
        # while the next item makes its own (seen as items failing on a 6 MiB allocation)
        if not hasattr(sys, "last_value"):
            return  # (a passed item leaves nothing behind: no collection, which costs time per item)
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()


def _drop_lineless_frames(excinfo) -> None:
    """Unlink from a failure's tracebacks (its exception's and the ones it was raised from)
    the frames stopped at an instruction with no line (tb_lineno None: a timeout's signal can
    land on one). pytest's report of such a frame raises an INTERNALERROR that ends the
    session, so an item that timed out cost every item after it in its process."""
    exc, seen = excinfo.value, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            if tb.tb_next.tb_lineno is None:
                tb.tb_next = tb.tb_next.tb_next  # (writable: the chain pytest's cut() follows)
            else:
                tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    excinfo.traceback = type(excinfo.traceback)(excinfo.tb)


def _out_of_memory(exc: BaseException | None) -> BaseException | None:
    """The exception in `exc`'s chain that ran out of memory: numpy's MemoryError, or torch's
    allocator refusing (a RuntimeError); the suite's harness re-raises both as its own."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _nkicc_frame(tb) -> str | None:
    """nkicc's function (module.function) when nkicc's code was the last of nkicc's and the
    suite's to run before the exception was raised; None when the suite's was. nkicc's code: its
    packages and the modules it serves as nki, nki_cpu_simulator and neuron_dtypes. The suite's:
    any other code outside the installed packages and the standard library (its golden, which
    nkicc's collectives runner calls, is the suite's). Installed packages (numpy, torch) act for
    whoever called them."""
    alias = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_nki_alias") + os.sep
    paths = sysconfig.get_paths()
    installed = tuple({os.path.abspath(paths[k]) + os.sep for k in ("purelib", "platlib", "stdlib")})
    found = None
    while tb is not None:
        frame = tb.tb_frame
        name = frame.f_globals.get("__name__", "")
        path = os.path.abspath(frame.f_code.co_filename)
        if name == "nkicc" or name.startswith("nkicc.") or path.startswith(alias):
            found = f"{name}.{frame.f_code.co_name}"
        elif not path.startswith(installed) and not frame.f_code.co_filename.startswith("<"):
            found = None
        tb = tb.tb_next
    return found


def _route_collectives() -> None:
    """Wrap the suite's simulation path once its harness module is imported."""
    for name, module in list(sys.modules.items()):
        if not name.endswith("utils.test_orchestrator"):
            continue
        orchestrator = getattr(module, "Orchestrator", None)
        original = getattr(orchestrator, "_run_simulator_inference", None)
        if original is None or getattr(original, "_nkicc_ranks", False):
            continue
        orchestrator._run_simulator_inference = _ranked(original, module)


def _ranked(original, harness):
    def _run_simulator_inference(self, kernel_under_test):
        ranks = getattr(getattr(kernel_under_test, "inference_args", None), "collective_ranks", 1) or 1
        inputs = kernel_under_test.kernel_input
        if ranks <= 1 and not hasattr(inputs, "for_rank"):
            return original(self, kernel_under_test)
        try:
            return _simulate_ranks(self, kernel_under_test, ranks, harness)
        except Exception as exc:  # reported as the suite reports a failed run
            raise harness.InferenceException(str(exc)) from exc
    _run_simulator_inference._nkicc_ranks = True
    return _run_simulator_inference


def _simulate_ranks(orchestrator, kernel_under_test, ranks: int, harness) -> str:
    """Run a collectives test on `ranks` ranks; write rank R's outputs to
    INF_DIR/output_worker_R/ by the golden's names. Returns INF_DIR."""
    import numpy as np

    from .suite import NC_VERSION_ENV, run_ranks

    compiler_input = kernel_under_test.compiler_input
    os.environ[NC_VERSION_ENV] = compiler_input.platform_target.get_nc_gen()
    inputs = kernel_under_test.kernel_input or {}
    by_rank = [inputs.for_rank(r) if hasattr(inputs, "for_rank") else inputs for r in range(ranks)]
    by_rank = [{k.removesuffix(".must_alias_input"): v for k, v in d.items()} for d in by_rank]
    outputs = run_ranks(kernel_under_test.kernel_func, by_rank, compiler_input.logical_nc_config)
    golden_output = kernel_under_test.validation_args.golden_output
    root = orchestrator._dump_output_tensors({})
    for rank, values in enumerate(outputs):
        golden = harness.normalize_golden_output(golden_output, rank)
        if len(values) != len(golden):
            raise RuntimeError(f"rank {rank}: the kernel returned {len(values)} outputs, the golden has "
                               f"{len(golden)} ({', '.join(golden)})")
        named = {name: np.asarray(value, dtype=getattr(g, "dtype", None))
                 for name, value, g in zip(golden, values, golden.values())}
        orchestrator.__dump_tensors__(os.path.join(root, f"output_worker_{rank}"), named, lambda n: n)
    return root
