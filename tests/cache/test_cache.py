"""The compile cache (nkicc.cache, docs/cache.md): keys, levels, the store,
statistics, and what it does when things go wrong. Every test uses its own
cache folder (never the user's)."""
import dataclasses
import json
import linecache
import math
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nkicc
from tests.support.paths import REPO, WORKLOADS, needs_workloads
from nkicc.cache import env as cache_env
from nkicc.cache.format import CorruptEntry, pack, unpack
from nkicc.cache.store import PROBE, Store, forget_stores, parse_size
from nkicc.cached import kernel_key
from nkicc.ir import Access, Affine, Block, Const, Kernel, Loc, Op, TensorDecl, exact_hash, kernel_hash
from nkicc.ir.serialize import Unserialisable, dumps, dumps_table, from_json, loads, loads_table, to_json
from nkicc.passes import PassOptions, registry

from tests.support import cache_kernels as ck

TESTS = REPO / "tests" / "support"  # cache_kernels.py


def stats(d) -> dict:
    from nkicc.cache.stats import Counters
    return Counters(str(d)).read()


def raw_cache(d):
    import diskcache
    return diskcache.Cache(str(d))


def x_stages(seed=0):
    return np.random.default_rng(seed).standard_normal((ck.ROWS, ck.COLS)).astype(np.float32)


