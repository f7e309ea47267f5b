"""The NKI API surface around the ops: nki.typing annotations, compile-time
constants, several outputs, SPMD launches (kernel[grid], nl.program_id,
nl.num_programs), nki.simulate, the `import nki` alias, the target chosen by
NEURON_PLATFORM_TARGET_OVERRIDE, and engine free-size limits."""
import importlib
import sys
import textwrap

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
import nkicc.language.typing as nt
from nkicc.specs import TensorSpec, annotated_specs
from tests.support.ops_helpers import bf16, check_error, close, f32, rand

# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api("nki.jit", "nki.simulate", "nl.program_id", "nl.num_programs", "nl.program_ndim")


# --- nki.typing ----------------------------------------------------------------------

def test_typing_forms():
    assert nt.tensor[[128, 512], nl.float32].spec == ((128, 512), "float32")
    assert nt.tensor[(4, 5), "bfloat16"].spec == ((4, 5), "bfloat16")
    assert nt.tensor[nl.float16, [3]].spec == ((3,), "float16")
    assert nt.tensor[128, 64, nl.int32].spec == ((128, 64), "int32")
    assert nt.tensor[np.int64(2), 3, np.float32].spec == ((2, 3), "float32")
    assert nt.tensor["float32[16,8]"].spec == ((16, 8), "float32")
    assert nt.tensor[nl.float32].spec is None and nt.tensor.spec is None
    assert nt.tensor[[nl.par_dim(128), 4], nl.float32].spec == ((128, 4), "float32")
    m = nt.mutable_tensor[[2, 2], nl.float32]
    assert m.mutable and m.spec == ((2, 2), "float32") and m != nt.tensor[[2, 2], nl.float32]
    assert m == nt.mutable_tensor[(2, 2), "float32"] and hash(m) == hash(nt.mutable_tensor[(2, 2), "float32"])
    assert repr(nt.tensor) == "nt.tensor" and repr(m) == "nt.mutable_tensor[[2, 2], float32]"
    assert repr(nt.tensor[nl.float32]) == "nt.tensor[?, float32]"
    assert nt.scalar[int] is nt.scalar and repr(nt.scalar) == "nt.scalar"


@pytest.mark.parametrize("key", [([2], [3]), (2, [3]), ([2], nl.float32, nl.int32), ([0, 3], nl.float32),
                                 ([2.5], nl.float32), ("float32[0]",)])
def test_typing_rejects(key):
    with pytest.raises(nkicc.NkiccError) as e:
        nt.tensor[key if len(key) > 1 else key[0]]
    assert e.value.code == "E201"


def test_typing_annotations_run_and_give_default_specs(rng):
    @nkicc.jit
    def k(a: nt.tensor[[64, 32], nl.float32], b: nt.tensor, scale: nt.scalar = 2.0,
          c: "float32[8,8]" = None, d: int = 3):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.add(nl.load(a), nl.load(b)), scale))
        return out

    a, b = rand(rng, (64, 32)), rand(rng, (64, 32))
    close(k(a, b), (f32(a) + f32(b)) * 2.0)
    close(k(a, b, scale=0.5), (f32(a) + f32(b)) * 0.5)
    specs = annotated_specs(k.fn)
    assert specs == {"a": TensorSpec((64, 32), "float32"), "c": TensorSpec((8, 8), "float32")}


def test_typing_postponed_annotations(tmp_path):
    src = textwrap.dedent('''
        from __future__ import annotations
        import nkicc
        import nkicc.language as nl
        import nkicc.language.typing as nt

        @nkicc.jit
        def k(a: nt.tensor[[128, 16], nl.bfloat16], b: nt.tensor[[4], nl.nosuchtype], n: int = 1):
            return None
    ''')
    path = tmp_path / "postponed_kernel.py"
    path.write_text(src)
    sys.path.insert(0, str(tmp_path))
    try:
        mod = importlib.import_module("postponed_kernel")
    finally:
        sys.path.remove(str(tmp_path))
    assert annotated_specs(mod.k.fn) == {"a": TensorSpec((128, 16), "bfloat16")}


