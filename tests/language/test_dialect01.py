"""NKI 0.1 kernels run as written (language/grid.py, legacy*.py): against numpy,
against the same kernel written in 0.6, rolled against unrolled; the 0.1 import
path and its runtime entry points (simulate_kernel, baremetal, benchmark)."""
import os
import textwrap

import numpy as np
import pytest

import nkicc
import nkicc.language as nl6
from nkicc.ir import NkiccError
from tests.language import dialect01_kernels as k
from tests.support.cli import run_cli
from tests.support.compare import sum_bound
from tests.support.rolling import NO_CACHE, check, data, loops


def _same_as_06(k01, k06, arrays, **consts):
    a = nkicc.compile(k01, *arrays, **NO_CACHE, **consts).run(*arrays)
    b = nkicc.compile(k06, *arrays, **NO_CACHE, **consts).run(*arrays)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [200, 256, 77])
def test_arange_mask_ragged_rows(rng, rows):
    a, g = data(rng, rows, 64), data(rng, 64)
    c = check(k.rmsnorm_01, (a, g), k.rmsnorm_np(a, g))
    if rows > 128:
        assert loops(c)["rolled"] + loops(c)["split"] >= 1, loops(c)
    _same_as_06(k.rmsnorm_01, k.rmsnorm_06, (a, g))


def test_mgrid_permutes_within_partitions(rng):
    a = data(rng, 16, 12)
    want = a.reshape(16, 3, 4).transpose(0, 2, 1).reshape(16, 12)
    check(k.transpose_01, (a,), want, rows=3, cols=4)
    _same_as_06(k.transpose_01, k.transpose_06, (a,), rows=3, cols=4)


def test_instructions_return_their_results(rng):
    a, b = data(rng, 256, 96), data(rng, 256, 96)
    c = check(k.softmax_rows_01, (a, b), k.softmax_np(a, b))
    assert loops(c)["rolled"] >= 1
    _same_as_06(k.softmax_rows_01, k.softmax_rows_06, (a, b))


def test_block_dimensions_and_matmul_accumulation(rng):
    lhsT, rhs = data(rng, 384, 64), data(rng, 384, 256)
    # against the exact product, within what fp32 sums of 384 terms may be off by in any order
    # (BLAS's order for numpy's own fp32 product depends on the CPU and on its threads)
    exact = lhsT.astype(np.float64).T @ rhs
    c = check(k.matmul_blocks_01, (lhsT, rhs), exact, bound=sum_bound(384, np.abs(lhsT).T.astype(np.float64) @ np.abs(rhs)))
    assert loops(c)["rolled"] >= 2
    # the same instructions as the 0.6 kernel: `acc += nc_matmul(...)` is the accumulate flag, no add
    ops01 = nkicc.compile(k.matmul_blocks_01, lhsT, rhs, **NO_CACHE).report["instructions_executed"]
    ops06 = nkicc.compile(k.matmul_blocks_06, lhsT, rhs, **NO_CACHE).report["instructions_executed"]
    assert ops01 == ops06
    _same_as_06(k.matmul_blocks_01, k.matmul_blocks_06, (lhsT, rhs))


def test_loop_reduce_accumulates_into_its_destination(rng):
    a = data(rng, 512, 40)
    check(k.column_sum_01, (a,), a.reshape(4, 128, 40).sum(axis=0))


def test_mask_lower_bound_leaves_the_rest(rng):
    a = data(rng, 32, 24)
    want = np.where(np.arange(24)[None, :] >= 5, np.exp(a), 0.0)
    check(k.tail_columns_01, (a,), want, start=5)


def test_iota_affine_select_and_transpose(rng):
    a = data(rng, 64, 48)
    check(k.iota_01, (a,), np.arange(64 * 48, dtype=np.float32).reshape(64, 48) + a)
    check(k.causal_01, (a,), np.where(np.arange(64)[:, None] >= np.arange(48)[None, :], a, -9984.0))
    check(k.transpose_pe_01, (a,), a.T)


def test_a_mask_over_two_grid_axes_names_the_guide_section(rng):
    import nkicc.language.legacy_nl as nl

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:64, 0:64]
        nl.store(out[i_p, i_f], value=nl.load(a[i_p, i_f], mask=(i_p < i_f)), mask=(i_p < i_f))
        return out

    with pytest.raises(NkiccError) as e:
        nkicc.compile(kernel, data(rng, 64, 64), **NO_CACHE)
    assert e.value.code == "E161" and "Deprecation of masking" in e.value.hint, e.value.one_line()
    assert e.value.loc.line == kernel.__code__.co_firstlineno + 3


def test_item_assignment_in_a_06_kernel_is_a_coded_error(rng):
    import nkicc.language as nl

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype)
        t[...] = nl.load(a)
        nl.store(out, value=t)
        return out

    with pytest.raises(NkiccError) as e:
        nkicc.compile(kernel, data(rng, 8, 8), **NO_CACHE)
    assert e.value.code == "E160" and "destination parameter" in e.value.hint


