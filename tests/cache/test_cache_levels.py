"""The cache's source level (a warm hit does not trace) and the region
level's cost gate (docs/cache.md). Every test uses its own cache folder;
results are checked against numpy on random data and against a compile
without the cache (IR equality)."""
import gc
import json
import linecache
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nkicc
from tests.support.paths import REPO
from nkicc.cache.store import PROBE
from nkicc.ir import serialize
from nkicc.passes import PassOptions

from tests.support import cache_kernels as ck
from tests.cache.test_cache import load_module, seed_costs

TESTS = REPO / "tests" / "support"  # cache_kernels.py

HELPERS = textwrap.dedent('''
    import nkicc.language as nl

    FACTOR = 2.0


    def scale(t):
        return nl.multiply(t, FACTOR)


    def bump(t):
        return nl.add(t, 1.0)
''')

KERNEL = textwrap.dedent('''
    import nkicc
    import nkicc.language as nl

    import lvl_helpers as h
    from lvl_helpers import bump

    OFFSET = 0.5


    @nkicc.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=nl.add(bump(h.scale(t)), OFFSET))
        return out
''')

# compiles lvl_kernel.k in a new process; checks it against numpy (factor, bump, offset from argv)
WORKER = textwrap.dedent('''
    import json, sys
    import numpy as np
    import nkicc
    from nkicc.ir import serialize
    sys.path.insert(0, sys.argv[1])
    import lvl_kernel
    factor, bump, offset, seed = (float(a) for a in sys.argv[2:6])
    x = np.random.default_rng(int(seed)).standard_normal((128, 64)).astype(np.float32)
    c = nkicc.compile(lvl_kernel.k, x)
    ok = bool(np.allclose(c.run(x), x.astype(np.float64) * factor + bump + offset, rtol=1e-5, atol=1e-5))
    off = nkicc.compile(lvl_kernel.k, x, cache=False)
    print(json.dumps({"cache": c.report["cache"], "trace_s": c.report["trace_s"], "ok": ok,
                      "ir": serialize.dumps(serialize.to_json(c.ir)), "same_as_off": c.ir == off.ir,
                      "traced_same": c.traced_ir == off.traced_ir}))
''')


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A kernel module and a helper module it imports, in their own folder."""
    d = tmp_path / "mods"
    d.mkdir()
    (d / "lvl_helpers.py").write_text(HELPERS)
    (d / "lvl_kernel.py").write_text(KERNEL)
    monkeypatch.syspath_prepend(str(d))
    for name in ("lvl_helpers", "lvl_kernel"):
        sys.modules.pop(name, None)
    yield d
    for name in ("lvl_helpers", "lvl_kernel"):
        sys.modules.pop(name, None)


def in_new_process(cache, mods, factor=2.0, bump=1.0, offset=0.5, seed=0) -> dict:
    env = {**os.environ, "NKICC_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}  # an edit within the same second must not load stale bytecode
    r = subprocess.run([sys.executable, "-c", WORKER, str(mods), str(factor), str(bump), str(offset), str(seed)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def x64(seed=0):
    return np.random.default_rng(seed).standard_normal((128, 64)).astype(np.float32)


def reference(x, factor=2.0, bump=1.0, offset=0.5):
    return x.astype(np.float64) * factor + bump + offset


# --- the source level ----------------------------------------------------------------------------

def test_a_warm_hit_in_a_new_process_skips_the_trace_and_equals_the_cold_compile(cache_dir, modules):
    cold = in_new_process(cache_dir, modules, seed=1)
    assert cold["ok"] and cold["same_as_off"]
    assert (cold["cache"]["source"], cold["cache"]["kernel"]) == ("miss", "miss") and cold["trace_s"] > 0
    warm = in_new_process(cache_dir, modules, seed=2)
    assert (warm["cache"]["source"], warm["cache"]["kernel"]) == ("hit", "hit"), warm["cache"]
    assert warm["trace_s"] == 0.0  # nothing was traced
    assert warm["ok"] and warm["same_as_off"] and warm["traced_same"]  # traced_ir traces on first use
    assert warm["ir"] == cold["ir"]  # the very kernel the cold process compiled


@pytest.mark.parametrize("edit", ["module attribute (h.scale)", "imported name (bump)"])
def test_editing_a_helper_in_another_module_misses(cache_dir, modules, edit):
    assert in_new_process(cache_dir, modules)["cache"]["source"] == "miss"
    assert in_new_process(cache_dir, modules)["cache"]["source"] == "hit"
    helpers = modules / "lvl_helpers.py"
    if edit.startswith("module"):
        helpers.write_text(HELPERS.replace("nl.multiply(t, FACTOR)", "nl.multiply(t, FACTOR + 1.0)"))
        factor, bump = 3.0, 1.0
    else:
        helpers.write_text(HELPERS.replace("nl.add(t, 1.0)", "nl.add(t, 4.0)"))
        factor, bump = 2.0, 4.0
    after = in_new_process(cache_dir, modules, factor=factor, bump=bump, seed=3)
    assert after["cache"]["source"] == "miss" and after["cache"]["kernel"] == "miss", after["cache"]
    assert after["ok"] and after["same_as_off"]


def test_editing_a_global_constant_misses(cache_dir, modules, monkeypatch):
    import lvl_helpers
    import lvl_kernel

    x = x64(4)
    assert nkicc.compile(lvl_kernel.k, x).report["cache"]["source"] == "miss"
    assert nkicc.compile(lvl_kernel.k, x).report["cache"]["source"] == "hit"
    for module, name, value, want in ((lvl_kernel, "OFFSET", 1.5, dict(offset=1.5)),
                                      (lvl_helpers, "FACTOR", -3.0, dict(offset=1.5, factor=-3.0))):
        monkeypatch.setattr(module, name, value)
        c = nkicc.compile(lvl_kernel.k, x)
        assert c.report["cache"]["source"] == "miss", (name, c.report["cache"])
        np.testing.assert_allclose(c.run(x), reference(x, **want), rtol=1e-5, atol=1e-5)
        assert c.ir == nkicc.compile(lvl_kernel.k, x, cache=False).ir
    lvl_kernel.OFFSET, lvl_helpers.FACTOR = 0.5, 2.0  # the first values again: the first entry again
    c = nkicc.compile(lvl_kernel.k, x)
    assert c.report["cache"]["source"] == "hit"
    np.testing.assert_allclose(c.run(x), reference(x), rtol=1e-5, atol=1e-5)


def test_changing_an_argument_spec_or_a_constant_misses(cache_dir, modules):
    import lvl_kernel

    x = x64(5)
    nkicc.compile(lvl_kernel.k, x)
    wide = np.random.default_rng(6).standard_normal((128, 128)).astype(np.float32)
    c = nkicc.compile(lvl_kernel.k, wide)
    assert c.report["cache"]["source"] == "miss" and c.report["cache"]["kernel"] == "miss"
    np.testing.assert_allclose(c.run(wide), reference(wide[:, :64]), rtol=1e-5, atol=1e-5)
    assert nkicc.compile(lvl_kernel.k, wide).report["cache"]["source"] == "hit"
    nkicc.compile(ck.shift, x, amount=1.0)
    c = nkicc.compile(ck.shift, x, amount=2.0)
    assert c.report["cache"]["source"] == "miss"
    np.testing.assert_allclose(c.run(x), x + 2.0, rtol=1e-6)
    assert nkicc.compile(ck.shift, x, amount=1.0).report["cache"]["source"] == "hit"


CELL = textwrap.dedent('''
    import nkicc
    import nkicc.language as nl

    SHIFT = 3.0


    @nkicc.jit
    def cell_kernel(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=nl.subtract(t, SHIFT))
        return out
''')


def run_cell(filename: str) -> dict:
    """Run CELL as IPython runs a notebook cell: compiled under its own file
    name, with its source registered in linecache."""
    linecache.cache[filename] = (len(CELL), None, CELL.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(CELL, filename, "exec"), namespace)
    return namespace


def test_the_same_code_in_a_restarted_notebook_hits_and_points_at_its_new_file(cache_dir):
    x = x64(7)
    before = run_cell("/tmp/ipykernel_1111/2754116102.py")
    assert nkicc.compile(before["cell_kernel"], x).report["cache"]["source"] == "miss"
    after = run_cell("/tmp/ipykernel_2222/2754116102.py")
    c = nkicc.compile(after["cell_kernel"], x)
    assert c.report["cache"]["source"] == "hit", c.report["cache"]
    off = nkicc.compile(after["cell_kernel"], x, cache=False)
    assert c.ir == off.ir  # every location names the new cell's file
    assert "ipykernel_1111" not in repr(c.ir) and "ipykernel_2222" in repr(c.ir)
    assert c.report["notes"] == off.report["notes"]
    np.testing.assert_allclose(c.run(x), x - 3.0, rtol=1e-6)


def test_what_cannot_be_shown_complete_falls_back_to_the_traced_ir_key(cache_dir, tmp_path):
    class Settings:  # an arbitrary object: its attributes can change without a trace of it in the code
        scale = 2.0

    settings = Settings()

    @nkicc.jit
    def configured(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=nl.multiply(t, settings.scale))
        return out

    import nkicc.language as nl
    x = x64(8)
    first = nkicc.compile(configured, x)
    info = first.report["cache"]
    assert info["source"] == "bypass" and "Settings" in info["source_reason"], info
    assert nkicc.compile(configured, x).report["cache"]["kernel"] == "hit"  # the traced-IR key still works
    settings.scale = 5.0
    c = nkicc.compile(configured, x)
    assert c.report["cache"]["kernel"] == "miss"
    np.testing.assert_allclose(c.run(x), x * 5.0, rtol=1e-6)

    # a helper whose source is not available (code made from a string, not in linecache)
    namespace = {"nl": nl}
    exec(compile("def helper(t):\n    return nl.add(t, 2.0)\n", str(tmp_path / "gone.py"), "exec"), namespace)
    helper = namespace["helper"]

    @nkicc.jit
    def uses_helper(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=helper(t))
        return out

    c = nkicc.compile(uses_helper, x)
    assert c.report["cache"]["source"] == "bypass" and "not available" in c.report["cache"]["source_reason"]
    np.testing.assert_allclose(c.run(x), x + 2.0, rtol=1e-6)


def test_a_module_with_state_of_its_own_is_never_keyed(cache_dir):
    import time as time_module

    @nkicc.jit
    def stamped(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=nl.add(t, float(time_module.time() > 0)))
        return out

    import nkicc.language as nl
    x = x64(9)
    c = nkicc.compile(stamped, x)
    assert c.report["cache"]["source"] == "bypass" and "time" in c.report["cache"]["source_reason"]
    np.testing.assert_allclose(c.run(x), x + 1.0, rtol=1e-6)


# --- the region level's cost gate ----------------------------------------------------------------

def edited_stages(tmp_path):
    source = (TESTS / "cache_kernels.py").read_text()
    path = tmp_path / "cache_kernels_edited.py"
    path.write_text(source.replace(ck.STAGE1_LINE, ck.STAGE1_EDIT))
    return load_module(path, "cache_kernels_edited_levels")


def test_region_passes_cheaper_than_a_lookup_step_aside(cache_dir, tmp_path):
    seed_costs(cache_dir, lookup_s=1.0, pass_s_per_stmt=1e-6)  # a lookup dearer than any pass
    x = np.random.default_rng(10).standard_normal((ck.ROWS, ck.COLS)).astype(np.float32)
    nkicc.compile(ck.stages, x)
    c = nkicc.compile(edited_stages(tmp_path).stages, x)
    info = c.report["cache"]
    assert info["kernel"] == "miss" and info["regions_hit"] == 0
    assert info["regions_skipped"] == info["regions_total"] > 0, info
    import diskcache
    raw = diskcache.Cache(str(cache_dir))
    assert not [k for k in raw.iterkeys() if k != PROBE and k.startswith("nkicc-region-")]
    raw.close()
    assert c.ir == nkicc.compile(edited_stages(tmp_path).stages, x, cache=False).ir


@pytest.mark.parametrize("store_s_per_stmt, stored", [(1e-2, False), (1e-7, True)])
def test_a_region_goes_through_the_cache_only_where_its_pass_costs_more_than_storing_it(
        cache_dir, store_s_per_stmt, stored):
    """Every region pass costs 1 ms a statement and a lookup 1 us: each region is worth a lookup.
    Whether it is worth the cache depends on storing it too: at 10 ms a statement (dearer than the
    pass) no region is keyed or stored and each just runs its passes; at 0.1 us every one is
    stored."""
    seed_costs(cache_dir, lookup_s=1e-6, pass_s_per_stmt=1e-3, store_s_per_stmt=store_s_per_stmt)
    x = np.random.default_rng(12).standard_normal((ck.ROWS, ck.COLS)).astype(np.float32)
    c = nkicc.compile(ck.stages, x)
    info = c.report["cache"]
    import diskcache
    raw = diskcache.Cache(str(cache_dir))
    regions = [k for k in raw.iterkeys() if k != PROBE and k.startswith("nkicc-region-")]
    raw.close()
    assert info["regions_total"] > 0
    if stored:
        assert info["regions_skipped"] == 0 and len(regions) > 0, info
    else:
        assert info["regions_skipped"] == info["regions_total"] and not regions, info
    assert c.ir == nkicc.compile(ck.stages, x, cache=False).ir


def test_an_expensive_region_pass_is_served_by_the_cache_after_an_edit(cache_dir, tmp_path):
    from tests.cache import slow_region_plugin as slow

    options = PassOptions(plugins=("tests.cache.slow_region_plugin",))
    x = np.random.default_rng(11).standard_normal((ck.ROWS, ck.COLS)).astype(np.float32)
    edited = edited_stages(tmp_path).stages
    # (no cycle collection inside the timed compiles: with the whole suite's objects alive, one
    # pause there was as long as the lookups this compares)
    gc.collect()
    gc.disable()
    try:
        off = nkicc.compile(edited, x, passes=options, cache=False)
        slow.RUNS.clear()
        nkicc.compile(ck.stages, x, passes=options)  # cold: the slow pass runs on every body, each one stored
        bodies = len(slow.RUNS)
        slow.RUNS.clear()
        c = nkicc.compile(edited, x, passes=options)
    finally:
        gc.enable()
    info = c.report["cache"]
    assert info["kernel"] == "miss"
    # only the edited body and the two blocks around it ran the slow pass again
    assert len(slow.RUNS) <= 3 < bodies, (slow.RUNS, bodies)
    assert info["regions_hit"] >= bodies - 3
    def slow_s(compiled):
        return next(p["s"] for p in compiled.report["passes"] if p["name"] == "slow-identity")

    assert slow_s(c) < 0.5 * slow_s(off), (slow_s(c), slow_s(off))  # lookups cost less than the pass
    assert c.ir == off.ir
    functions = list(ck.STAGE_FUNCTIONS)
    functions[1] = lambda t: t * 5.0
    np.testing.assert_allclose(c.run(x), ck.reference_stages(x, functions), rtol=1e-5, atol=1e-6)


def test_functions_that_share_a_name_are_told_apart(cache_dir):
    # nl.add and nl.subtract are made by one factory (the same qualified name): a kernel that closes
    # over one of them must not hit the other's entry
    import nkicc.language as nl

    def make(op):
        @nkicc.jit
        def apply(x):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
            for j in nl.affine_range(4):
                t = nl.load(x[:, j * 16:(j + 1) * 16])
                nl.store(out[:, j * 16:(j + 1) * 16], value=op(t, 2.0))
            return out
        return apply

    x = x64(12)
    for op, want in ((nl.add, x + 2.0), (nl.subtract, x - 2.0), (nl.multiply, x * 2.0), (nl.add, x + 2.0)):
        c = nkicc.compile(make(op), x)
        np.testing.assert_allclose(c.run(x), want, rtol=1e-6)
    assert c.report["cache"]["source"] == "hit"  # the second nl.add: its own entry again


def test_a_helper_reached_by_a_computed_name_is_keyed(cache_dir, modules):
    import lvl_helpers

    @nkicc.jit
    def dynamic(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=getattr(lvl_helpers, "sc" + "ale")(t))
        return out

    import nkicc.language as nl
    x = x64(13)
    nkicc.compile(dynamic, x)
    assert nkicc.compile(dynamic, x).report["cache"]["source"] == "hit"
    original = lvl_helpers.scale
    lvl_helpers.scale = lvl_helpers.bump  # what getattr finds now
    try:
        c = nkicc.compile(dynamic, x)
        assert c.report["cache"]["source"] == "miss"
        np.testing.assert_allclose(c.run(x), x + 1.0, rtol=1e-6)
    finally:
        lvl_helpers.scale = original


def test_an_attribute_of_a_helper_function_is_keyed(cache_dir):
    import nkicc.language as nl

    def scale(t):
        return nl.multiply(t, scale.factor)

    scale.factor = 2.0

    @nkicc.jit
    def uses_attribute(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=scale(t))
        return out

    x = x64(14)
    nkicc.compile(uses_attribute, x)
    assert nkicc.compile(uses_attribute, x).report["cache"]["source"] == "hit"
    scale.factor = 3.0
    c = nkicc.compile(uses_attribute, x)
    assert c.report["cache"]["source"] == "miss"
    np.testing.assert_allclose(c.run(x), x * 3.0, rtol=1e-6)
