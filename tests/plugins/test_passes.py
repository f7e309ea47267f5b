"""The pass manager and the built-in passes. The oracle for every pass is the
unoptimised pipeline (-O0: required passes only) on the same kernel, with
random inputs; for psum-legalize, licm, dma-coalesce and dce also the IR shape
the pass promises."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import Loop, Op
from nkicc.passes import PassOptions, order, registry, select
from tests.support import seeds_scaled_kernels as seeds
from tests.support.cli import run_cli

BUILTIN = {"verify": "required", "simplify": "on", "dce": "on", "psum-legalize": "on", "licm": "on",
           "dma-coalesce": "on", "unroll": "off", "global-schedule": "off", "multi-buffer": "on", "alloc": "required",
           "schedule": "required"}


def ops(kernel):
    return [s for s in kernel.body.walk() if isinstance(s, Op)]


def loops(kernel):
    return [s for s in kernel.body.walk() if isinstance(s, Loop)]


def run_both(kernel, arrays, **passes):
    """Compile with the given pass options and at -O0; run both. multi-buffer
    is off unless asked for, so that the IR shape is the tested pass's."""
    base = nkicc.compile(kernel, *arrays, passes={"opt_level": 0})
    opt = nkicc.compile(kernel, *arrays, passes={"disable": ["multi-buffer"], **passes})
    return base, opt, base.run(*arrays), opt.run(*arrays)


# --- small kernels, one per pass ---------------------------------------------------------