def _nki_import_kernel(a):  # `nl6` is nkicc's own nl (0.6): dialect="0.1" gives the kernel 0.1's
    out = nl6.ndarray(a.shape, dtype=a.dtype, buffer=nl6.shared_hbm)
    i_p, i_f = nl6.mgrid[0:a.shape[0], 0:a.shape[1]]
    t = nl6.ndarray(a.shape, dtype=a.dtype)
    t[i_p, i_f] = nl6.exp(nl6.load(a[i_p, i_f]))
    nl6.store(out, value=t)
    return out


def test_explicit_dialect_traces_an_nki_import_as_01(rng):
    kernel = _nki_import_kernel

    a = data(rng, 16, 8)
    got = nkicc.compile(kernel, a, dialect="0.1", **NO_CACHE).run(a)
    np.testing.assert_allclose(got, np.exp(a), rtol=1e-6)
    with pytest.raises(NkiccError) as e:
        nkicc.compile(kernel, a, dialect="0.9", **NO_CACHE)
    assert e.value.code == "E201"


SCRIPT = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    from neuronxcc.nki import benchmark, baremetal, simulate_kernel

    @nki.jit
    def add_one(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.arange(a.shape[0])[:, None], nl.arange(a.shape[1])[None, :]
        nl.store(out[ix, iy], value=nl.add(nl.load(a[ix, iy]), 1.0))
        return out

    a = np.random.default_rng(5).standard_normal((64, 32)).astype(np.float32)
    assert np.allclose(simulate_kernel(add_one, a), a + 1)
    assert np.allclose(baremetal(add_one)(a), a + 1)
    b = benchmark(warmup=2, iters=3)(add_one)
    assert np.allclose(b(a), a + 1)
    est = b.benchmark_result.nc_latency
    assert est.is_estimate and est.get_latency_percentile(99) > 0
    print("OK", est)
''')


def test_neuronxcc_import_path_and_runtime_entry_points(tmp_path):
    script = tmp_path / "old.py"
    script.write_text(SCRIPT)
    p = run_cli("run", str(script), cwd=tmp_path, add_env={"NKICC_CACHE": "0"})
    assert p.returncode == 0, p.stderr
    assert "OK" in p.stdout and "estimated by nkicc's timing model" in p.stdout
    notices = [ln for ln in p.stderr.splitlines() if ln.startswith("nkicc: NKI 0.1")]
    assert len(notices) == 1, p.stderr  # the dialect, said once
    assert "estimated by the timing model" in p.stderr and "not a measurement" in p.stderr


def test_assigning_a_named_result_keeps_its_value(rng):
    """`t[...] = op(...)` writes t directly; a result the kernel also named keeps its own
    tile, so a later write of t does not change it."""
    import nkicc.language.legacy_nl as nl

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype)
        x = nl.exp(nl.load(a))
        t[...] = x
        t[...] = nl.add(t, 1.0)
        nl.store(out, value=nl.add(t, x))
        return out

    a = data(rng, 32, 16)
    check(kernel, (a,), 2 * np.exp(a) + 1)


@pytest.mark.parametrize("name", ["matmul_blocks", "softmax_rows", "rmsnorm"])
def test_01_kernel_is_its_06_twin_for_the_compiler(name, rng):
    """The same instructions, loops and timing estimate as the kernel written in 0.6:
    the 0.1 front end makes the IR a 0.6 kernel makes, and passes and timing see no difference."""
    arrays = {"matmul_blocks": (data(rng, 384, 64), data(rng, 384, 256)),
              "softmax_rows": (data(rng, 256, 96), data(rng, 256, 96)),
              "rmsnorm": (data(rng, 200, 64), data(rng, 64))}[name]
    got = []
    for kernel in (getattr(k, name + "_01"), getattr(k, name + "_06")):
        c = nkicc.compile(kernel, *arrays, **NO_CACHE)
        c.run(*arrays)
        got.append((c.report["instructions_executed"], c.report["loops"], [p["name"] for p in c.report["passes"]],
                    c.sim.total_ns))
    assert got[0] == got[1]
    assert got[0][3] > 0


def test_01_kernels_use_the_compile_cache(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("NKICC_CACHE_DIR", str(tmp_path))
    arrays = (data(rng, 64, 32),)
    first = nkicc.compile(k.exp_into_01, *arrays).report["cache"]
    again = nkicc.compile(k.exp_into_01, *arrays)
    assert (first["source"], again.report["cache"]["source"]) == ("miss", "hit"), (first, again.report["cache"])
    np.testing.assert_allclose(again.run(*arrays), np.exp(arrays[0]), rtol=1e-6)
    other = nkicc.compile(k.exp_into_01, *arrays, dialect="0.1").report["cache"]
    assert other["source"] == "miss"  # an explicit dialect is part of the key


def test_every_section_an_e161_names_is_in_the_docs():
    """docs/dialects.md lists each guide section an E161 can name (language/guide.py)."""
    import ast

    from nkicc.language.guide import SECTIONS
    from tests.support.paths import REPO

    keys = set()
    for path in [*(REPO / "language").glob("*.py"), *(REPO / "driver" / "_nki_alias").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("unsupported", "_unsupported") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                keys.add(node.args[1].value)
    assert keys >= {"mask", "mgrid", "block-dims", "allocation", "dynamic-access"}, keys
    doc = (REPO / "docs" / "dialects.md").read_text()
    missing = [SECTIONS[k] for k in sorted(keys) if SECTIONS[k].split(": ", 1)[-1] not in doc]
    assert not missing, missing


def test_accumulating_into_a_fresh_psum_tile_starts_from_zero(rng):
    """`psum[...] += nc_matmul(...)` into a PSUM tile nothing wrote starts an accumulation
    group, which the hardware begins from zero (the attention tutorial's v8a and v11)."""
    import nkicc.language.legacy_isa as nisa
    import nkicc.language.legacy_nl as nl

    def kernel(x, y):
        out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in nl.affine_range(2):
            acc = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(3):
                acc[...] += nisa.nc_matmul(nl.load(x[m, k * 128:(k + 1) * 128, :]),
                                           nl.load(y[k * 128:(k + 1) * 128, :]))
            nl.store(out[m * 32:(m + 1) * 32, :], value=nl.copy(acc[0:32, :]))
        return out

    # small random integers: every sum is exact in fp32, whatever order the simulator adds in
    x = rng.integers(-3, 4, (2, 384, 64)).astype(np.float32)
    y = rng.integers(-3, 4, (384, 512)).astype(np.float32)
    want = np.concatenate([(x[m].T @ y)[0:32] for m in range(2)])
    c = check(kernel, (x, y), want)
    assert loops(c)["rolled"] == 2


DIRECT_ALLOCATION = textwrap.dedent('''
    import numpy as np
    from neuronxcc import nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    sb_mod = nki.compiler.sbuf.mod_alloc
    psum_mod = nki.compiler.psum.mod_alloc

    @nki.jit
    def doubled_products(a, b):
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a_sb = nl.ndarray((nl.par_dim(128), 512), dtype=a.dtype, buffer=sb_mod(base_addr=0))
        b_sb = nl.ndarray((nl.par_dim(128), 512), dtype=b.dtype, buffer=sb_mod(base_addr=2048))
        a_sb[...] = nl.load(a)
        b_sb[...] = nl.load(b)
        # four blocks on two banks, and two SBUF tiles: block i reuses block i - 2's place
        prod = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32,
                          buffer=psum_mod(base_bank=0, num_bank_tiles=(2,)))
        res = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32,
                         buffer=sb_mod(base_addr=4096, num_free_tiles=(2,)))
        for i in nl.affine_range(4):
            prod[i] = nisa.nc_matmul(a_sb[:, nl.ds(i * 128, 128)], b_sb)
            res[i] = nl.multiply(prod[i], 2.0)
            nl.store(out[i], value=res[i])
        return out

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((128, 512)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)
    want = np.stack([2 * a[:, i * 128:(i + 1) * 128].T.astype(np.float64) @ b for i in range(4)])
    assert np.allclose(nki.simulate_kernel(doubled_products, a, b), want, rtol=1e-5, atol=1e-4)
    print("OK")