def load_module(path: pathlib.Path, name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed_costs(cache_dir, lookup_s: float, pass_s_per_stmt: float, store_s_per_stmt: float | None = None) -> None:
    """Pretend earlier compiles measured these costs (the counters the region
    level's gate reads: docs/cache.md)."""
    from nkicc.cache.stats import Counters
    costs = {"cost.lookup.s": lookup_s, "cost.lookup.n": 1}
    if store_s_per_stmt is not None:
        costs.update({"cost.store.s": store_s_per_stmt, "cost.store.stmts": 1})
    for p in registry().passes.values():
        if p.scope == "region":
            costs[f"cost.{p.name}.s"] = pass_s_per_stmt
            costs[f"cost.{p.name}.stmts"] = 1
    forget_stores()
    os.makedirs(cache_dir, exist_ok=True)
    counters = Counters(str(cache_dir))
    counters.add(costs)
    counters.close()


def force_region_level(cache_dir) -> None:
    """Every region pass dearer than a lookup: every region is looked up and stored."""
    seed_costs(cache_dir, lookup_s=1e-9, pass_s_per_stmt=1.0)


def subprocess_env(cache: pathlib.Path, **extra) -> dict:
    return {**os.environ, "NKICC_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1",
            **extra}


# --- the IR's exact JSON form and its hashes -------------------------------------------------

def test_ir_serialisation_round_trips_exactly(cache_dir):
    compiled = nkicc.compile(ck.stages, x_stages())
    a_t, b = np.ones((256, 128), np.float32), np.ones((256, 64), np.float32)
    for ir in (compiled.traced_ir, compiled.ir, nkicc.compile(ck.matmul_acc, a_t, b).ir):
        text = dumps(to_json(ir))
        assert from_json(json.loads(text)) == ir
        assert loads(text) == ir
        table = dumps_table(ir)  # the cache entries' form: each distinct node once
        assert loads_table(table) == ir
        assert dumps(to_json(loads_table(table))) == text  # every field's type too
    # values keep their types: numpy scalars, non-finite floats, tuples vs lists, bools vs ints
    attrs = (("f32", np.float32(0.1)), ("nan", math.nan), ("inf", -math.inf), ("t", (1, "a", None)),
             ("l", [1, 2.5]), ("d", {"k": (True, 0)}), ("b", True), ("i", 1), ("s", "1"))
    op = Op("x", (Access("t", Affine((("i", 2),), 3), ((1, 4),)),), (Const(np.int32(7)), Const(1.0)), attrs,
            Loc("f.py", 3))
    # (the table form too: its dedup must not merge 1, 1.0 and True, which compare equal)
    same = Op("y", (), (Const(1), Const(1.0), Const(True), Const(np.int32(1))), (("a", 1), ("b", 1.0), ("c", True)))
    for back in (loads(dumps(to_json(op))), loads_table(dumps_table(op))):
        for (k, v), (k2, v2) in zip(op.attrs, back.attrs):
            assert k == k2 and type(v) is type(v2)
            assert (math.isnan(v) and math.isnan(v2)) if k == "nan" else v == v2
        assert [type(c.value) for c in back.ins] == [np.int32, float]
    back = loads_table(dumps_table(same))
    assert [type(c.value) for c in back.ins] == [int, float, bool, np.int32]
    assert [type(v) for _, v in back.attrs] == [int, float, bool]
    with pytest.raises(Unserialisable):
        to_json(Op("x", (), (), (("obj", object()),)))


def _kernel(attr_value=1, outputs=("o1", "o2"), dtype="float32", name="k", tname="a"):
    decls = (TensorDecl(tname, (128, 4), dtype, "hbm", "arg"), TensorDecl("o1", (128, 4), "float32", "shared_hbm", "output"),
             TensorDecl("o2", (128, 4), "float32", "shared_hbm", "output"))
    acc = lambda t: Access(t, Affine(), ((4, 128), (1, 4)))  # noqa: E731
    body = Block((Op("dma_copy", (acc("o1"),), (acc(tname),), (("n", attr_value),)),
                  Op("dma_copy", (acc("o2"),), (acc(tname),))))
    return Kernel(name, decls, (tname,), outputs, body)


def test_kernel_hash_covers_everything_that_changes_output():
    base = _kernel()
    assert kernel_hash(base) == kernel_hash(_kernel(name="other", tname="b"))  # names do not count ...
    assert exact_hash(base) != exact_hash(_kernel(name="other", tname="b"))   # ... except in the exact hash
    for variant in (_kernel(attr_value="1"), _kernel(attr_value=1.0), _kernel(attr_value=True),
                    _kernel(outputs=("o2", "o1")), _kernel(dtype="bfloat16")):
        assert kernel_hash(variant) != kernel_hash(base)


def test_the_canonical_renaming_knows_every_ir_field():
    from nkicc.ir.hash import unknown_fields
    assert unknown_fields() == [], "teach ir/hash.py (KNOWN_FIELDS, Renaming) and ir/canon.py the new fields"


def test_every_environment_variable_read_is_classified():
    roots = [REPO / d for d in ("driver", "ir", "language", "plugins", "cache", "simulator", "tests", "bench")]
    assert cache_env.unclassified([r for r in roots if r.is_dir()]) == {}
    # the scanner sees the forms nkicc uses
    sample = 'import os\nNAME = "X_A"\nos.environ.get(NAME)\nos.getenv("X_B")\nos.environ["X_C"]\n"X_D" in os.environ\n'
    assert [n for n, _ in cache_env.reads_in_source(sample)] == ["X_A", "X_B", "X_C", "X_D"]
    key_vars = {n for n, (kind, _) in cache_env.ENV.items() if kind == cache_env.KEY}
    assert {"NEURON_PLATFORM_TARGET_OVERRIDE", "NKICC_DISABLE_PLUGIN_AUTOLOAD"} <= key_vars


# --- keys ----------------------------------------------------------------------------------------

def test_key_changes_with_pass_version_enabled_passes_target_and_env(cache_dir, monkeypatch):
    force_region_level(cache_dir)
    traced = nkicc.compile(ck.stages, x_stages()).traced_ir
    reg = registry()
    k = kernel_key(traced)
    assert k == kernel_key(traced)
    licm = reg.passes["licm"]
    bumped = dataclasses.replace(reg, passes={**reg.passes, "licm": dataclasses.replace(licm, version="999")})
    others = {
        "pass version": kernel_key(traced, reg=bumped),
        "disabled pass": kernel_key(traced, PassOptions(disable=("licm",))),
        "enabled pass": kernel_key(traced, PassOptions(enable=("global-schedule",))),
        "opt level": kernel_key(traced, PassOptions(opt_level=0)),
        "target": kernel_key(traced, PassOptions(target="trn1")),
    }
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    others["key env var"] = kernel_key(traced)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    assert len({k, *others.values()}) == len(others) + 1, others
    # observing options do not change the key
    assert kernel_key(traced, PassOptions(max_compile_time=5.0)) == k

    # a new pass version misses at the region level too (for that pass only)
    nkicc.compile(ck.stages, x_stages())
    again = nkicc.compile(ck.stages, x_stages(), passes=PassOptions(disable=("dma-coalesce",)))
    assert again.report["cache"]["kernel"] == "miss"
    c = again.report["cache"]
    assert c["regions_hit"] == c["regions_total"] > 0  # the same bodies: every region hits
    from nkicc import cached
    plan = cached.CachePlan.prepare(PassOptions(), bumped, nkicc.api.resolve_target(None, bumped))
    plan.pipeline(traced)
    info = plan.finish()
    assert info["kernel"] == "miss"
    per_pass = info["regions_total"] // 4
    assert info["regions_hit"] == info["regions_total"] - per_pass  # licm's regions miss, the others hit


def test_same_source_different_constants_never_share_an_entry(cache_dir):
    x = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    one, two = ck.make_scaled(1.0), ck.make_scaled(2.0)  # same source, different closure constant
    for k, offset in ((one, 1.0), (two, 2.0), (one, 1.0), (two, 2.0)):
        c = nkicc.compile(k, x)
        np.testing.assert_allclose(c.run(x), x * ck.SCALE + offset, rtol=1e-6)
    assert stats(cache_dir)["kernel.miss"] == 2 and stats(cache_dir)["kernel.hit"] == 2
    kernels = [key for key in raw_cache(cache_dir).iterkeys() if key.startswith("nkicc-kernel-")]
    assert len(kernels) == 2
    # a global constant is baked in too
    try:
        ck.SCALE = 3.0
        c = nkicc.compile(one, x)
        assert c.report["cache"]["kernel"] == "miss"
        np.testing.assert_allclose(c.run(x), x * 3.0 + 1.0, rtol=1e-6)
    finally:
        ck.SCALE = 2.0
    # and so is a constant argument
    for amount in (1.0, 2.0, 1.0, 2.0):
        c = nkicc.compile(ck.shift, x, amount=amount)
        np.testing.assert_allclose(c.run(x), x + amount, rtol=1e-6)
    assert stats(cache_dir)["kernel.miss"] == 5 and stats(cache_dir)["kernel.hit"] == 4


# --- the two levels -------------------------------------------------------------------------------

def test_second_compile_is_a_kernel_hit_with_the_same_result(cache_dir):
    x = x_stages()
    cold = nkicc.compile(ck.stages, x)
    warm = nkicc.compile(ck.stages, x)
    assert (cold.report["cache"]["kernel"], warm.report["cache"]["kernel"]) == ("miss", "hit")
    assert warm.ir == cold.ir
    for key in ("pipeline", "passes", "notes", "warnings", "instructions_compiled"):
        assert warm.report[key] == cold.report[key], key
    np.testing.assert_allclose(warm.run(x), ck.reference_stages(x), rtol=1e-5, atol=1e-6)
    off = nkicc.compile(ck.stages, x, cache=False)
    assert off.report["cache"] == {"kernel": "bypass", "regions_hit": 0, "regions_total": 0, "saved_s": 0.0,
                                   "source": "bypass", "regions_skipped": 0,
                                   "reason": "disabled (--no-cache)"}
    assert off.ir == warm.ir


def test_editing_one_loop_body_hits_most_regions_and_stays_exact(cache_dir, tmp_path):
    force_region_level(cache_dir)  # (the built-in passes are cheaper than a lookup: they would step aside)
    x = x_stages(2)
    source = (TESTS / "cache_kernels.py").read_text()
    assert source.count(ck.STAGE1_LINE) == 1
    edited_path = tmp_path / "cache_kernels_edited.py"
    edited_path.write_text(source.replace(ck.STAGE1_LINE, ck.STAGE1_EDIT))
    edited = load_module(edited_path, "cache_kernels_edited")

    nkicc.compile(ck.stages, x)
    c = nkicc.compile(edited.stages, x)
    info = c.report["cache"]
    assert info["kernel"] == "miss"
    assert info["regions_hit"] >= 0.8 * info["regions_total"] > 0, info
    # a region hit gives exactly the IR the pass would have produced
    assert c.ir == nkicc.compile(edited.stages, x, cache=False).ir
    functions = list(ck.STAGE_FUNCTIONS)
    functions[1] = lambda t: t * 5.0
    np.testing.assert_allclose(c.run(x), ck.reference_stages(x, functions), rtol=1e-5, atol=1e-6)


def test_observing_options_bypass_the_kernel_level(cache_dir):
    force_region_level(cache_dir)
    x = x_stages()
    nkicc.compile(ck.stages, x)
    c = nkicc.compile(ck.stages, x, passes=PassOptions(time_passes=True))
    assert c.report["cache"]["kernel"] == "bypass" and c.report["cache"]["reason"] == "time-passes"
    assert c.report["cache"]["regions_hit"] == c.report["cache"]["regions_total"] > 0
    printed = []
    from nkicc.specs import TensorSpec
    from nkicc.language.kernel_trace import inspect_unwrap
    c = nkicc.api._compile(inspect_unwrap(ck.stages.fn), {"x": TensorSpec.parse("float32[256,32]")}, {}, None,
                           passes=PassOptions(print_ir_after=("licm",)), printer=printed.append)
    assert c.report["cache"]["reason"] == "print-ir" and len(printed) == 1


# --- damaged entries, pickles, an unusable store -------------------------------------------------

@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_entries_are_misses_evicted_and_counted(cache_dir, damage):
    force_region_level(cache_dir)  # every region is looked up (and so read) on the second compile
    x = x_stages()
    first = nkicc.compile(ck.stages, x)
    raw = raw_cache(cache_dir)
    keys = [k for k in raw.iterkeys() if k != PROBE]
    for key in keys:
        blob = raw.get(key)
        if damage == "flip":
            i = len(blob) - 7
            blob = blob[:i] + bytes([blob[i] ^ 0x40]) + blob[i + 1:]
        else:
            blob = blob[: len(blob) // 2]
        raw.set(key, blob)
    raw.close()
    forget_stores()
    again = nkicc.compile(ck.stages, x)
    info = again.report["cache"]
    assert info["kernel"] == "miss" and info["regions_hit"] == 0
    assert again.ir == first.ir
    assert stats(cache_dir)["corrupt"] == len(keys)  # each damaged entry was read once
    raw = raw_cache(cache_dir)
    for key in keys:  # evicted, then written again by the recompile: good entries now
        unpack(raw.get(key), key.split("-")[1], key)
    assert nkicc.compile(ck.stages, x).report["cache"]["kernel"] == "hit"


def test_entry_format_checks_header_length_checksum_and_key():
    blob = pack("region", "nkicc-region-k", {"s": 0.5, "out": {"refblock": []}})
    assert unpack(blob, "region", "nkicc-region-k")[0]["s"] == 0.5
    for bad, kind, key in ((blob, "kernel", "nkicc-region-k"), (blob, "region", "nkicc-region-other"),
                           (blob[:-1], "region", "nkicc-region-k"), (b"junk", "region", "nkicc-region-k"),
                           (blob.replace(b"nkicc-cache 1", b"nkicc-cache 9"), "region", "nkicc-region-k")):
        with pytest.raises(CorruptEntry):
            unpack(bad, kind, key)


def test_a_pickled_entry_is_never_unpickled(cache_dir, tmp_path):
    x = x_stages()
    nkicc.compile(ck.stages, x)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (pathlib.Path.touch, (marker,))

    raw = raw_cache(cache_dir)
    for key in list(raw.iterkeys()):
        raw.set(key, Evil())  # diskcache pickles a non-bytes value
    raw.close()
    forget_stores()
    c = nkicc.compile(ck.stages, x)
    assert c.report["cache"]["kernel"] == "miss"
    assert not marker.exists()
    assert stats(cache_dir)["corrupt"] >= 1


def test_unwritable_cache_degrades_to_no_cache_with_one_warning(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("NKICC_CACHE_DIR", str(blocker / "cache"))
    forget_stores()
    x = x_stages()
    for _ in range(2):
        c = nkicc.compile(ck.stages, x)
        assert c.report["cache"]["kernel"] == "bypass" and c.report["cache"]["reason"] == "cache unusable"
        np.testing.assert_allclose(c.run(x), ck.reference_stages(x), rtol=1e-5, atol=1e-6)
    err = capfd.readouterr().err
    assert err.count("warning[W501]") == 1 and "compiling without it" in err
    forget_stores()


def test_a_full_disk_degrades_to_no_cache_with_one_warning(cache_dir, monkeypatch, capfd):
    from nkicc.cache.store import open_store
    store = open_store()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.backend, "set", full)
    x = x_stages()
    c = nkicc.compile(ck.stages, x)
    np.testing.assert_allclose(c.run(x), ck.reference_stages(x), rtol=1e-5, atol=1e-6)
    assert not store.usable and "No space left" in store.off
    c = nkicc.compile(ck.stages, x)
    assert c.report["cache"]["reason"] == "cache unusable"
    assert capfd.readouterr().err.count("warning[W501]") == 1


def test_size_limit_evicts_least_recently_used(cache_dir, monkeypatch):
    monkeypatch.setenv("NKICC_CACHE_SIZE", "64KB")
    force_region_level(cache_dir)  # (region entries too: more bytes)
    x = np.ones((128, 64), np.float32)
    for offset in range(6):
        nkicc.compile(ck.make_scaled(float(offset)), x)
    s = stats(cache_dir)
    assert s["evictions"] > 0
    raw = raw_cache(cache_dir)
    assert raw.volume() <= 64 * 1024 + 16 * 1024  # the limit, give or take a database page or two
    assert parse_size("500MB") == 500 * 2**20 and parse_size("2GiB") == 2 * 2**30 and parse_size("123") == 123


# --- processes -------------------------------------------------------------------------------------

WORKER = textwrap.dedent('''
    import json, sys
    import numpy as np
    import nkicc
    from tests.support import cache_kernels as ck

    order = [int(c) for c in sys.argv[1]]
    rng = np.random.default_rng(int(sys.argv[2]))
    reports = []
    for which in order:
        if which == 0:
            x = rng.standard_normal((256, 32)).astype(np.float32)
            c = nkicc.compile(ck.stages, x)
            ok = np.allclose(c.run(x), ck.reference_stages(x), rtol=1e-5, atol=1e-6)
        elif which == 1:
            a, b = rng.standard_normal((256, 128)).astype(np.float32), rng.standard_normal((256, 64)).astype(np.float32)
            c = nkicc.compile(ck.matmul_acc, a, b)
            ok = np.allclose(c.run(a, b), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
        else:
            x = rng.standard_normal((128, 64)).astype(np.float32)
            c = nkicc.compile(ck.make_scaled(float(which)), x)
            ok = np.allclose(c.run(x), x * ck.SCALE + which, rtol=1e-6)
        reports.append({"ok": bool(ok), **c.report["cache"]})
    print(json.dumps(reports))
''')


def test_eight_processes_share_one_cache(cache_dir):
    orders = ["0123", "1230", "2301", "3012", "0213", "1302", "2130", "3201"]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, order, str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=subprocess_env(cache_dir))
             for i, order in enumerate(orders)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "W501" not in err and "Traceback" not in err, err
        reports.extend(json.loads(out))
    assert len(reports) == 32 and all(r["ok"] for r in reports)
    s = stats(cache_dir)
    assert s["compiles"] == 32
    assert s.get("kernel.hit", 0) + s.get("kernel.miss", 0) + s.get("kernel.bypass", 0) == 32
    assert s.get("kernel.hit", 0) == sum(r["kernel"] == "hit" for r in reports)
    assert s.get("region.hit", 0) == sum(r["regions_hit"] for r in reports)
    assert (s.get("region.hit", 0) + s.get("region.miss", 0) + s.get("region.bypass", 0)
            + s.get("region.skipped", 0) == sum(r["regions_total"] for r in reports))
    assert s.get("region.skipped", 0) == sum(r["regions_skipped"] for r in reports)
    assert s.get("corrupt", 0) == 0


KILLED_WRITER = textwrap.dedent('''
    import sys
    import numpy as np
    import nkicc
    from tests.support import cache_kernels as ck
    from nkicc.cache.format import pack
    from nkicc.cache.store import open_store
    x = np.ones((128, 64), np.float32)
    store = open_store()
    print("ready", flush=True)
    i = 0
    while True:  # compiles and large writes until killed
        i += 1
        nkicc.compile(ck.make_scaled(float(i)), x)
        big = [(f"nkicc-region-big{i}-{j}", f"nkicc-region-big{i}-{j}") for j in range(5)]
        print("writing", i, flush=True)  # the test kills it on the third of these: mid-write
        store.put_many([(k, pack("region", k, {"pad": "x" * 200_000})) for k, _ in big])
''')


def test_a_writer_killed_mid_write_leaves_a_usable_cache(cache_dir):
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=subprocess_env(cache_dir))
    assert p.stdout.readline().strip() == "ready"
    for i in (1, 2, 3):  # two compiles and writes done, the third write under way
        assert p.stdout.readline().split() == ["writing", str(i)]
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    forget_stores()
    x = x_stages()
    for expected in ("miss", "hit"):
        c = nkicc.compile(ck.stages, x)
        assert c.report["cache"]["kernel"] == expected
        np.testing.assert_allclose(c.run(x), ck.reference_stages(x), rtol=1e-5, atol=1e-6)
    s = Store(str(cache_dir))
    assert s.usable
    s.prune(None)  # reads every entry back
    assert s.counters.read().get("corrupt", 0) == 0
    s.close()


