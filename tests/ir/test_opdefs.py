"""The instruction table: every instruction is one definition that the
tracer, the analyses, both simulators and the timing model read, and a
package adds instructions through an entry point as nkicc's own families do."""
import inspect
import os
import subprocess
import sys
import textwrap

import nkicc.isa as nisa
from nkicc.ir import ops


def test_every_definition_is_complete_and_exported():
    table = ops.table()
    assert {"dma_copy", "nc_matmul", "activation", "tensor_scalar_cumulative", "range_select"} <= set(table)
    import nkicc.language.collectives as cc
    modules = {"isa": nisa, "collectives": cc}
    for name, d in table.items():
        assert d.name == name
        assert callable(d.compute) or callable(d.collective)
        assert callable(d.cost)
        assert d.doc, f"{name} has no docstring"
        module = modules[d.module]
        if not d.public:  # made by the tracer itself (loop heads, rank registers)
            assert name not in module.__all__
            continue
        fn = getattr(module, name)
        assert inspect.signature(fn) == inspect.signature(d.trace)  # the public signature is the definition's
        assert fn.__doc__ == d.trace.__doc__ or (d.since > 2 and fn.__doc__.endswith(d.doc)
                                                 and fn.__doc__.startswith(f"NeuronCore-v{d.since} "))
        assert name in module.__all__


def test_builtin_families_are_entry_points():
    from importlib import metadata
    declared = {ep.value for ep in metadata.entry_points(group=ops.ENTRY_POINT_GROUP)}
    for fam in ops.BUILTIN_FAMILIES:
        assert f"nkicc.ir.ops.{fam}" in declared, fam
    assert {d.family for d in ops.table().values()} <= set(ops.BUILTIN_FAMILIES)


_FAMILY = '''
import numpy as np
from nkicc.ir.ops import Emit, instruction
from nkicc.ir.ops.checks import on_chip_tensors, same_layout
from nkicc.ir.ops.values import tile


def _cube(op, read):
    return [(0, tile(op.ins[0], read) ** 3)]


@instruction(family="cubes", compute=_cube, engine="pool")
def tensor_cube(dst, data, name=None):
    """dst = data ** 3 (a third-party instruction)."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "tensor_cube")
    same_layout(dst, data, "tensor_cube")
    return Emit([dst], [data])
'''

_KERNEL = '''
import numpy as np
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.cache import keys

@nkicc.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_cube(t, nl.load(a[i * 64:(i + 1) * 64, :]))
        nl.store(out[i * 64:(i + 1) * 64, :], value=t)
    return out

a = np.random.default_rng(7).uniform(-2, 2, (128, 16)).astype(np.float32)
got = k(a)
np.testing.assert_allclose(got, a ** 3, rtol=1e-6)
print("families", keys.instruction_families())
print("ok")
'''


def test_a_package_adds_an_instruction_through_an_entry_point(tmp_path):
    pkg = tmp_path / "cubes_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(_FAMILY)
    info = tmp_path / "cubes_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cubes-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[nkicc.instructions]\ncubes = cubes_pkg\n")
    script = tmp_path / "run_cube.py"
    script.write_text(textwrap.dedent(_KERNEL))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    assert "cubes_pkg" in r.stdout  # its source is part of every cache key


def test_an_unknown_opcode_in_the_ir_is_one_coded_error():
    import pytest
    from nkicc.ir import NkiccError
    with pytest.raises(NkiccError) as e:
        ops.get("nc_teleport")
    assert e.value.code == "E900"