def test_cli_compile_uses_typing_annotations(tmp_path):
    from typer.testing import CliRunner
    from nkicc.cli import app

    (tmp_path / "k.py").write_text(textwrap.dedent('''
        import nki
        import nki.language as nl
        import nki.typing as nt

        @nki.jit
        def double(a: nt.tensor[[256, 64], nl.float32]):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(2):
                nl.store(out[i * 128:(i + 1) * 128], value=nl.multiply(nl.load(a[i * 128:(i + 1) * 128]), 2.0))
            return out
    '''))
    r = CliRunner().invoke(app, ["simulate", f"{tmp_path / 'k.py'}::double", "--inputs", "ones"])
    assert r.exit_code == 0, r.output
    assert "float32[256, 64]" in r.output and "max 2" in r.output


# --- constants, several outputs ----------------------------------------------------------

def test_constants_ints_floats_tuples_bools_and_keyword_meta_parameters(rng):
    @nkicc.jit
    def k(a, tile, scale, shift=(1.0, 2.0), *, negate=False, mode="add"):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // tile):
            t = nl.load(a[i * tile:(i + 1) * tile])
            t = nl.multiply(t, -scale if negate else scale)
            t = nl.add(t, shift[0] + shift[1]) if mode == "add" else nl.subtract(t, shift[1])
            nl.store(out[i * tile:(i + 1) * tile], value=t)
        return out

    a = rand(rng, (256, 8))
    close(k(a, 128, 3), f32(a) * 3 + 3.0)
    close(k(a, 64, 0.5, (0.0, 1.0), negate=True), f32(a) * -0.5 + 1.0)
    close(k(a, tile=32, scale=np.float32(2.0), mode="sub"), f32(a) * 2 - 2.0)
    close(k(a, 128, np.array(3.0), (5.0, 0.0)), f32(a) * 3 + 5.0)       # a 0-d array is a constant
    # each distinct constant compiles its own variant; the same ones reuse it
    n = len(k.compiled)
    k(a, 128, 3)
    assert len(k.compiled) == n
    k(a, 128, 4)
    assert len(k.compiled) == n + 1


def test_several_outputs_in_a_tuple_and_list(rng):
    @nkicc.jit
    def k(a, b):
        s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        d = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        nl.store(s, value=nl.add(ta, tb))
        nl.store(d, value=nl.subtract(ta, tb))
        nl.store(m, value=nl.max(ta, axis=1, keepdims=True))
        return s, d, m

    a, b = rand(rng, (32, 16)), rand(rng, (32, 16))
    s, d, m = k(a, b)
    assert d.dtype == bf16 and m.shape == (32, 1)
    close(s, f32(a) + f32(b))
    close(d, f32(a) - f32(b), bf16)
    close(m, f32(a).max(axis=1, keepdims=True))

    @nkicc.jit
    def as_list(a):
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(x, value=nl.load(a))
        return [x]

    np.testing.assert_array_equal(as_list(a), a)


# --- SPMD launches -------------------------------------------------------------------

