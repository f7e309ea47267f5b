"""One test per rule of the NKI migration guide (nkicc.migrate_rules.RULES): the
rewrite `nkicc migrate` makes, or the `# nkicc-migrate:` comment it leaves, on a
small kernel; the result parses; and where nkicc runs the kernel as written,
--check simulates both forms on the same random inputs and finds them equal.
docs/migration.md's table names these tests (test_migrate_doc.py checks that).

Kernels in the 0.1 dialect (index grids, ISA calls that return tiles, block
dimensions) run as written only with the 0.1 front end; their --check is skipped
where it is absent (the rewrite itself is still checked)."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from nkicc.ir import NkiccError
from nkicc.migrate import check, migrate_file, migrate_source

H01 = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n\n\n"
H = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n\n"


def kernel(body: str, params: str = "a", head: str = H01, deco: str = "@nki.jit") -> str:
    return head + f"{deco}\ndef k({params}):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def body(text: str) -> str:
    """The kernel's body, dedented (the lines after `def k(...)`)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def k("))
    return textwrap.dedent("\n".join(lines[start + 1:])).strip("\n")


def mig(src: str, start: str | None = None, stop: str = "0.6"):
    m = migrate_source(src, "k.py", start, stop)
    cst.parse_module(m.after)  # the result parses
    return m


def rewritten(b: str, start: str = "0.1", **kw) -> str:
    return body(mig(kernel(b, **kw), start).after)


def notes(m) -> list[str]:
    return [n.rule for n in m.notes]


_FRONT_END_01: list[bool] = []


def have_01_front_end() -> bool:
    """Whether nkicc serves the 0.1 dialect's index grids under `neuronxcc.nki.language`."""
    if not _FRONT_END_01:
        import importlib

        from nkicc.loader import enable_nki_alias
        enable_nki_alias()
        try:
            nl = importlib.import_module("neuronxcc.nki.language")
            ok = callable(getattr(nl, "arange")) and getattr(nl, "mgrid") is not None
        except Exception:  # noqa: BLE001 - nkicc 0.6 answers nl.arange with a one-line error
            ok = False
        _FRONT_END_01.append(ok)
    return _FRONT_END_01[0]


def check_runs(tmp_path, src: str, start: str | None, args: list[str], consts=(), needs_01: bool = False):
    path = tmp_path / "kern.py"
    path.write_text(src)
    m = migrate_file(str(path), start)
    try:
        return check(m, "k", args, list(consts), seed=3)
    except NkiccError as err:
        if needs_01 and "as written does not run" in err.message and not have_01_front_end():
            pytest.skip("needs the 0.1 front end")
        raise


A = ["a=float32[128,64]"]


# --- 0.1 -> 0.2 ----------------------------------------------------------------------

