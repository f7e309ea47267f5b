"""The import surface production NKI kernels use beyond instructions and
dtypes: the `neuronxcc.nki.*` and `nki.isa.constants` paths, the nisa enums
and get_nc_version() by target, nl.NKIObject dataclasses as compile-time
constants; and how a kernel's own failing assert (E003) and an import of a
name nkicc lacks (E160) are reported: one line at the user's line, exit 1.
Small kernels written here; nothing of the vendor's library."""
import dataclasses
import os
import textwrap

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import close, rand
from tests.support.cli import run_cli

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.get_nc_version",
    "nisa.get_nc_sub_version")


def _nkicc(args, cwd):
    return run_cli(*args, cwd=cwd)


def _write(folder, name, text) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def _line_of(path, needle) -> int:
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if needle in line)


def _one_line(proc, code, where):
    """Exit 1, stderr is one diagnostic line with `code` at `where`, no traceback."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error[{code}] ") and where in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


# --- enums, nc_version, NKIObject ----------------------------------------------------

# names and values as the NKI API reference declares them
REFERENCE_ENUMS = {
    "engine": {"tensor": 1, "vector": 5, "scalar": 2, "gpsimd": 3, "dma": 4, "sync": 6, "unknown": 0},
    "reduce_cmd": {"idle": 0, "reset": 1, "reduce": 2, "reset_reduce": 3, "load_reduce": 4},
    "dge_mode": {"unknown": 0, "swdge": 1, "hwdge": 2, "none": 3},
    "oob_mode": {"error": 0, "skip": 1},
    "matmul_perf_mode": {"none": "none", "double_row": "double_row"},
    "nc_version": {"gen2": 2, "gen3": 3, "gen4": 4},
    "dma_engine": {"dma": 1, "gpsimd_dma": 2},
}


def test_nisa_enums_match_the_reference():
    import nkicc.isa.constants as constants
    for enum_name, members in REFERENCE_ENUMS.items():
        cls = getattr(nisa, enum_name)
        assert {m.name: m.value for m in cls} == members, enum_name
        assert getattr(nisa.constants, enum_name) is cls and getattr(constants, enum_name) is cls
        assert enum_name in nisa.__all__
    # kernels compare the generation with members and with plain ints
    assert nisa.nc_version.gen3 > nisa.nc_version.gen2 and nisa.nc_version.gen4 >= 4
    assert nisa.get_nc_version() == nisa.nc_version.gen3 and nisa.get_nc_sub_version() == 0  # outside a trace


@pytest.mark.parametrize("target,version", [("trn1", 2), ("trn2", 3), ("trn3", 4)])
def test_get_nc_version_follows_the_target(rng, target, version):
    @nkicc.jit(target=target)
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        gen = nisa.get_nc_version()
        bonus = 100.0 if gen >= nisa.nc_version.gen4 else 0.0  # a branch on the generation, as kernels do
        nisa.tensor_scalar(dst=r, data=t, op0=nl.multiply, operand0=float(int(gen)), op1=nl.add, operand1=bonus)
        nisa.dma_copy(dst=out, src=r)
        return out

    a = rand(rng, (32, 48))
    close(k(a), a * version + (100.0 if version == 4 else 0.0))
    assert k.compiled[-1].target == target


@dataclasses.dataclass(frozen=True)
class ScaleConfig(nl.NKIObject):
    scale: float = 1.0
    shift: float = 0.0


class Plain(nl.NKIObject):
    pass


@pytest.mark.api("nl.NKIObject")
def test_nkiobject_dataclass_is_a_compile_time_constant(rng):
    @nkicc.jit
    def k(a, cfg: ScaleConfig):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=cfg.scale, op1=nl.add, operand1=cfg.shift)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = rand(rng, (16, 40))
    close(k(a, ScaleConfig(2.0, -0.5)), a * 2.0 - 0.5)
    close(k(a, ScaleConfig(-3.0, 1.25)), a * -3.0 + 1.25)
    assert len(k.compiled) == 2  # a new config value compiles a new variant
    with pytest.raises(dataclasses.FrozenInstanceError):
        ScaleConfig().scale = 2.0
    p = Plain(x=1, y="two")
    assert (p.x, p.y) == (1, "two") and isinstance(p, nl.NKIObject)


@dataclasses.dataclass
class Section(nl.NKIObject):
    index = None   # defaults without annotations: no dataclass fields, still keyword arguments
    offset = 0
    size: int = 128


def test_nkiobject_dataclass_takes_unannotated_attributes_as_keywords():
    s = Section(index=3, offset=256)
    assert (s.index, s.offset, s.size) == (3, 256, 128)
    assert Section().index is None and Section(size=64, index=1).size == 64
    with pytest.raises(TypeError):
        Section(no_such_attribute=1)


@dataclasses.dataclass
class Dims(nl.NKIObject):
    rows: int
    cols: int


def test_a_wrong_nkiobject_call_is_the_kernels_error(rng):
    """A call that leaves out a field (the NKI Library's moe_block_tkg builds a dims dataclass
    without one) fails binding its arguments inside NKIObject's constructor, which only passes
    the call on: E001 at the kernel's line, not an internal error."""
    @nkicc.jit
    def k(a):
        Dims(rows=1)  # MISSING
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (4, 4)))
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# MISSING"))
    assert e.value.code == "E001" and e.value.loc.file == __file__ and e.value.loc.line == line, e.value
    assert "missing 1 required positional argument: 'cols'" in e.value.message