@nkicc.jit
def psum_accumulate(a_t, b):
    """The seed's copy-in / matmul / copy-out accumulation through PSUM."""
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(a_t.shape[0] // 128):
        at = nl.load(a_t[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        ps = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(ps, acc)
        nisa.nc_matmul(ps, at, bt)
        nisa.tensor_copy(acc, ps)
    nl.store(out, acc)
    return out


@nkicc.jit
def invariant_load(a, bias):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        b = nl.load(bias)                      # the same tile every iteration
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(t, b))
    return out


@nkicc.jit
def tile_stores(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for j in nl.affine_range(a.shape[1] // 16):
        nl.store(out[:, j * 16:(j + 1) * 16], value=t[:, j * 16:(j + 1) * 16])
    return out


@nkicc.jit
def adjacent_loads(a):
    out = nl.ndarray((a.shape[0], 32), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((a.shape[0], 32), dtype=a.dtype, buffer=nl.sbuf)
    for j in [0, 1, 2, 3]:  # a Python list, not a loop: four adjacent loads into one tile
        nisa.dma_copy(t[:, j * 8:(j + 1) * 8], a[:, j * 8:(j + 1) * 8])
    nl.store(out, t)
    return out


@nkicc.jit
def dead_code(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    unused = nl.exp(t)                         # never read
    also_unused = nl.multiply(unused, 3.0)     # noqa: F841
    nl.store(out, value=nl.add(t, 1.0))
    return out


@nkicc.jit
def foldable(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(1):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        u = nl.add(t, 0.0)
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(u, 1.0))
    return out


def test_psum_legalize_rewrites_copy_in_matmul_copy_out(rng):
    a_t = rng.standard_normal((384, 96)).astype(np.float32)
    b = rng.standard_normal((384, 64)).astype(np.float32)
    base, opt, r0, r1 = run_both(psum_accumulate, [a_t, b])
    np.testing.assert_allclose(r1, a_t.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(r1, r0, rtol=1e-5, atol=1e-4)
    body = loops(opt.ir)[0].body.stmts
    codes = [s.opcode for s in body if isinstance(s, Op)]
    assert codes == ["dma_copy", "dma_copy", "nc_matmul", "tensor_tensor"]
    mm = next(s for s in body if isinstance(s, Op) and s.opcode == "nc_matmul")
    assert mm.attr("accumulate") is False
    assert not any("W201" in w for w in opt.report["warnings"])
    # left as written, verify warns and names the pass that would fix it
    kept = nkicc.compile(psum_accumulate, a_t, b, passes={"disable": ["psum-legalize"]})
    assert any("W201" in w and "psum-legalize" in w for w in kept.report["warnings"])
    np.testing.assert_allclose(kept.run(a_t, b), r0, rtol=1e-5, atol=1e-4)


def test_licm_hoists_invariant_load(rng):
    a = rng.standard_normal((512, 48)).astype(np.float32)
    bias = rng.standard_normal((128, 48)).astype(np.float32)
    base, opt, r0, r1 = run_both(invariant_load, [a, bias])
    np.testing.assert_allclose(r1, a + np.tile(bias, (4, 1)), rtol=1e-6)
    assert np.array_equal(r0, r1)
    inside = [s for s in loops(opt.ir)[0].body.stmts if isinstance(s, Op) and s.opcode == "dma_copy"]
    assert len(inside) == 2  # the load of a and the store; the bias load moved out
    top = [s for s in opt.ir.body.stmts if isinstance(s, Op)]
    assert any(s.opcode == "dma_copy" and s.ins[0].tensor == "bias" for s in top)


def test_dma_coalesce_folds_a_loop_of_one_transfer(rng):
    a = rng.standard_normal((96, 128)).astype(np.float32)
    base, opt, r0, r1 = run_both(tile_stores, [a])
    assert np.array_equal(r1, a) and np.array_equal(r0, r1)
    assert loops(base.ir) and not loops(opt.ir)
    assert sum(o.opcode == "dma_copy" for o in ops(opt.ir)) == 2


def test_dma_coalesce_merges_adjacent_transfers(rng):
    a = rng.standard_normal((64, 40)).astype(np.float32)
    base, opt, r0, r1 = run_both(adjacent_loads, [a])
    assert np.array_equal(r1, a[:, :32]) and np.array_equal(r0, r1)
    assert sum(o.opcode == "dma_copy" for o in ops(base.ir)) == 5
    assert sum(o.opcode == "dma_copy" for o in ops(opt.ir)) == 2


def test_dce_removes_unread_work(rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)
    base, opt, r0, r1 = run_both(dead_code, [a])
    assert np.array_equal(r0, r1)
    np.testing.assert_allclose(r1, a + 1.0, rtol=1e-6)
    assert {o.opcode for o in ops(base.ir)} >= {"activation"}
    assert "activation" not in {o.opcode for o in ops(opt.ir)}
    assert len(opt.ir.tensors) < len(base.ir.tensors)


def test_simplify_inlines_one_trip_loops_and_folds_identities(rng):
    a = rng.standard_normal((128, 32)).astype(np.float32)
    base, opt, r0, r1 = run_both(foldable, [a], opt_level=2)
    assert np.array_equal(r0, r1) and np.array_equal(r1, a)
    assert "tensor_scalar" in {o.opcode for o in ops(base.ir)}
    assert "tensor_scalar" not in {o.opcode for o in ops(opt.ir)}


def test_unroll_leaves_no_static_loop_and_matches(rng):
    a = rng.standard_normal((512, 48)).astype(np.float32)
    bias = rng.standard_normal((128, 48)).astype(np.float32)
    c = nkicc.compile(invariant_load, a, bias, passes={"enable": ["unroll"], "disable": ["licm"]})
    assert not loops(c.ir)
    assert len(ops(c.ir)) == c.report["instructions_unrolled"]
    assert np.array_equal(c.run(a, bias), invariant_load(a, bias))


# --- scaled copies of the seed kernels -------------------------------------------------

def seed_cases(rng):
    k, m, n, l_ = seeds.K, seeds.M, seeds.N, seeds.L
    mm2 = [rng.standard_normal(s).astype(np.float32) for s in ((k, m), (k, n), (n, l_))]
    e = [rng.standard_normal(s).astype(np.float32) for s in
         ((seeds.M0_TOTAL * 128, seeds.K0 * 128), (seeds.K0 * 128, seeds.P0 * 128), (1, 1),
          (seeds.P0 * 128, seeds.L0 * 512))]
    return [(seeds.mm2_static, mm2, {}), (seeds.mm2_dynamic, mm2, {"fix_offsets": True}),
            (seeds.compute_einsum, e, {})]


@pytest.mark.parametrize("case", [0, 1, 2], ids=["mm2_static", "mm2_dynamic", "einsum"])
def test_seed_copies_unroll_and_global_schedule_match_default(rng, case):
    kernel, arrays, consts = seed_cases(rng)[case]
    default = nkicc.compile(kernel, *arrays, **consts)
    full = nkicc.compile(kernel, *arrays, passes={"enable": ["unroll", "global-schedule"]}, **consts)
    assert full.report["pipeline"][-5:] == ["unroll", "global-schedule", "multi-buffer", "alloc", "schedule"]
    np.testing.assert_allclose(full.run(*arrays), default.run(*arrays), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("case", [0, 1, 2], ids=["mm2_static", "mm2_dynamic", "einsum"])
def test_seed_copies_pass_verify_each(rng, case):
    kernel, arrays, consts = seed_cases(rng)[case]
    c = nkicc.compile(kernel, *arrays, passes={"verify_each": True}, **consts)
    assert c.report["pipeline"] == ["simplify", "psum-legalize", "verify", "licm-unroll", "licm", "dma-coalesce", "dce",
                                    "multi-buffer", "alloc", "schedule"]


def test_verify_each_names_a_pass_that_drops_an_instruction(rng):
    a = rng.standard_normal((512, 48)).astype(np.float32)
    bias = rng.standard_normal((128, 48)).astype(np.float32)
    opts = {"plugins": ("tests.support.broken_plugin",), "enable": ("drop-last",), "verify_each": True}
    with pytest.raises(nkicc.NkiccError) as err:
        nkicc.compile(invariant_load, a, bias, passes=opts)
    assert err.value.code == "E310"
    assert "'drop-last'" in err.value.message
    # without the check, the dropped store surfaces only when the program runs
    broken = nkicc.compile(invariant_load, a, bias, passes={"plugins": ("tests.support.broken_plugin",), "enable": ("drop-last",)})
    with pytest.raises(nkicc.NkiccError) as err:
        broken.run(a, bias)
    assert err.value.code == "E174"


# --- choosing and ordering -------------------------------------------------------------------

def test_defaults_and_levels():
    reg = registry()
    names = lambda **kw: [p.name for p in select(PassOptions(**kw), reg)]  # noqa: E731
    assert names() == ["simplify", "psum-legalize", "verify", "licm-unroll", "licm", "dma-coalesce", "dce",
                       "multi-buffer", "alloc", "schedule"]
    assert names(opt_level=0) == ["verify", "alloc", "schedule"]
    assert names(opt_level=3) == names()  # the built-in opt-in passes follow the unrolled size
    assert names(enable=("unroll",), disable=("unroll",)) == names()  # disabling wins
    assert names(enable=("global-schedule", "unroll"))[-5:] == ["unroll", "global-schedule", "multi-buffer", "alloc",
                                                                "schedule"]


def test_unknown_and_required_pass_errors():
    reg = registry()
    with pytest.raises(nkicc.NkiccError) as err:
        select(PassOptions(enable=("unrol",)), reg)
    assert err.value.code == "E301" and "did you mean 'unroll'" in err.value.hint
    with pytest.raises(nkicc.NkiccError) as err:
        select(PassOptions(disable=("verify",)), reg)
    assert err.value.code == "E305"


def test_order_follows_constraints_and_reports_cycles():
    from nkicc.pass_api import Pass
    a = Pass("a", None, after=("c",))
    b = Pass("b", None, before=("a",))
    c = Pass("c", None)
    assert [p.name for p in order([a, b, c])] in (["b", "c", "a"], ["c", "b", "a"])
    with pytest.raises(nkicc.NkiccError) as err:
        order([Pass("x", None, after=("y",)), Pass("y", None, after=("x",))])
    assert err.value.code == "E306"


def test_jit_pass_options(rng):
    a = rng.standard_normal((512, 48)).astype(np.float32)
    bias = rng.standard_normal((128, 48)).astype(np.float32)
    k = nkicc.jit(invariant_load.fn, enable_passes=["unroll"], disable_passes=["licm"])
    assert np.array_equal(k(a, bias), invariant_load(a, bias))
    assert "unroll" in k.compiled[0].report["pipeline"]


# --- the command line ------------------------------------------------------------------------

def cli(*args, env=None):
    return run_cli(*args, add_env=env)


def test_passes_command_lists_builtins():
    r = cli("passes")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()[1:]}
    for name, default in BUILTIN.items():
        assert rows.get(name) == default, (name, r.stdout)


KERNEL_FILE = os.path.abspath(__file__) + "::invariant_load"
SPEC = ["--arg", "a=float32[512,48]", "--arg", "bias=float32[128,48]"]


def test_time_passes_and_ir_dumps(tmp_path):
    report = tmp_path / "r.json"
    r = cli("compile", KERNEL_FILE, *SPEC, "--time-passes", "--print-ir-after", "licm",
            "--print-ir-before", "simplify", "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert "// ----- IR before simplify ----- //" in r.stdout
    assert "IR after alloc" not in r.stdout
    assert "// ----- IR after licm ----- //" in r.stdout
    assert "IR after dce" not in r.stdout
    table = r.stdout[r.stdout.index("time (ms)"):]
    for name in ("simplify", "psum-legalize", "verify", "licm", "dma-coalesce", "dce", "alloc", "schedule", "total"):
        assert name in table
    data = json.loads(report.read_text())
    assert [p["name"] for p in data["passes"]] == data["pipeline"]
    assert set(data["passes"][0]) == {"name", "s", "mem_mb", "ir_in", "ir_out"}


def test_cli_pass_errors():
    r = cli("compile", KERNEL_FILE, *SPEC, "--disable-pass", "verify")
    assert r.returncode == 1 and r.stderr.startswith("error[E305]")
    r = cli("compile", KERNEL_FILE, *SPEC, "--enable-pass", "dma_coalesce,unroll")
    assert r.returncode == 1 and "did you mean 'dma-coalesce'" in r.stderr
    r = cli("explain", "E310")
    assert r.returncode == 0 and "verify-each" in r.stdout


BIG_UNROLL = '''
import nkicc
import nkicc.language as nl

@nkicc.jit
def big(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(2000):
        for j in nl.affine_range(2000):
            u = nl.multiply(t, 2.0)
            nl.store(out, value=u)
    return out
'''


@pytest.mark.parametrize("budget", [["--max-compile-memory", "250MB"], ["--max-compile-time", "1.5"]],
                         ids=["memory", "time"])
@pytest.mark.skipif(not os.path.exists("/usr/bin/time"), reason="needs /usr/bin/time to measure from outside")
def test_budget_stops_unroll_with_exit_3(tmp_path, budget):
    path = tmp_path / "big.py"
    path.write_text(BIG_UNROLL)
    cmd = [sys.executable, "-m", "nkicc", "compile", f"{path}::big", "--enable-pass", "unroll", *budget]
    r = subprocess.run(["/usr/bin/time", "-f", "peak_kb=%M", *cmd], capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    # (4,000,000 stores, the load and the multiply: licm hoists the loop-invariant multiply too)
    assert "error[E320] pass 'unroll' stopped" in r.stderr and " of 4,000,002 done" in r.stderr
    peak_mb = int(r.stderr.rsplit("peak_kb=", 1)[1].split()[0]) / 1024
    if budget[0] == "--max-compile-memory":
        assert peak_mb <= 250 * 1.1, peak_mb  # measured from outside: the guard keeps it near the budget


@pytest.fixture(scope="module")
def footprint_plugin(tmp_path_factory):
    """The example third-party plugin package, installed into a temporary folder
    (never into this environment): the environment for subprocesses that see it,
    with plugin autoload on (the suite turns it off, see conftest)."""
    from tests.support.paths import EXAMPLES
    from tests.support.install import install_to_target
    target = install_to_target(EXAMPLES / "plugins" / "nkicc-footprint", tmp_path_factory)
    path = os.pathsep.join([str(target)] + [v for k, v in os.environ.items() if k == "PYTHONPATH" and v])
    return {"PYTHONPATH": path, "NKICC_DISABLE_PLUGIN_AUTOLOAD": "0"}


def test_third_party_plugin_is_listed_and_runs(footprint_plugin):
    r = cli("passes", env=footprint_plugin)
    line = next(line for line in r.stdout.splitlines() if line.startswith("footprint-report"))
    assert line.split()[1] == "off" and "nkicc-footprint" in line
    r = cli("compile", KERNEL_FILE, *SPEC, "--enable-pass", "footprint-report", env=footprint_plugin)
    assert r.returncode == 0, r.stderr
    assert "note[footprint-report] sbuf_kib_per_partition: 0.6" in r.stdout
    r = cli("passes", env={**footprint_plugin, "NKICC_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "footprint-report" not in r.stdout and "verify" in r.stdout
    r = cli("passes", "--no-plugin", "footprint", env=footprint_plugin)
    assert "footprint-report" not in r.stdout
    r = cli("passes")  # the suite's own environment: autoload off, the plugin not installed here
    assert "footprint-report" not in r.stdout


def test_suite_passes_with_a_third_party_opt_in_pass_installed(footprint_plugin):
    """A user with an opt-in pass installed (here: on PYTHONPATH, autoload as the
    user has it) still gets a green suite: conftest turns autoload off."""
    env = {**os.environ, **footprint_plugin}
    env.pop("NKICC_DISABLE_PLUGIN_AUTOLOAD")  # as in the user's shell
    from tests.support.paths import REPO
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/plugins/test_passes.py::test_defaults_and_levels"], capture_output=True, text=True,
                       cwd=REPO, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # and without the isolation the plugin is seen, so the check above means something
    r = subprocess.run([sys.executable, "-c", "from nkicc.passes import registry; print(sorted(registry().passes))"],
                       capture_output=True, text=True, env=env)
    assert "footprint-report" in r.stdout, r.stdout + r.stderr


def test_crashing_pass_writes_a_reproducer_that_replays(tmp_path):
    from tests.support.paths import REPO
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = run_cli("compile", KERNEL_FILE, *SPEC, "-p", "tests.support.broken_plugin", "--enable-pass", "crash",
                cwd=tmp_path, env=env)
    assert r.returncode == 4, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("internal error[E999] pass 'crash'") and "ZeroDivisionError" in first
    assert "Traceback" not in r.stderr
    (repro,) = tmp_path.glob("nkicc-repro-*.json")
    data = json.loads(repro.read_text())
    assert data["pass"] == "crash" and data["options"]["enable"] == ["crash"]
    r2 = run_cli("reproduce", str(repro), cwd=tmp_path, env=env)
    assert r2.returncode == 4
    assert r2.stderr.splitlines()[0] == first


def test_region_passes_transform_equal_bodies_once_and_match_a_walk_without_memo():
    """run_region_pass keys its memo by block tokens (equal blocks, equal
    token, without hashing each subtree): its output must be what applying
    the pass to every block innermost first gives, and blocks equal to one
    already transformed (the same object or an equal copy) in the same loop
    context must not run the pass again."""
    import dataclasses

    from tests.support import cache_kernels as ck
    from nkicc.ir import Block, serialize
    from nkicc.pass_api import PassContext, Region
    from nkicc.passes import run_region_pass

    reg = registry()
    kernel = nkicc.compile(ck.stages, np.random.default_rng(3).standard_normal((ck.ROWS, ck.COLS)).astype(
        np.float32), cache=False).traced_ir
    copy = serialize.from_json(serialize.to_json(kernel))           # equal, but no object shared
    assert copy == kernel and copy.body.stmts[0] is not kernel.body.stmts[0]
    doubled = dataclasses.replace(kernel, body=Block(kernel.body.stmts + copy.body.stmts))

    def reversed_first_body(block):  # the first body of two or more statements, in reverse order
        done = [False]

        def walk(b):
            stmts = []
            for s in b.stmts:
                if isinstance(s, Loop) and not done[0]:
                    inner = walk(s.body)
                    if not done[0] and len(set(inner.stmts)) >= 2:
                        inner, done[0] = Block(inner.stmts[::-1]), True
                    s = dataclasses.replace(s, body=inner)
                stmts.append(s)
            return Block(tuple(stmts))
        out = walk(block)
        assert done[0]
        return out

    # the same loop variables and trip counts as the first half, one body different (same length):
    # a memo that took one for the other would give the first half's output there
    mutated = dataclasses.replace(kernel, body=Block(kernel.body.stmts + reversed_first_body(copy.body).stmts))
    ctx = PassContext(reg.targets["trn2"])

    def naive(p, k):
        decls = k.tensor_map()

        def walk(block, loop, trips):
            stmts = tuple(dataclasses.replace(s, body=walk(s.body, s, {**trips, s.var: s.trip}))
                          if isinstance(s, Loop) else s for s in block.stmts)
            return p.run(Block(stmts), Region(loop, trips, decls, k), ctx)
        return dataclasses.replace(k, body=walk(k.body, None, {}))

    loops = sum(isinstance(s, Loop) for s in kernel.body.walk())
    assert loops >= 8
    for name in ("simplify", "licm", "psum-legalize", "dma-coalesce"):
        p = reg.passes[name]
        for k in (kernel, doubled, mutated):
            assert run_region_pass(p, k, ctx) == naive(p, k), name
    seen_blocks = []
    recorder = dataclasses.replace(reg.passes["simplify"], name="recorder",
                                   run=lambda block, region, c: seen_blocks.append(block) or block)
    assert run_region_pass(recorder, mutated, ctx) == mutated  # the reversed body was not served the original's

    seen = []
    counting = dataclasses.replace(reg.passes["simplify"], name="counting",
                                   run=lambda block, region, c: seen.append(block) or block)
    run_region_pass(counting, kernel, ctx)
    once = len(seen)
    seen.clear()
    out = run_region_pass(counting, doubled, ctx)
    assert out == doubled
    # the second half (equal copies) ran nothing new: only the top-level block differs
    assert len(seen) == once, (len(seen), once)
    assert len({id(b) for b in seen}) == len(seen)