def _seed_worker(reports: pathlib.Path) -> str:
    return textwrap.dedent(f'''
        import json, sys
        from nkicc.api import _compile
        from nkicc.cli import _resolve
        W = {str(WORKLOADS)!r}
        MM = ["At=float32[4096,32768]", "B=float32[4096,16384]", "D=float32[16384,4096]"]
        seeds = [(W + "/seed_mm2_static.py::mm2", MM), (W + "/seed_mm2_dynamic.py::mm2", MM),
                 (W + "/seed_einsum_affine.py::compute_einsum",
                  ["A=float32[32768,4096]", "B=float32[4096,16384]", "C=float32[1,1]", "D=float32[16384,4096]"])]
        out = []
        for target, args in seeds:
            fn, specs, consts = _resolve(target, args, [])
            c = _compile(fn, specs, consts, None)
            out.append({{"seed": target, "compile_s": c.report["compile_s"], "trace_s": c.report["trace_s"],
                         **c.report["cache"]}})
        open({str(reports)!r}, "w").write(json.dumps(out))
    ''')


@needs_workloads
def test_full_size_seeds_hit_in_a_new_process_at_a_tenth_of_the_cold_compile(cache_dir, tmp_path):
    def run(i):
        path = tmp_path / f"seeds{i}.json"
        r = subprocess.run([sys.executable, "-c", _seed_worker(path)], capture_output=True, text=True,
                           env=subprocess_env(cache_dir, SHARD="0", NSHARDS="1"), timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(path.read_text())

    def total(r):
        return r["trace_s"] + r["compile_s"]

    cold = run(0)
    assert all(c["kernel"] == "miss" for c in cold), cold
    # warm processes until each seed has had a run at a tenth of its cold trace + compile: wall
    # times on a busy machine only ever come out too long, so the fastest of a few runs is the one
    # to judge
    best = None
    for i in range(1, 5):
        warm = run(i)
        assert all(w["kernel"] == "hit" and w["source"] == "hit" and w["trace_s"] == 0 for w in warm), warm
        best = warm if best is None else [min(a, b, key=total) for a, b in zip(best, warm)]
        if i >= 2 and all(total(w) <= 0.1 * total(c) for c, w in zip(cold, best)):
            break
    for c, w in zip(cold, best):
        assert total(w) <= 0.1 * total(c), (c, w)


# --- the command line and the notebook ----------------------------------------------------------

def test_cache_commands(cache_dir):
    from typer.testing import CliRunner
    from nkicc.cli import app

    runner = CliRunner()
    kernel = f"{TESTS / 'cache_kernels.py'}::stages"
    r = runner.invoke(app, ["cache", "path"])
    assert r.exit_code == 0 and r.output.strip() == str(cache_dir)
    for flag, expected in (([], "kernel miss"), ([], "kernel hit"), (["--no-cache"], "bypassed (disabled (--no-cache))")):
        r = runner.invoke(app, ["compile", kernel, *flag])
        assert r.exit_code == 0 and f"cache: {expected}" in r.output, r.output
    r = runner.invoke(app, ["compile", kernel], env={"NKICC_CACHE": "0"})
    assert "bypassed (disabled (NKICC_CACHE=0))" in r.output
    r = runner.invoke(app, ["cache", "stats"])
    assert r.exit_code == 0
    assert "kernel level: 1 hits, 1 misses, 0 bypasses" in r.output and "compile time saved" in r.output
    data = json.loads(runner.invoke(app, ["cache", "stats", "--json"]).output)
    assert data["entries"] > 0 and data["bytes"] > 0 and data["kernel"] == {"hit": 1, "miss": 1, "bypass": 0}
    r = runner.invoke(app, ["cache", "prune"])
    assert r.exit_code == 0 and "0 from other nkicc builds, 0 corrupt" in r.output
    r = runner.invoke(app, ["cache", "clear"])
    assert r.exit_code == 0 and f"removed {data['entries']} entries" in r.output
    data = json.loads(runner.invoke(app, ["cache", "stats", "--json"]).output)
    assert data["entries"] == 0 and data["kernel"] == {"hit": 0, "miss": 0, "bypass": 0}


def run_notebook(path: pathlib.Path) -> dict:
    """Execute a notebook's code cells in order in one namespace; each cell
    is registered with linecache, as IPython does, so kernels defined in a
    cell have source."""
    nb = json.loads(path.read_text())
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        filename = f"<{path.name} cell {i}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_incremental_notebook_runs(cache_dir, capsys):
    ns = run_notebook(REPO / "examples" / "notebooks" / "incremental.ipynb")
    again = ns["again"].report["cache"]
    assert (again["source"], again["kernel"]) == ("hit", "hit") and ns["again"].report["trace_s"] == 0
    edited = ns["edited"].report["cache"]
    assert (edited["source"], edited["kernel"]) == ("miss", "miss")
    assert "regions hit after the edit" in capsys.readouterr().out