# --- the neuronxcc and constants import paths under `nkicc run` ----------------------

def test_neuronxcc_paths_serve_nkicc(tmp_path):
    _write(tmp_path, "legacy.py", '''
        import sys
        import numpy as np
        import nki
        import nki.language as nl
        import nki.isa as nisa
        import neuronxcc.nki as nxnki
        import neuronxcc.nki.language as nxl
        import neuronxcc.nki.isa as nxisa
        import neuronxcc.nki.typing as nt
        from nki.isa.constants import dge_mode, oob_mode
        from neuronxcc.nki.isa.constants import matmul_perf_mode

        # neuronxcc.nki is NKI 0.1 (docs/dialects.md): its own nl and nisa, the same typing and constants
        assert nxl.__nki_dialect__ == nxisa.__nki_dialect__ == nxnki.__nki_dialect__ == "0.1"
        assert nt is nki.typing and nxnki.typing is nki.typing
        assert dge_mode is nisa.dge_mode and oob_mode.skip.value == 1 and matmul_perf_mode is nisa.matmul_perf_mode

        @nxnki.jit
        def twice(a: nt.tensor):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a, dge_mode=dge_mode.hwdge)
            nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)
            nisa.dma_copy(dst=out, src=t)
            return out

        a = np.random.default_rng(7).uniform(-2, 2, (64, 24)).astype(np.float32)
        np.testing.assert_allclose(twice(a), 2 * a, rtol=1e-6)
        print("legacy: ok")
    ''')
    proc = _nkicc(["run", "legacy.py"], tmp_path)
    assert proc.returncode == 0 and "legacy: ok" in proc.stdout, proc.stdout + proc.stderr


# --- a kernel's own assert: E003 -------------------------------------------------------

ASSERTING = '''
    import nki
    import nki.language as nl
    import nki.isa as nisa


    def kernel_assert(condition, text):
        assert condition, f"validation exception: {text}"


    @nki.jit
    def tiled(a, tile: int = 32):
        kernel_assert(a.shape[0] % tile == 0, f"rows {a.shape[0]} must be a multiple of {tile}")  # CHECK-HELPER
        assert a.shape[1] <= 64, "at most 64 columns"  # CHECK-PLAIN
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out
'''


def test_kernel_assert_helper_is_one_line_at_the_check(tmp_path):
    path = _write(tmp_path, "asserting.py", ASSERTING)
    line = _line_of(path, "CHECK-HELPER")
    proc = _nkicc(["compile", "asserting.py::tiled", "--arg", "a=float32[40,16]"], tmp_path)
    msg = _one_line(proc, "E003", f"asserting.py:{line}:")
    assert "assertion failed: validation exception: rows 40 must be a multiple of 32" in msg
    # the same from Python: an NkiccError with the location, and legal shapes still compile and run
    from nkicc.loader import load_module
    asserting = load_module(path)
    with pytest.raises(nkicc.NkiccError) as e:
        asserting.tiled(np.zeros((40, 16), np.float32))
    assert e.value.code == "E003" and e.value.loc.line == line
    a = rand(np.random.default_rng(3), (64, 16))
    close(asserting.tiled(a), a)


def test_plain_assert_is_one_line_at_the_assert(tmp_path):
    path = _write(tmp_path, "asserting.py", ASSERTING)
    proc = _nkicc(["compile", "asserting.py::tiled", "--arg", "a=float32[64,100]"], tmp_path)
    msg = _one_line(proc, "E003", f"asserting.py:{_line_of(path, 'CHECK-PLAIN')}:")
    assert msg.split(": ", 1)[1].startswith("assertion failed: at most 64 columns")


def test_assert_under_nkicc_run_is_one_line(tmp_path):
    path = _write(tmp_path, "asserting.py", ASSERTING)
    _write(tmp_path, "main.py", '''
        import numpy as np
        from asserting import tiled
        tiled(np.ones((48, 8), np.float32))
    ''')
    _one_line(_nkicc(["run", "main.py"], tmp_path), "E003", f"asserting.py:{_line_of(path, 'CHECK-HELPER')}:")


# --- an import of a name nkicc lacks: E160 at the import ----------------------------------