@nkicc.jit
def negate_rows(a):
    """Program i of the grid negates rows [i*R, (i+1)*R)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = a.shape[0] // nl.num_programs(0)
    t = nl.load(a[nl.ds(i * rows, rows), :])
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
    nisa.activation(dst=o, op=nl.negative, data=t)
    nl.store(out[nl.ds(i * rows, rows), :], value=o)
    return out


def test_grid_1d_rolled_and_matches_unrolled(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        rows = a.shape[0] // nl.num_programs(0)
        t = nl.load(a[nl.ds(i * rows, rows), :])
        o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(o, t, nl.add, 1.0)
        nl.store(out[nl.ds(i * rows, rows), :], value=o)
        return out

    a = rand(rng, (64 * 8, 16))
    close(k[8](a), f32(a) + 1)
    close(k[(4,)](a), f32(a) + 1)
    small = nkicc.compile(k[8], a)
    huge = nkicc.compile(k[1000], np.zeros((1000, 4), np.float32))
    assert small.report["grid"] == [8] and huge.report["grid"] == [1000]
    assert small.report["instructions_rolled"] == huge.report["instructions_rolled"] == 3
    assert huge.report["instructions_executed"] == 3000
    rolled = nkicc.compile(k[8], a).run(a)
    unrolled = nkicc.compile(k[8], a, unroll=True).run(a)
    np.testing.assert_array_equal(rolled, unrolled)


def test_grid_2d_and_3d_program_ids(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        assert nl.program_ndim() == 3 and nl.num_programs() == 2 * 3 * 2
        assert nl.num_programs((0, 2)) == 4 and nl.num_programs([1]) == 3
        i, j, h = nl.program_id(0), nl.program_id(1), nl.program_id(axis=2)
        rows = a.shape[0] // nl.num_programs(0)
        cols = a.shape[1] // nl.num_programs(1)
        half = cols // nl.num_programs(2)
        view = a[nl.ds(i * rows, rows), nl.ds(j * cols + h * half, half)]
        o = nl.ndarray((rows, half), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(o, nl.load(view), nl.multiply, 2.0)
        nl.store(out[nl.ds(i * rows, rows), nl.ds(j * cols + h * half, half)], value=o)
        return out

    a = rand(rng, (2 * 32, 3 * 8))
    close(k[2, 3, 2](a), f32(a) * 2)
    assert nkicc.compile(k[2, 3, 2], a).report["loops"]["rolled"] == 3


def test_grid_branch_on_program_id_splits_and_list_index_goes_concrete(rng):
    factors = [1.0, 2.0, 3.0, 4.0]

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(a[nl.ds(i * 16, 16), :])
        o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
        if i == 0:
            nisa.tensor_scalar(o, t, nl.multiply, -1.0)
        else:
            nisa.tensor_scalar(o, t, nl.add, 10.0)
        nl.store(out[nl.ds(i * 16, 16), :], value=o)
        return out

    a = rand(rng, (64, 8))
    want = f32(a) + 10
    want[:16] = -f32(a[:16])
    close(k[4](a), want)
    assert nkicc.compile(k[4], a).report["loops"]["split"] == 1

    @nkicc.jit
    def by_list(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        o = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(o, nl.load(a[nl.ds(i * 16, 16), :]), nl.multiply, factors[i])
        nl.store(out[nl.ds(i * 16, 16), :], value=o)
        return out

    close(by_list[4](a), f32(a) * np.repeat(factors, 16)[:, None])
    assert nkicc.compile(by_list[4], a).report["loops"]["concrete"] == 1


def test_grid_shared_outputs_allocated_once_private_hbm_per_program(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        total = nl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        scratch = nl.ndarray((16, a.shape[1]), dtype=a.dtype, buffer=nl.hbm)   # private to a program
        i = nl.program_id(0)
        nisa.dma_copy(dst=scratch, src=a[nl.ds(i * 16, 16), :])
        t = nl.load(scratch)
        nl.store(out[nl.ds(i * 16, 16), :], value=nl.negative(t))
        if i == nl.num_programs(0) - 1:
            nl.store(total, value=nl.load(a[nl.ds(i * 16, 1), :]))
        return out, total

    a = rand(rng, (48, 8))
    out, total = k[3](a)
    close(out, -f32(a))
    close(total, f32(a[32:33]))
    c = nkicc.compile(k[3], a)
    assert sum(1 for d in c.traced_ir.tensors if d.buffer == "shared_hbm") == 2


def test_grid_launch_forms_and_simulate(rng):
    a = rand(rng, (32, 4))
    close(nkicc.simulate(negate_rows[2])(a), -f32(a))
    close(nkicc.simulate(negate_rows)[2](a), -f32(a))
    close(negate_rows[np.int64(4)](a), -f32(a))
    close(nkicc.compile(negate_rows[4], a).run(a), -f32(a))
    # no grid: one program, id 0
    close(negate_rows(a), -f32(a))


def test_err_grid(rng):
    with pytest.raises(nkicc.NkiccError) as e:
        negate_rows[0]
    assert e.value.code == "E103"
    with pytest.raises(nkicc.NkiccError):
        negate_rows["two"]
    with pytest.raises(nkicc.NkiccError):
        negate_rows[()]

    @nkicc.jit
    def bad_axis(a):
        i = nl.program_id(1)  # AXIS
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        bad_axis[4](rand(rng, (4, 4)))
    check_error(e, "E103", "# AXIS", "test_nki_api.py")
    with pytest.raises(nkicc.NkiccError) as e:
        nl.program_id(0)
    assert e.value.code == "E160"
    with pytest.raises(nkicc.NkiccError) as e:
        nl.num_programs()
    assert e.value.code == "E160"

    @nkicc.jit
    def bad_axis_type(a):
        nl.num_programs(axes="x")
        return None

    with pytest.raises(nkicc.NkiccError):
        bad_axis_type[2](rand(rng, (4, 4)))

    @nkicc.jit
    def private_out(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, value=nl.load(a))
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        private_out[2](rand(rng, (4, 4)))
    assert e.value.code == "E104"
    np.testing.assert_array_equal(private_out(np.ones((4, 4), np.float32)), np.ones((4, 4)))

    @nkicc.jit
    def differ(a):
        n = 4 if nl.program_id(0) == 0 else 8
        out = nl.ndarray((n, 4), dtype=a.dtype, buffer=nl.shared_hbm)  # DIFFER
        nl.store(out, value=nl.load(a[0:n]))
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        differ[2](rand(rng, (8, 4)))
    check_error(e, "E104", "# DIFFER", "test_nki_api.py")

    @nkicc.jit
    def no_grid(a):
        assert nl.program_ndim() == 0 and nl.num_programs() == 1 and nl.program_id(0) == 0
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    no_grid(rand(rng, (4, 4)))


# --- targets, the nki alias ------------------------------------------------------------

def test_target_from_environment(rng, monkeypatch):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    a = rand(rng, (8, 8))
    assert nkicc.compile(k, a).report["target"] == "trn2"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    assert nkicc.compile(k, a).report["target"] == "trn1"
    k(a)
    assert k.compiled[-1].target == "trn1"
    assert nkicc.compile(k, a, passes={"target": "trn3"}).report["target"] == "trn3"   # an explicit target wins
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(k, a)
    assert e.value.code == "E202"


def test_nki_alias_module(rng, monkeypatch):
    from nkicc.loader import enable_nki_alias
    for name in [m for m in sys.modules if m == "nki" or m.startswith("nki.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert enable_nki_alias()
    import nki
    import nki.isa
    import nki.language
    import nki.typing
    assert nki.language is nl and nki.isa is nisa and nki.typing is nt

    @nki.jit(mode="simulation", platform_target="trn1", show_compiler_tool_output=True)
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(a)))
        return out

    a = rand(rng, (8, 8))
    close(nki.simulate_kernel(k, a), np.exp(f32(a)), rtol=1e-5)
    assert k.compiled[0].target == "trn1"
    close(nki.simulate(k.fn)(a), np.exp(f32(a)), rtol=1e-5)


# --- what NKI rejects: engine free-size limits ----------------------------------------------

def test_err_free_size_limits(rng, monkeypatch):
    @nkicc.jit
    def sbuf_wide(a):
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 70000), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(t, 0.0)  # SBUF
        nl.store(out, value=t[:, 0:4])
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        sbuf_wide(rand(rng, (1, 4)))
    check_error(e, "E134", "# SBUF", "test_nki_api.py")

    @nkicc.jit
    def psum_wide(a):
        out = nl.ndarray((4, 5000), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((4, 5000), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.memset(p, 0.0)  # PSUM
        t = nl.ndarray((4, 5000), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(t, p)
        nl.store(out, value=t)
        return out

    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")  # a PSUM tile may span the 8 banks
    with pytest.raises(nkicc.NkiccError) as e:
        psum_wide(rand(rng, (4, 1)))
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    check_error(e, "E134", "# PSUM", "test_nki_api.py")

    @nkicc.jit
    def at_limit(a):
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 65536), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(t, 1.0)
        w = nl.ndarray((1, 4096), dtype=nl.float32, buffer=nl.sbuf)
        p = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(p, nl.load(a[:, 0:1]))
        nisa.tensor_copy(w, p.broadcast_to((1, 4096)))
        nl.store(out, value=nl.add(t[:, 0:4], w[:, 0:4]))
        return out

    np.testing.assert_array_equal(at_limit(np.full((1, 4), 2.0, np.float32)), np.full((1, 4), 3.0))


def test_free_size_limit_counts_distinct_elements(rng):
    """A broadcast view re-reads its elements: a [n, 1] PSUM column broadcast over 8 Ki
    columns is 1 element per partition of PSUM (the library's layernorm_tkg subtracts its PSUM
    mean so), within the 4 Ki limit the partition's physical size sets."""
    @nkicc.jit
    def centre(x, m):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        mean = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(mean, nl.load(m))
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(t, nl.load(x), mean.broadcast_to(x.shape), nl.subtract)
        nl.store(out, value=t)
        return out

    x, m = rand(rng, (8, 8192)), rand(rng, (8, 1))
    np.testing.assert_allclose(centre(x, m), x - m, rtol=1e-6)