''')


def test_direct_allocation_runs_with_nkicc_placing_the_tiles(tmp_path):
    """0.1's `mod_alloc` places tiles by hand (block i of `prod` on bank i % 2). The vendor's
    compiler orders instructions on them by address, so the values are program order's: nkicc
    places the tiles itself, matches numpy, and warns W161 once at each allocating line."""
    script = tmp_path / "direct.py"
    script.write_text(DIRECT_ALLOCATION)
    p = run_cli("run", str(script), cwd=tmp_path, add_env={"NKICC_CACHE": "0"})
    assert p.returncode == 0, p.stderr
    assert "OK" in p.stdout
    lines = sorted(int(ln.split("direct.py:")[1].split(":")[0]) for ln in p.stderr.splitlines() if "W161" in ln)
    assert lines == [13, 14, 19, 21], p.stderr  # one per allocating line of the kernel, none for the module's names
    assert "nki.compiler.psum.mod_alloc" in p.stderr and "E161" not in p.stderr


def test_dma_copy_read_modify_write_adds_into_its_destination(rng):
    """0.1's `dma_copy(dst_rmw_op=np.add)`: dst updated with src (0.3's dma_compute(dst, [src, dst]))."""
    import nkicc.language.legacy_isa as nisa01
    import nkicc.language.legacy_nl as nl01

    def kernel(a, b):
        out = nl01.ndarray(a.shape, dtype=a.dtype, buffer=nl01.shared_hbm)
        nl01.store(out, value=nl01.load(b))
        nisa01.dma_copy(dst=out, src=nl01.load(a), dst_rmw_op=np.add)
        return out

    a, b = data(rng, 64, 48), data(rng, 64, 48)
    np.testing.assert_allclose(nkicc.compile(kernel, a, b, **NO_CACHE).run(a, b), a + b, rtol=1e-6)
