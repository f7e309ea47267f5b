"""A kernel that returns a view of its output (a reshape, an .ap pattern, a
slice) hands the caller that view, at every calling convention: the
elements the view names, in the view's shape. numpy slices the same views of
the expected whole tensors: the oracle."""
import inspect
import textwrap

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc._nki_alias import nki
from tests.support.cli import run_cli

ROWS, COLS = 128, 12


def _views_kernel(a):
    """out1 holds a transposed copy of a (written through an .ap view); the
    kernel returns a reshape of it, a strided .ap view of out2 and a slice of out3."""
    out1 = nl.ndarray((1, ROWS * COLS), dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((ROWS, COLS), dtype=a.dtype, buffer=nl.shared_hbm)
    out3 = nl.ndarray((ROWS, COLS), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nisa.dma_copy(dst=out1.ap([[1, ROWS], [ROWS, COLS]]), src=t)   # out1[0, j*ROWS + p] = a[p, j]
    nl.store(out2, value=nl.multiply(t, 3.0))
    nl.store(out3, value=nl.add(t, 1.0))
    return (out1.reshape((COLS, 4, ROWS // 4)),
            out2.ap([[1, COLS], [COLS, ROWS // 2]], offset=5 * COLS),  # rows 5..68, seen transposed
            out3[7:40, 3:10])


views_jit = nkicc.jit(_views_kernel)
views_nki = nki.jit(_views_kernel)


def _expected(a):
    return (a.T.reshape(COLS, 4, ROWS // 4),
            (a * 3.0)[5:5 + ROWS // 2].T,
            (a + 1.0)[7:40, 3:10])


def _check(got, a):
    want = _expected(a)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.fixture
def a(rng):
    return rng.standard_normal((ROWS, COLS)).astype(np.float32)


def test_jit_call(a):
    _check(views_jit(a), a)


def test_nkicc_simulate_and_nki_simulate(a):
    _check(nkicc.simulate(views_jit)(a), a)
    _check(nki.simulate(views_nki)(a), a)


def test_both_simulators_and_the_unrolled_trace(a):
    for unroll in (False, True):
        compiled = nkicc.compile(views_jit, a, unroll=unroll)
        for simulator in ("machine", "reference"):
            compiled.simulator = simulator
            _check(compiled.run(a), a)


def test_the_views_survive_the_compile_cache(a):
    first = nkicc.compile(views_jit, a, cache=True)
    again = nkicc.compile(views_jit, a, cache=True)
    assert again.report["cache"]["kernel"] == "hit" or again.report["cache"]["source"] == "hit"
    assert again.ir.views == first.ir.views and len(first.ir.views) == 3
    _check(again.run(a), a)


def test_returned_arrays_do_not_alias(a):
    @nkicc.jit
    def two_halves(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out[0:64, :], out[32:96, :]

    top, middle = two_halves(a)
    top[...] = 0
    np.testing.assert_array_equal(middle, a[32:96])


def test_grid_launch(rng):
    @nkicc.jit
    def doubled_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        rows = x.shape[0] // nl.num_programs(0)
        t = nl.load(x[nl.ds(i * rows, rows), :])
        nl.store(out[nl.ds(i * rows, rows), :], value=nl.multiply(t, 2.0))
        return out.reshape((x.shape[0] // 2, 2 * x.shape[1]))

    x = rng.standard_normal((256, 16)).astype(np.float32)
    got = doubled_rows[4](x)
    assert got.shape == (128, 32)
    np.testing.assert_allclose(got, (2 * x).reshape(128, 32), rtol=1e-6)


def test_a_slice_that_is_all_the_kernel_writes_is_not_an_unwritten_output(rng):
    """E174 counts only what is returned: the rest of the tensor behind the
    view was never meant to be written."""
    @nkicc.jit
    def middle_rows(x):
        out = nl.ndarray((256, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[64:192, :], value=nl.load(x))
        return out[64:192, :]

    x = rng.standard_normal((128, 16)).astype(np.float32)
    np.testing.assert_array_equal(middle_rows(x), x)

    @nkicc.jit
    def too_far(x):
        out = nl.ndarray((256, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[64:192, :], value=nl.load(x))
        return out[60:192, :]

    with pytest.raises(nkicc.NkiccError) as err:
        too_far(x)
    assert err.value.code == "E174" and "64 of the 2112 elements" in str(err.value)


def test_the_printed_ir_names_the_view(a):
    head = nkicc.compile(views_jit, a).print_ir().splitlines()[0]
    assert f"as @({7 * COLS + 3}){{[{COLS},33],[1,7]}}" in head


def test_cli_simulate_writes_the_views_to_npz(tmp_path, a):
    (tmp_path / "k.py").write_text(textwrap.dedent(f'''
        import nkicc
        import nkicc.isa as nisa
        import nkicc.language as nl
        ROWS, COLS = {ROWS}, {COLS}
    ''') + textwrap.dedent(_source_of(_views_kernel)).replace("def _views_kernel", "@nkicc.jit\ndef views"))
    np.savez(tmp_path / "in.npz", a=a)
    out = tmp_path / "o.npz"
    r = run_cli("simulate", f"{tmp_path / 'k.py'}::views", "--inputs", str(tmp_path / "in.npz"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert f"float32[{COLS}, 4, {ROWS // 4}]" in r.stdout and "float32[33, 7]" in r.stdout
    got = np.load(out)
    _check([got[f] for f in got.files], a)


def _source_of(fn) -> str:
    return inspect.getsource(fn)


def test_the_kernel_hash_tells_returned_views_apart(a):
    from nkicc.ir import kernel_hash
    from nkicc.ir.serialize import from_json, to_json

    def make(returns):
        @nkicc.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.load(x))
            return returns(out)
        return nkicc.compile(k, a, cache=False).ir

    whole, top, flat = make(lambda o: o), make(lambda o: o[0:64, :]), make(lambda o: o.reshape((1, ROWS * COLS)))
    assert whole.views == () and len({kernel_hash(k) for k in (whole, top, flat)}) == 3
    assert from_json(to_json(top)) == top


def test_a_view_at_a_runtime_offset_is_e104_at_the_return(a):
    @nkicc.jit
    def runtime_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        row = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        return out.ap([[COLS, 64], [1, COLS]], scalar_offset=row, indirect_dim=0)

    with pytest.raises(nkicc.NkiccError) as err:
        runtime_rows(a)
    assert err.value.code == "E104" and "known only at run time" in err.value.message
    assert err.value.loc is not None and err.value.loc.line == runtime_rows.fn.__code__.co_firstlineno + 5