def test_import_of_a_missing_isa_name_is_E160_at_the_import(tmp_path):
    _write(tmp_path, "helpers.py", '''
        import nki.isa as nisa
        from nki.isa import (
            dma_copy,
            no_such_instruction,
        )
    ''')
    _write(tmp_path, "kern.py", '''
        import nki
        import nki.language as nl
        from helpers import dma_copy


        @nki.jit
        def k(a):
            return a
    ''')
    _write(tmp_path, "main.py", '''
        import numpy as np
        import kern
    ''')
    for args in (["run", "main.py"], ["compile", "kern.py::k", "--arg", "a=float32[4,4]"]):
        msg = _one_line(_nkicc(args, tmp_path), "E160", "helpers.py:")
        assert "nki.isa.no_such_instruction is not supported by nkicc" in msg


def test_missing_submodule_and_import_inside_the_body_are_E160(tmp_path):
    path = _write(tmp_path, "sub.py", '''
        import nki
        import nki.language as nl


        @nki.jit
        def k(a):
            from nki.language import no_such_helper  # BODY-IMPORT
            return a
    ''')
    _write(tmp_path, "main.py", '''
        import nki
        import nki.isa.no_such_module
    ''')
    msg = _one_line(_nkicc(["run", "main.py"], tmp_path), "E160", "main.py:3:")
    assert "nki.isa.no_such_module is not supported" in msg
    msg = _one_line(_nkicc(["compile", "sub.py::k", "--arg", "a=float32[4,4]"], tmp_path), "E160",
                    f"sub.py:{_line_of(path, 'BODY-IMPORT')}:")
    assert "nki.language.no_such_helper" in msg


def test_an_import_error_of_the_users_own_is_not_E160(tmp_path):
    _write(tmp_path, "main.py", '''
        import nki
        import no_such_package_of_the_user
    ''')
    proc = _nkicc(["run", "main.py"], tmp_path)
    assert proc.returncode == 1 and "E160" not in proc.stderr and "ModuleNotFoundError" in proc.stderr


def test_nki_dtype_annotation_and_unknown_nki_names(tmp_path):
    path = _write(tmp_path, "annotated.py", '''
        import numpy as np
        import nki
        import nki.language as nl
        import nki.isa as nisa


        @nki.jit
        def cast(a, out_dtype: nki.dtype = nl.float16):
            out = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=out, src=t)
            return out


        a = np.random.default_rng(5).uniform(-2, 2, (16, 8)).astype(np.float32)
        np.testing.assert_allclose(cast(a).astype(np.float32), a.astype(np.float16).astype(np.float32))
        assert not hasattr(nki, "no_such_thing")
        print("annotated: ok")
        nki.no_such_thing  # USE
    ''')
    proc = _nkicc(["run", "annotated.py"], tmp_path)
    assert "annotated: ok" in proc.stdout
    msg = _one_line(proc, "E160", f"annotated.py:{_line_of(path, '# USE')}:")
    assert "nki.no_such_thing is not supported" in msg


def test_dma_may_start_at_any_partition(rng):
    """The start-partition rule (E111) binds compute instructions, not DMA: kernels
    gather rows one partition at a time (a per-position DMA into row p of a tile)."""
    @nkicc.jit
    def gather_rows(a, order):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        for p, src in enumerate(order):
            nisa.dma_copy(dst=t[p:p + 1, :], src=a[src:src + 1, :])
        nisa.dma_copy(dst=out, src=t)
        return out

    a = rand(rng, (8, 20))
    order = tuple(int(i) for i in rng.permutation(8))
    close(gather_rows(a, order), a[list(order)])


def test_a_jit_kernel_called_from_a_kernel_is_inlined(rng):
    """Library kernels call other @nki.jit kernels as sub-kernels, passing the
    tiles and output tensors of the caller's trace."""
    @nkicc.jit
    def scale_into(a, out, factor: float):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
        nisa.dma_copy(dst=out, src=t)
        return out

    @nkicc.jit
    def caller(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        scale_into(a, out, 3.0)
        return out

    a = rand(rng, (16, 24))
    close(caller(a), 3.0 * a)
    assert not scale_into.compiled  # inlined, never compiled on its own

    @nkicc.jit
    def launches(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        scale_into[2](a, out, 3.0)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        launches(a)
    assert e.value.code == "E160" and "from inside another kernel" in e.value.message


def test_nki_jit_vendor_options_and_an_unknown_one(tmp_path):
    path = _write(tmp_path, "options.py", '''
        import numpy as np
        import nki
        import nki.language as nl
        import nki.isa as nisa


        @nki.jit(mode="auto", debug_kernel=True, show_compiler_tb=True, experimental_flags="x")
        def copy(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=a)
            return out


        a = np.random.default_rng(9).uniform(-1, 1, (4, 6)).astype(np.float32)
        np.testing.assert_array_equal(copy(a), a)
        print("options: ok")


        @nki.jit(no_such_option=1)  # BAD-OPTION
        def other(a):
            return a
    ''')
    proc = _nkicc(["run", "options.py"], tmp_path)
    assert "options: ok" in proc.stdout
    msg = _one_line(proc, "E160", f"options.py:{_line_of(path, 'BAD-OPTION')}:")
    assert "nki.jit option no_such_option= is not supported" in msg