def test_m0201(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a[0:128, 0:64])
        nl.store(out[0:128, 0:64], value=nl.multiply(t, 3.0))
        return out
    """)
    src = src.replace("import neuronxcc.nki.isa as nisa\n", "import neuronxcc.nki.isa as nisa\n"
                      "from neuronxcc import nki as nk2\nimport neuronxcc.nki.typing\n")
    m = mig(src)
    head = m.after.split("@nki.jit")[0]
    assert "neuronxcc" not in m.after
    assert head.splitlines()[:5] == ["import nki", "import nki.language as nl", "import nki.isa as nisa",
                                     "import nki as nk2", "import nki.typing"]
    assert check_runs(tmp_path, src, None, A).outputs == 1


def test_m0202():
    b = rewritten("""
        x = nl.load(a)
        y = nisa.activation(op=nl.exp, data=x, scale=2.0)
        z = nisa.tensor_tensor(x, y, op=nl.add, dtype=nl.bfloat16)
        w = nisa.tensor_reduce(op=nl.add, data=z, axis=1)
        s = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
        s[0:64, 0:64] = nisa.reciprocal(x[0:64, 0:64])
        p = nl.zeros((64, 512), dtype=nl.float32, buffer=nl.psum)
        p[0:64, 0:512] += nisa.nc_matmul(x[0:128, 0:64], x[0:128, 0:512])
        q = nisa.nc_matmul(x, y)
    """)
    assert b.splitlines() == [
        "x = nl.load(a)",
        "y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)",
        "nisa.activation(y, op=nl.exp, data=x, scale=2.0)",
        "z = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)",
        "nisa.tensor_tensor(z, x, y, op=nl.add)",
        "w = nl.ndarray((z.shape[0], 1), dtype=z.dtype, buffer=nl.sbuf)",
        "nisa.tensor_reduce(w, op=nl.add, data=z, axis=1)",
        "s = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)",
        "nisa.reciprocal(s[0:64, 0:64], x[0:64, 0:64])",
        "p = nl.zeros((64, 512), dtype=nl.float32, buffer=nl.psum)",
        "nisa.nc_matmul(p[0:64, 0:512], x[0:128, 0:64], x[0:128, 0:512], accumulate=True)",
        "q = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.psum)",
        "nisa.nc_matmul(q, x, y)",
    ]


def test_m0202_check(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nisa.activation(op=nl.exp, data=x, scale=0.5)
        z = nisa.tensor_tensor(x, y, op=nl.multiply)
        nl.store(out, value=z)
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0202_results_inside_expressions():
    """An ISA call inside an expression gets a tile and a line of its own before the statement;
    a Tensor Engine transpose assigned into a tile lands in PSUM and is copied, as 0.1 did; a
    row reduction's (P,) result is a (P, 1) tile."""
    b = rewritten("""
        x = nl.load(a)
        nc_transpose_res = 1
        v = nl.multiply(x[0:64, 0:64], nisa.nc_transpose(x[0:64, 0:64], dtype=nl.float32))
        s = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
        s[0:64, 0:128] = nisa.nc_transpose(x[0:128, 0:64])
        m = nisa.tensor_reduce(np.max, data=x, axis=(1,), negate=True)
        u = nisa.tensor_reduce(np.max, data=x, axis=(0, 1))
    """)
    assert b.splitlines() == [
        "x = nl.load(a)",
        "nc_transpose_res = 1",
        "nc_transpose_res2 = nl.ndarray((x[0:64, 0:64].shape[1], x[0:64, 0:64].shape[0]), dtype=nl.float32, "
        "buffer=nl.psum)",
        "nisa.nc_transpose(nc_transpose_res2, x[0:64, 0:64])",
        "v = nl.multiply(x[0:64, 0:64], nc_transpose_res2)",
        "s = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)",
        "nc_transpose_res3 = nl.ndarray((x[0:128, 0:64].shape[1], x[0:128, 0:64].shape[0]), dtype=x[0:128, "
        "0:64].dtype, buffer=nl.psum)",
        "nisa.nc_transpose(nc_transpose_res3, x[0:128, 0:64])",
        "nisa.tensor_copy(dst=s[0:64, 0:128], src=nc_transpose_res3)",
        "m = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.sbuf)",
        "nisa.tensor_reduce(m, np.max, data=x, axis=(1,), negate=True)",
        "# nkicc-migrate: M0202 nisa.tensor_reduce returns no tile in 0.2+: declare the result "
        "(nl.ndarray(shape, dtype, buffer)) and pass it as dst",
        "u = nisa.tensor_reduce(np.max, data=x, axis=(0, 1))",
    ]


def test_m0202_results_inside_expressions_check(tmp_path):
    src = "import numpy as np\n" + kernel("""
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        t[0:128, 0:128] = nisa.nc_transpose(x)
        m = nisa.tensor_reduce(np.max, data=t, axis=(1,), negate=True)
        y = nl.add(nl.multiply(t, nisa.nc_transpose(x)), m)
        nl.store(out, value=y)
        return out
    """)
    assert check_runs(tmp_path, src, None, ["a=float32[128,128]"], needs_01=True).outputs == 1


def test_m0203_affine_select():
    """0.1's pred= over index grids becomes 0.6's affine form of `left - right`: the partition
    index's coefficient, one [step, count] per free axis, the rest the offset."""
    b = rewritten("""
        ip = nl.arange(128)[:, None]
        jf = nl.arange(64)[None, :]
        x = nl.load(a)
        for i in nl.affine_range(2):
            y = nisa.affine_select(pred=(i * 128 + ip >= 2 * jf + 3), on_true_tile=x[ip, jf], on_false_value=-9.0)
            z = nisa.affine_select(pred=(ip < 64), on_true_tile=x[ip, jf], on_false_value=0.0)
    """)
    assert b.splitlines() == [
        "x = nl.load(a)",
        "for i in nl.affine_range(2):",
        "    y = nl.ndarray(x[0:128, 0:64].shape, dtype=x[0:128, 0:64].dtype, buffer=nl.sbuf)",
        "    nisa.affine_select(y, pattern=[[-2, 64]], offset=i * 128 - 3, channel_multiplier=1, "
        "cmp_op=nl.greater_equal, on_true_tile=x[0:128, 0:64], on_false_value=-9.0)",
        "    z = nl.ndarray(x[0:128, 0:64].shape, dtype=x[0:128, 0:64].dtype, buffer=nl.sbuf)",
        "    nisa.affine_select(z, pattern=[[0, 64]], offset=-64, channel_multiplier=1, cmp_op=nl.less, "
        "on_true_tile=x[0:128, 0:64], on_false_value=0.0)",
    ]


