"""A launch whose programs meet (kernel[2] with sendrecv / core_barrier) compiles one program
per core: the trace of the whole grid stops at the first meeting, each core's trace starts from
what the traces before it learned, and the compile cache remembers that the programs meet."""
import numpy as np

import nkicc
import nkicc.api as api
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.cache.store import forget_stores


@nkicc.jit
def scale_one_quarter_then_swap(x):
    """Each core scales the third of its four column blocks (a Python branch on the loop index:
    the trace splits the loop), then the cores swap halves and meet at a barrier."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    for i in range(4):
        cols = nl.load(x[pid * 64:(pid + 1) * 64, i * 8:(i + 1) * 8])
        if i == 2:
            cols = nl.multiply(cols, 3.0)
        nisa.tensor_copy(dst=mine[:, i * 8:(i + 1) * 8], src=cols)
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


def expected(x):
    scaled = x.copy()
    scaled[:, 16:24] *= 3.0
    return np.concatenate([scaled[64:], scaled[:64]])


class TraceCounter:
    """Counts the traces nkicc makes (the real ones: it wraps trace_kernel, changes nothing)."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = api.trace_kernel

        def counted(*args, **kw):
            try:
                result = real(*args, **kw)
            except BaseException as exc:
                self.calls.append((kw.get("program"), type(exc).__name__))
                raise
            self.calls.append((kw.get("program"), result.attempts))
            return result
        monkeypatch.setattr(api, "trace_kernel", counted)


def test_meeting_programs_are_traced_one_core_at_a_time_from_what_was_learned(rng, monkeypatch):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    traces = TraceCounter(monkeypatch)
    ck = nkicc.compile(scale_one_quarter_then_swap[2], x, cache=False)
    assert ck.report["cores"] == 2 and ck.report["grid"] == [2]
    # the whole grid's trace stopped at the sendrecv, having learned the split; no core retraces
    assert traces.calls == [(None, "MeetsOtherCores"), ((0,), 1), ((1,), 1)]
    assert ck.ir is ck.cores[0].ir  # (no program of the whole grid was made)
    np.testing.assert_array_equal(ck.run(x), expected(x))
    # the oracle: each core traced from nothing gives the same program's results
    fresh = [api._compile(scale_one_quarter_then_swap.fn, ck.specs, {}, None, cache=False, grid=(2,), program=(p,))
             for p in range(2)]
    assert [c.trace.attempts for c in fresh] == [2, 2]
    launch = ck.cores
    ck.cores = fresh
    np.testing.assert_array_equal(ck.run(x), expected(x))
    ck.cores = launch


def test_the_cache_remembers_that_a_launchs_programs_meet(rng, monkeypatch, tmp_path):
    monkeypatch.setenv("NKICC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NKICC_CACHE", raising=False)
    forget_stores()
    try:
        x = rng.standard_normal((128, 32)).astype(np.float32)
        cold = nkicc.compile(scale_one_quarter_then_swap[2], x)
        traces = TraceCounter(monkeypatch)
        warm = nkicc.compile(scale_one_quarter_then_swap[2], x)
        assert traces.calls == []  # neither the grid nor a core was traced again
        assert [c.report["cache"]["source"] for c in warm.cores] == ["hit", "hit"]
        assert [c.ir for c in warm.cores] == [c.ir for c in cold.cores]
        np.testing.assert_array_equal(warm.run(x), expected(x))
    finally:
        forget_stores()


def test_a_launch_reads_the_callers_arrays_that_no_core_writes(rng):
    """An input no core writes is the caller's own array in every core's HBM, not a copy per
    launch (a KV cache on each of 8 KVDP ranks); the result is the same."""
    x = rng.standard_normal((128, 32)).astype(np.float32)
    ck = nkicc.compile(scale_one_quarter_then_swap[2], x, cache=False)
    _, _, shared = ck._shared_hbm({"x": x}, precise=True)
    assert all(core["x"] is x for core in shared)
    before = x.copy()
    np.testing.assert_array_equal(ck.run(x), expected(x))
    np.testing.assert_array_equal(x, before)
    # a strided view is copied (the simulators read HBM arrays flat, and reinterpret their bytes)
    wide = np.zeros((128, 64), dtype=np.float32)
    wide[:, ::2] = x
    np.testing.assert_array_equal(ck.run(wide[:, ::2]), expected(x))


@nkicc.jit
def core_one_reads_past_its_input(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    if pid == 1:
        theirs = nl.load(x[64:192, :])  # rows 128-191 do not exist
    nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
    return out


def test_an_error_in_one_cores_program_is_reported_as_itself(rng):
    """The grid's trace stops at the sendrecv, before core 1's mistake; core 1's own trace
    finds it: one error, E101 at the kernel's line, not wrapped in the stop that led there."""
    import pytest
    from nkicc.ir import NkiccError
    x = rng.standard_normal((128, 32)).astype(np.float32)
    with pytest.raises(NkiccError) as caught:
        nkicc.compile(core_one_reads_past_its_input[2], x, cache=False)
    assert caught.value.code == "E101" and caught.value.loc.file == __file__
    assert caught.value.__context__ is None


def test_a_calls_compile_seconds_cover_every_cores_trace_and_pipeline(rng, monkeypatch):
    """The record `nkicc run` and the suite runner read: a fresh launch's compile seconds are at
    least what each core's own report says it spent tracing and compiling (oracle: the reports),
    not core 0's pipeline alone; a call that reuses the compiled kernel spent none."""
    monkeypatch.setenv("NKICC_CACHE", "0")
    settings = api.RunSettings(timing=False)
    token = api.RUN_SETTINGS.set(settings)
    try:
        x = rng.standard_normal((128, 32)).astype(np.float32)
        launch = scale_one_quarter_then_swap[2]
        np.testing.assert_allclose(launch(x), expected(x), rtol=1e-6)
        launch(x)
    finally:
        api.RUN_SETTINGS.reset(token)
    first, again = settings.records
    compiled = launch.compiled[-1]
    spent = sum(core.trace.seconds + core.compile_s for core in compiled.cores)
    assert len(compiled.cores) == 2 and first["compiled_now"]
    assert first["compile_s"] >= spent > compiled.cores[0].compile_s
    assert not again["compiled_now"] and again["compile_s"] == 0.0


def test_the_simulators_of_a_launch_are_freed_when_it_ends(rng, monkeypatch):
    """Each core's simulator is made for one run: once the launch returns nothing holds it, not
    even a reference cycle that only a collection would find (400 k objects on the library's
    attention block). Cyclic collection is off here, so a cycle would keep it alive."""
    import gc
    import weakref
    import nkicc.simulator.ranks as ranks
    made = []

    class Recorded(ranks.MachineSimulator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr(ranks, "MachineSimulator", Recorded)
    x = rng.standard_normal((128, 32)).astype(np.float32)
    launch = nkicc.compile(scale_one_quarter_then_swap[2], x, cache=False)
    was = gc.isenabled()
    gc.disable()
    try:
        np.testing.assert_allclose(launch.run(x), expected(x), rtol=1e-6)
        assert len(made) == 2 and all(ref() is None for ref in made)
    finally:
        if was:
            gc.enable()