def test_m0203_affine_select_check(tmp_path):
    src = kernel("""
        out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        jf = nl.arange(64)[None, :]
        x = nl.load(a)
        for i in nl.affine_range(2):
            y = nisa.affine_select(pred=(i * 32 + ip >= 2 * jf + 3), on_true_tile=x[ip, jf], on_false_value=-9.0)
            nl.store(out[i], value=y)
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0215():
    b = rewritten("""
        t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        tiles = [t, t]
        t[...] = nl.load(a)
        t[0:128, 0:64] = 0
        t[...] = nl.exp(t)
        t[...] = nl.copy(t)
        p = nl.zeros((64, 64), dtype=nl.float32, buffer=nl.psum)
        p[...] += nl.matmul(t[0:128, 0:64], t[0:128, 0:64], transpose_x=True)
        t[...] *= t
        t[...] /= t
        tiles[1] = nl.exp(t)
        p += nl.matmul(t, t, transpose_x=True)
        n = 0
        n += 1
    """)
    assert b.splitlines() == [
        "t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)",
        "tiles = [t, t]",
        "nisa.dma_copy(dst=t[...], src=a)",
        "nisa.memset(dst=t[0:128, 0:64], value=0)",
        "nisa.tensor_copy(dst=t[...], src=nl.exp(t))",
        "nisa.tensor_copy(dst=t[...], src=t)",
        "p = nl.zeros((64, 64), dtype=nl.float32, buffer=nl.psum)",
        "nisa.nc_matmul(p[...], t[0:128, 0:64], t[0:128, 0:64], accumulate=True)",
        "nisa.tensor_tensor(dst=t[...], data1=t[...], data2=t, op=nl.multiply)",
        "# nkicc-migrate: M0215 an in-place tile update: write it as an instruction with dst=",
        "t[...] /= t",
        "tiles[1] = nl.exp(t)",
        "nisa.nc_matmul(p, t, t, accumulate=True)",
        "n = 0",
        "n += 1",
    ]


def test_m0215_check(tmp_path):
    src = kernel("""
        out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        t[...] = nl.load(a)
        p = nl.zeros((64, 64), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            p[...] += nl.matmul(t[0:128, 0:64], t[0:128, 0:64], transpose_x=True)
        s = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.sbuf)
        s[...] = nl.copy(p)
        s[...] += s
        nl.store(out, value=s)
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0203():
    b = rewritten("""
        i_p, i_f = nl.mgrid[0:128, 0:64]   # the grid
        g = nl.mgrid[0:128, 0:32]
        ix = nl.arange(64)[None, :]
        iy = 2 + nl.arange(16)[:, None]
        t = nl.load(a[i_p, i_f])
        u = nl.load(a[g.p, 32 + g.x])
        v = nl.load(a[iy, ix])
        w = nl.load(a[3, ix])
        y = nl.load(a[i_f, i_p])
        z = nl.load(a[i_p, 2 * i_f + 1])
        q = nl.load(a[i_p, i_f * i_f])
        t[i_f, i_p] = nisa.nc_transpose(y)
        t[i_f, i_p] /= y
    """)
    assert b.splitlines() == [
        "i_p, i_f = nl.mgrid[0:128, 0:64]   # the grid",
        "t = nl.load(a[0:128, 0:64])",
        "u = nl.load(a[0:128, 32:32 + 32])",
        "v = nl.load(a[2:2 + 16, 0:64])",
        "w = nl.load(a[3:3 + 1, 0:64])",
        "y = nl.load(a.ap(pattern=[[1, 128], [a.shape[1], 64]], offset=0))",
        "z = nl.load(a.ap(pattern=[[a.shape[1], 128], [2, 64]], offset=1))",
        "# nkicc-migrate: M0203 index grid is not a plain slice (strided, permuted or broadcast): write it with "
        "slices or .ap()",
        "q = nl.load(a[i_p, i_f * i_f])",
        "nc_transpose_res = nl.ndarray((y.shape[1], y.shape[0]), dtype=y.dtype, buffer=nl.psum)",
        "nisa.nc_transpose(nc_transpose_res, y)",
        "nisa.tensor_copy(dst=t.ap(pattern=[[1, 128], [t.shape[1], 64]], offset=0), src=nc_transpose_res)",
        "# nkicc-migrate: M0203 index grid is not a plain slice (strided, permuted or broadcast): write it with "
        "slices or .ap()",
        "# nkicc-migrate: M0215 an in-place tile update: write it as an instruction with dst=",
        "t[i_f, i_p] /= y",
    ]


def test_m0203_check(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:64, 0:64]
        for i in nl.affine_range(2):
            t = nl.load(a[i * 64 + i_p, i_f])
            nl.store(out[i * 64 + i_p, i_f], value=nl.multiply(t, 2.0))
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0203_access_pattern_check(tmp_path):
    """A transpose and a strided pool, as the tutorials write them with grids, become .ap() views."""
    src = kernel("""
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        i_p, i_x, i_y = nl.mgrid[0:128, 0:8, 0:8]
        u = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        u[i_p, i_y * 8 + i_x] = nl.copy(t[i_p, i_x * 8 + i_y])
        j_p, j_1, j_2, j_3, j_4 = nl.mgrid[0:128, 0:4, 0:2, 0:4, 0:2]
        s = nl.sum(u[j_p, 16 * j_1 + 8 * j_2 + 2 * j_3 + j_4], axis=[2, 4])
        nl.store(out[0:128, 0:16], value=s)
        nl.store(out[0:128, 16:64], value=u[0:128, 16:64])
        return out
    """)
    assert "nl.mgrid" not in mig(src).after
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0204():
    b = rewritten("""
        ix = nl.arange(128)[:, None]
        iy = nl.arange(64)[None, :]
        for i in nl.affine_range(3):
            t = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < 300))
            t[...] = nl.multiply(t, 2.0, mask=(i * 128 + ix < 300))
            t[...] = nl.matmul(t, t, mask=(i * 128 + ix < 300))
    """, params="a")
    assert b.splitlines() == [
        "ix = nl.arange(128)[:, None]",
        "for i in nl.affine_range(3):",
        "    t = nl.load(a[i * 128:min(300, i * 128 + 128), 0:64])",
        "    nisa.tensor_copy(dst=t[0:min(300 - (i * 128), 128)], src=nl.multiply(t[0:min(300 - (i * 128), 128)], 2.0))",
        "    # nkicc-migrate: M0204 mask= bounds an index this statement does not use as a grid slice (e.g. t[...]): "
        "bound the computed region by hand",
        "    # nkicc-migrate: M0203 index grid used outside a subscript: rewrite with slices or .ap()",
        "    nisa.tensor_copy(dst=t[...], src=nl.matmul(t, t, mask=(i * 128 + ix < 300)))",
    ]


def test_m0204_check(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix = nl.arange(100)[:, None]
        iy = nl.arange(64)[None, :]
        for i in nl.affine_range(2):
            t = nl.load(a[i * 100 + ix, iy], mask=(i * 100 + ix < 128))
            u = nl.multiply(t, 2.0)
            u[...] = nl.multiply(u, 3.0, mask=(i * 100 + ix < 128))
            nl.store(out[i * 100 + ix, iy], value=u, mask=(i * 100 + ix < 128))
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0205():
    m = mig(kernel("t = nl.load(a[0:128, 0:64][0:64, 0:32])"))
    assert notes(m) == ["M0205"]


def test_m0206():
    m = mig(kernel("""
        idx = nl.load(a[0:1, 0:1])
        t = nl.load(a[idx, 0:64])
    """))
    assert notes(m) == ["M0206"]


def test_m0207(tmp_path):
    src = H01 + textwrap.dedent("""
        @nki.jit(mode="trace")
        def helper(t):
            return nl.multiply(t, 2.0)


        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out[0:128, 0:64], value=helper(nl.load(a[0:128, 0:64])))
            return out
    """)
    m = mig(src)
    assert "def helper(t):" in m.after and "@nki.jit\ndef helper" not in m.after and "mode=" not in m.after
    assert m.after.count("@nki.jit") == 1
    assert check_runs(tmp_path, src, None, A).outputs == 1


def test_m0208():
    m = mig(kernel("d = {0: a, 'x': a}"))
    assert notes(m) == ["M0208"]
    assert notes(mig(kernel("d = {'x': a}"))) == []


def test_m0209():
    src = kernel("""
        val = 0
        for i in range(8):
            val += 1
    """)
    assert mig(src).after == src.replace("neuronxcc.nki", "nki").replace("import nki as nki", "import nki")


def test_m0210():
    m = mig(kernel("t = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype, buffer=nki.compiler.sbuf.mod_alloc(base_addr=0))"))
    assert "M0210" in notes(m)


def test_m0211():
    src = kernel("t = nl.load(a)")
    assert notes(mig(src, stop="0.2")) == ["M0211"]
    assert notes(mig(src)) == [] and "nl.load(a)" in mig(src).after


def test_m0212():
    src = kernel("""
        r = nisa.register_alloc(3)
        for i in nl.sequential_range(2):
            pass
    """, head=H)
    assert mig(src, "0.2", "0.5").after == src


def test_m0213():
    src = H01 + textwrap.dedent("""
        @nki.baremetal(save_neff_name="x.neff")
        def k(a):
            return a


        def run(x):
            nki.benchmark(k, warmup=1)(x)
            return nki.simulate_kernel(k, x)
    """)
    m = mig(src)
    assert "@nki.jit\ndef k(a):" in m.after
    assert "return nki.simulate(k)(x)" in m.after
    assert notes(m) == ["M0213"]


def test_m0214():
    assert notes(mig(kernel("s = nl.loop_reduce(a, op=nl.add, loop_indices=[0])"))) == ["M0214"]


def test_m0216():
    b = rewritten("x = nisa.affine_select(pred, a, nl.fp32.min)\ny = nl.fp32.max", params="a, pred")
    assert "nl.fp32.min" not in b and "-3.4028234663852886e+38" in b and "y = 3.4028234663852886e+38" in b
    import numpy as np
    assert float(np.finfo(np.float32).min) == -3.4028234663852886e+38


def test_m0217(tmp_path):
    b = rewritten("""
        t = nl.load(a)
        s = nl.sum(t, axis=[1])
        m = nl.max(t, axis=1, dtype=nl.float32)
        p = nl.sum(t, axis=0)
        k = nl.mean(t, axis=ax)
        u = nl.multiply(t, s)
    """, params="a, ax")
    assert b.splitlines() == [
        "t = nl.load(a)",
        "s = nl.sum(t, axis=[1], keepdims=t.ndim == 2)",
        "m = nl.max(t, axis=1, dtype=nl.float32, keepdims=t.ndim == 2)",
        "p = nl.sum(t, axis=0)",
        "# nkicc-migrate: M0217 a 0.1 reduction over every free axis is (P, 1): add keepdims=True where it is",
        "k = nl.mean(t, axis=ax)",
        "u = nl.multiply(t, s)",
    ]
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        s = nl.sum(t, axis=[1])
        nl.store(out, value=nl.multiply(t, s))
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


# --- block dimensions ------------------------------------------------------------------

def test_m0251(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, head=H)
    assert "t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)" in mig(src, "0.1").after
    assert check_runs(tmp_path, src, "0.1", A).outputs == 1


def test_m0252(tmp_path):
    b = rewritten("""
        t = nl.ndarray((2, 3, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
        t[1, 2, 0:128, 0:64] = nl.load(a)
        u = t[1, 2]
        v = t[0:1]
        w = nl.ndarray((128, 64), dtype=t.dtype, buffer=nl.sbuf)
        n = t.shape
    """)
    assert b.splitlines() == [
        "t = [[nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf) for _ in range(3)] for _ in range(2)]",
        "nisa.dma_copy(dst=t[1][2][0:128, 0:64], src=a)",
        "u = t[1][2]",
        "# nkicc-migrate: M0252 a block dimension sliced or used whole: index each block, or fold the blocks "
        "into the free dimension",
        "v = t[0:1]",
        "w = nl.ndarray((128, 64), dtype=t[0][0].dtype, buffer=nl.sbuf)",
        "# nkicc-migrate: M0252 `.shape` of a tensor with block dimensions, now a list of tiles: use one "
        "block's, or the list's length",
        "n = t.shape",
    ]
    src = kernel("""
        out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(2):
            t[i, 0:128, 0:64] = nl.load(a)
        for i in nl.affine_range(2):
            nl.store(out[0:128, i * 64:i * 64 + 64], value=nl.multiply(t[i, 0:128, 0:64], i + 1.0))
        return out
    """)
    assert check_runs(tmp_path, src, None, A, needs_01=True).outputs == 1


def test_m0253():
    src = kernel("t = nl.ndarray((128, 8, 64), dtype=a.dtype, buffer=nl.sbuf)", head=H)
    assert mig(src, "0.1").after == src


# --- 0.2 -> 0.3 ----------------------------------------------------------------------

def test_m0301():
    src = H + "@nki.jit\ndef k(a):\n    return a\n\n\ny = nki.simulate_kernel(k, 1, 2)  # run\n"
    assert "y = nki.simulate(k)(1, 2)  # run" in mig(src, "0.2").after


def test_m0302():
    m = mig(kernel("nisa.tensor_copy_dynamic_src(dst=a, src=a, src_offset=0)", head=H), "0.2")
    assert notes(m) == ["M0302"]


def test_m0303(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, head=H, deco='@nki.jit(platform_target="trn2")')
    m = mig(src, "0.2")
    assert "@nki.jit\ndef k(a):" in m.after
    assert m.infos and "NEURON_PLATFORM_TARGET_OVERRIDE=\"trn2\"" in m.infos[0]
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1


def test_m0304(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, head=H, deco='@nki.jit(mode="simulation", opt_level=2)')
    assert "@nki.jit(opt_level=2)\ndef k(a):" in mig(src, "0.2").after
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1


def _untouched(rule, text):
    """A rule the trace, not the text, decides: the kernel is left as written."""
    src = kernel(text, params="a, b, p", head=H)
    assert mig(src, "0.2").after == src


def test_m0305():
    _untouched("m0305", "nisa.dma_copy(dst=a, src=p[0:128, 0:64])")


def test_m0306():
    _untouched("m0306", "nisa.dma_copy(dst=a, src=b, dge_mode=nisa.dge_mode.hwdge)")


def test_m0307():
    b = body(mig(kernel("""
        nisa.dma_copy(dst=d, src=s, dst_rmw_op=nl.add, unique_indices=True)
        nisa.dma_copy(dst=d, src=s, dst_rmw_op=None)
        nisa.dma_copy(dst=d, src=s, dst_rmw_op=op)
    """, params="d, s, op", head=H), "0.2").after)
    assert b.splitlines() == [
        "nisa.dma_compute(dst=d, srcs=[s, d], reduce_op=nl.add, unique_indices=True)",
        "nisa.dma_copy(dst=d, src=s)",
        "# nkicc-migrate: M0307 dst_rmw_op chosen at run time: dma_copy when it is None, "
        "dma_compute(dst, [src, dst], reduce_op=op) otherwise",
        "nisa.dma_copy(dst=d, src=s, dst_rmw_op=op)",
    ]


def test_m0308():
    _untouched("m0308", "nisa.memset(dst=b, value=2.0)")


def test_m0309():
    _untouched("m0309", "nisa.tensor_reduce(dst=b, op=nl.add, data=a, axis=1)")


def test_m0310():
    b = body(mig(kernel("nisa.dma_compute(d, [s], sc, nl.add)\nnisa.dma_compute(d, [s], reduce_op=nl.add)",
                        params="d, s, sc", head=H), "0.2").after)
    assert b.splitlines() == ["nisa.dma_compute(d, [s], nl.add, scales=sc)", "nisa.dma_compute(d, [s], reduce_op=nl.add)"]


def test_m0311():
    b = body(mig(kernel("nisa.sendrecv(s, d, 1, 0, 0, use_gpsimd_dma=True)\nnisa.sendrecv(s, d, 1, 0, 0, "
                        "use_gpsimd_dma=False)\nnisa.sendrecv(s, d, 1, 0, 0, use_gpsimd_dma=f)", params="s, d, f",
                        head=H), "0.2").after)
    assert b.splitlines()[:2] == ["nisa.sendrecv(s, d, 1, 0, 0, dma_engine=nisa.dma_engine.gpsimd_dma)",
                                  "nisa.sendrecv(s, d, 1, 0, 0, dma_engine=nisa.dma_engine.dma)"]
    assert b.splitlines()[2].startswith("# nkicc-migrate: M0311")


def test_m0312():
    b = body(mig(kernel("nisa.affine_select(d, pat, 5, 1, t, -1.0)", params="d, pat, t", head=H), "0.2").after)
    assert b == "nisa.affine_select(d, pat, 1, t, -1.0, offset=5)"


def test_m0313():
    b = body(mig(kernel("nisa.register_move(r, imm=42)  # set", params="r", head=H), "0.2").after)
    assert b.splitlines() == ["_src0 = nisa.register_alloc(42)", "nisa.register_move(r, _src0)  # set"]


def test_m0314():
    b = body(mig(kernel("rid = ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=0, "
                        "channel_id=0, num_channels=2, replica_group=rg)", params="rg",
                        head=H + "import nki.collectives as ncc\n"), "0.2").after)
    assert "num_channels" not in b and "replica_group=rg)" in b


def test_m0315():
    b = body(mig(kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        tmp = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        return out
    """, head=H), "0.2").after)
    assert b.splitlines()[:2] == ["out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)",
                                  "tmp = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)"]


def test_m0316():
    b = body(mig(kernel("nisa.dma_copy(src=s, dst=d, dge_mode=2)\nnisa.tensor_copy(dst=d, src=s, engine=5)",
                        params="d, s", head=H), "0.2").after)
    assert b.splitlines() == ["nisa.dma_copy(src=s, dst=d, dge_mode=nisa.dge_mode.hwdge)",
                              "nisa.tensor_copy(dst=d, src=s, engine=nisa.engine.vector)"]


def test_m0317(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer="shared_hbm")
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer='sbuf')
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, head=H)
    b = body(mig(src, "0.2").after)
    assert b.splitlines()[:2] == ["out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)",
                                  "t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)"]
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1


def test_m0318():
    src = kernel("nisa.dma_copy(dst=d, src=s)", params="d, s", head=H)
    assert mig(src, "0.2").after == src


def test_m0319(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(t, t, nl.multiply, scale)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, params="a, *, scale=2.0, flag=True", head=H)
    assert "def k(a, scale=2.0, flag=True):" in mig(src, "0.2").after
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1
    bad = kernel("return a", params="a, b=1, *, c", head=H)
    m = mig(bad, "0.2")
    assert notes(m) == ["M0319"] and "def k(a, b=1, *, c):" in m.after


def test_m0320(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        if flag is not None and flag is True:
            nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, params="a, flag=True", head=H)
    assert "if flag != None and flag == True:" in mig(src, "0.2").after
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1


def test_m0321(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(t, t, nl.multiply, float(stride[0] + stride[1]))
        nisa.dma_copy(dst=out, src=t)
        return out
    """, params="a, stride=[1, 2]", head=H) + "\n\ndef call(x):\n    return k(x, stride=[3, 4])\n"
    after = mig(src, "0.2").after
    assert "def k(a, stride=(1, 2)):" in after and "k(x, stride=(3, 4))" in after
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1


@pytest.mark.parametrize("rule", ["m0322", "m0323", "m0324", "m0325"])
def test_notes_only_rules_leave_code(rule):
    """Rules that ask for no change leave a kernel using those APIs as it is."""
    src = kernel("""
        nisa.memset(dst=b, value=0)
        nisa.range_select(dst=b, on_true_tile=a, comp_op0=nl.greater, comp_op1=nl.less, bound0=a, bound1=a)
        nisa.iota(b, [[1, 64]])
        nisa.nc_matmul(p, a, b)
    """, params="a, b, p", head=H)
    assert mig(src, "0.2").after == src


def test_m0322():
    test_notes_only_rules_leave_code("m0322")


def test_m0323():
    b = body(mig(kernel("nisa.range_select(d, t, nl.greater, nl.less, b0, b1, reduce_cmd=nisa.reduce_cmd.idle, "
                        "reduce_res=m, on_false_value=0.0)", params="d, t, b0, b1, m", head=H), "0.2").after)
    assert b == "nisa.range_select(d, t, nl.greater, nl.less, b0, b1, reduce_res=m)"


def test_m0323_check(tmp_path):
    """The 0.2 kernel as written (its front end fills with FP32_MIN) and as migrated agree."""
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        b0 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        b1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(b0, [[0, 1]], 0, 0)
        nisa.iota(b1, [[0, 1]], 40, 0)
        o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.range_select(o, t, nl.greater_equal, nl.less, b0, b1, reduce_cmd=nisa.reduce_cmd.idle, on_false_value=0.0)
        nisa.dma_copy(out, o)
        return out
    """, head=H)
    assert check_runs(tmp_path, src, "0.2", A).outputs == 1


def test_m0324():
    test_notes_only_rules_leave_code("m0324")


def test_m0325():
    test_notes_only_rules_leave_code("m0325")


# --- 0.3 -> 0.4 ... 0.5 -> 0.6 ------------------------------------------------------------

def test_m0401():
    src = kernel("nisa.dma_transpose(dst=d, src=s, axes=(1, 0))", params="d, s", head=H)
    assert mig(src, "0.3").after == src


def test_m0402():
    src = kernel("return a").replace("import neuronxcc.nki.isa as nisa", "from neuronxcc.nki import isa as nisa")
    after = mig(src, "0.1").after
    assert "neuronxcc" not in after and "from nki import isa as nisa" in after


def test_m0403():
    m = mig(kernel("nisa.tensor_copy_dynamic_dst(dst=a, src=a, dst_offset=0)", head=H), "0.3")
    assert notes(m) == ["M0403"]


def test_m0404(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(t, t, nl.multiply, nl.tile_size.total_available_sbuf_size / 1e5)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, head=H)
    assert "nl.tile_size.sbuf_fmax_bytes / 1e5" in mig(src, "0.3").after
    assert check_runs(tmp_path, src, "0.3", A).outputs == 1


def test_m0405():
    from nkicc.migrate_rules import BY_ID
    src = kernel("return a", head=H)
    assert mig(src, "0.3").after == src and BY_ID["M0405"].numerics
    assert mig(src, "0.3").numerics and not mig(src, "0.5").numerics


def test_m0501():
    src = kernel("t = nl.rsqrt(a)", head=H)
    assert mig(src, "0.4").after == src and mig(src, "0.4").numerics


def test_m0502():
    src = kernel("t = a.reshape((64, 128))", head=H)
    assert mig(src, "0.4").after == src


def test_m0503():
    src = kernel("i = nl.program_id(0)", head=H)
    assert mig(src, "0.4").after == src


def test_m0601(tmp_path):
    src = kernel("""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        acc = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.memset(dst=acc, value=0.0)
        # three times, state in SBUF
        for i in nl.dynamic_range(3):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
        nisa.dma_copy(dst=out, src=acc)
        return out
    """, head=H)
    b = body(mig(src, "0.5").after)
    assert b.splitlines()[5:9] == [
        "# three times, state in SBUF",
        "def _loop_body_0(i):",
        "    nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)",
        "nl.fori_loop(0, 3, _loop_body_0)",
    ]
    assert check_runs(tmp_path, src, "0.5", A).outputs == 1
    arithmetic = kernel("""
        for i in nl.dynamic_range(4):
            nisa.dma_copy(dst=t, src=a[0:128, i * 16:i * 16 + 16])
    """, params="a, t", head=H)
    assert notes(mig(arithmetic, "0.5")) == ["M0601"]
    carried = kernel("""
        n = 0
        for i in nl.dynamic_range(1, 9, 2):
            n = n + 1
        return n
    """, head=H)
    assert notes(mig(carried, "0.5")) == ["M0601"]


def test_m0602():
    src = kernel("""
        reg = nisa.register_alloc(3)
        while reg:
            nisa.register_load(reg, c)
    """, params="c", head=H)
    b = body(mig(src, "0.5").after)
    assert b.splitlines() == ["reg = nisa.register_alloc(3)", "def _while_body_0(reg):",
                              "    nisa.register_load(reg, c)", "    return reg", "nl.while_loop(reg, _while_body_0)"]
    py = kernel("""
        flag = True
        while flag:
            flag = False
    """, head=H)
    assert mig(py, "0.5").after == py


def test_m0603():
    from nkicc.migrate_rules import BY_ID
    assert BY_ID["M0603"].how == "none" and "M0601" in BY_ID["M0603"].why
