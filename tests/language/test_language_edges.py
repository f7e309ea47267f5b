"""The corners of nkicc.language that kernels reach less often: loop iterators
outside a trace, symbolic index arithmetic, tensor views (reshape, ds, slices,
.ap) and the mistakes each of them reports with a code and the kernel line."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.language import dtypes
from tests.support.ops_helpers import check_error, close, f32, rand


# --- loop iterators outside a trace behave like range --------------------------------

@pytest.mark.parametrize("it", [nl.affine_range, nl.static_range, nl.sequential_range, nl.dynamic_range])
def test_iterators_outside_a_trace_are_ranges(it):
    r = it(2, 11, 3)
    assert list(r) == [2, 5, 8] and len(r) == 3 and r[1] == 5 and 8 in r and 9 not in r
    assert list(reversed(r)) == [8, 5, 2] and (r.start, r.stop, r.step) == (2, 11, 3)
    assert repr(r) == f"{it.__name__}(2, 11, 3)"
    assert list(it(np.int64(3))) == [0, 1, 2]


def test_nl_range_is_a_static_loop_and_star_imports_keep_pythons(rng):
    """The NKI Library writes `for k in nl.range(n)`: a static loop, kept rolled. `from nl import *`
    does not rebind Python's range."""
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.range(a.shape[0] // 32):
            nl.store(out[i * 32:(i + 1) * 32, :], value=nl.multiply(nl.load(a[i * 32:(i + 1) * 32, :]), 2.0))
        return out

    a = rand(rng, (128, 16))
    close(k(a), 2 * a)
    compiled = nkicc.compile(k, a)
    assert compiled.report["loops"]["rolled"] == 1 and compiled.report["instructions_rolled"] == 3
    scope = {}
    exec("from nkicc.language import *", scope)
    assert "range" not in scope and nl.range(2, 8, 3)[1] == 5


def test_iterator_mistakes():
    with pytest.raises(nkicc.NkiccError) as e:
        nl.affine_range(2.5)
    assert e.value.code == "E103"
    with pytest.raises(nkicc.NkiccError) as e:
        nl.static_range(0, 4, 0)
    assert e.value.code == "E103"


def test_iterators_in_comprehensions_and_list_inside_a_kernel(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        offsets = [i * 8 for i in nl.affine_range(a.shape[0] // 8)]     # plain ints
        assert offsets == list(range(0, a.shape[0], 8))
        for o in offsets:
            nl.store(out[o:o + 8], value=nl.negative(nl.load(a[o:o + 8])))
        return out

    a = rand(rng, (32, 4))
    close(k(a), -f32(a))


def test_err_dynamic_range_negative_step(rng):
    @nkicc.jit
    def k(a):
        for i in nl.dynamic_range(4, 0, -1):  # STEP
            pass
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (4, 4)))
    check_error(e, "E103", "# STEP", "test_language_edges.py")


# --- symbolic index arithmetic -----------------------------------------------------------

def test_symbolic_index_arithmetic_stays_affine(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        n = a.shape[0] // 4
        for i in nl.affine_range(n):
            j = +(2 * i + 1 - 1) // 2             # exact: i
            j = (j << 1) >> 1                      # i
            j = -(-j)                              # i
            j = ~(~j)                              # i
            j = j ** 1 + (j ** 0 - 1)              # i
            j = round(j) + (3 - 3)                 # i
            j = abs(j)                             # i >= 0: no split
            assert (j % 1 == 0) and divmod(j, 1)[1] == 0 and (i // 64) == 0
            import math
            assert math.trunc(j) is j and math.floor(j) is j and math.ceil(j) is j
            rows = nl.ds(j * 4, 4)
            assert f"{j}" == str(j) == repr(j)[7:-1] == "i0"
            nl.store(out[rows], value=nl.load(a[rows]))
        return out

    a = rand(rng, (32, 4))
    np.testing.assert_array_equal(k(a), a)
    assert nkicc.compile(k, a).report["loops"] == {"rolled": 1, "split": 0, "concrete": 0, "dynamic": 0}


@pytest.mark.parametrize("expr", [
    lambda i: i * 1.5, lambda i: i + 0.5, lambda i: i - 0.5, lambda i: 0.5 - i, lambda i: i / 2,
    lambda i: 8 / (i + 1), lambda i: 8 // (i + 1), lambda i: 8 % (i + 1), lambda i: divmod(8, i + 1)[0],
    lambda i: 2 ** i, lambda i: 1 << i, lambda i: 64 >> i, lambda i: i & 1, lambda i: i | 1, lambda i: i ^ 1,
    lambda i: 3 & i, lambda i: i * i, lambda i: i ** 2, lambda i: i // 3, lambda i: i % 3,
    lambda i: round(i, -1), lambda i: int(float(i)), lambda i: hash(i) % 4, lambda i: int(i < 2.5),
    lambda i: i // (i + 1), lambda i: (i + 1) // 1.0,
])
def test_non_affine_index_math_traces_that_loop_concretely(rng, expr):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0]):
            v = expr(i)
            nl.store(out[i:i + 1], value=nl.full((1, 1), float(v), nl.float32))
        return out

    a = rand(rng, (4, 4))
    np.testing.assert_array_equal(k(a)[:, 0], np.float32([float(expr(t)) for t in range(4)]))
    assert k.compiled[0].report["loops"]["concrete"] == 1


def test_symbolic_comparisons_split_the_loop(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0]):
            t = nl.load(a[i])
            if i != 1 and bool(i) and i <= 2:
                t = nl.negative(t)
            nl.store(out[i], value=t)
        return out

    a = rand(rng, (5, 3))
    want = f32(a).copy()
    want[2] *= -1
    close(k(a), want)
    assert nkicc.compile(k, a).report["loops"]["split"] == 1


# --- tensor views and their mistakes ------------------------------------------------------

def test_tensor_properties_reshape_and_views(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], a.shape[1] * a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
        assert len(a) == a.shape[0] and a.ndim == 3 and a.itemsize == 4 and "hbm" in repr(a)
        flat = a.reshape((a.shape[0], a.shape[1] * a.shape[2]))
        t = nl.load(flat)
        assert t.name and t.buffer == "sbuf"
        back = t.reshape([a.shape[0], a.shape[1], a.shape[2]])
        u = nl.ndarray(back.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=back[..., ::1])
        nl.store(out, value=u.reshape((a.shape[0], a.shape[1] * a.shape[2])))
        return out

    a = rand(rng, (8, 3, 5))
    np.testing.assert_array_equal(k(a), a.reshape(8, 15))


def test_slices_negative_bounds_and_ap_with_int_scalar_offset(rng):
    @nkicc.jit
    def k(a):
        o1 = nl.ndarray((a.shape[0], 3), dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((2, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(o1, value=nl.load(a[:, -4:-1]))
        nl.store(o2, value=nl.load(a.ap([[a.shape[1], 2], [1, a.shape[1]]], scalar_offset=1, indirect_dim=0)))
        return o1, o2

    a = rand(rng, (4, 6))
    o1, o2 = k(a)
    np.testing.assert_array_equal(o1, a[:, -4:-1])
    np.testing.assert_array_equal(o2, a[1:3])


def _expect(rng, body, code, shape=(8, 8)):
    @nkicc.jit
    def k(a):
        body(a)
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, shape))
    assert e.value.code == code, e.value
    assert e.value.loc is not None and e.value.loc.file.endswith("test_language_edges.py"), e.value


MISTAKES = {
    "iterate": (lambda a: list(iter(a)), "E103"),
    "truth_of_a_comparison": (lambda a: bool(nl.load(a) > 0.0), "E103"),
    "truth_of_nl_less": (lambda a: bool(nl.less(nl.load(a), 0.0)), "E103"),
    "truth_of_a_compared_slice": (lambda a: bool(nl.equal(nl.load(a), nl.load(a))[0:2, :]), "E103"),
    "two_ellipses": (lambda a: a[..., ...], "E103"),
    "too_many_indices": (lambda a: a[0, 0, 0], "E103"),
    "tensor_index": (lambda a: a[nl.load(a)], "E160"),
    "zero_step": (lambda a: a[::0], "E103"),
    "empty_slice": (lambda a: a[3:3], "E101"),
    "ap_vector_offset_hbm": (lambda a: a.ap([[1, 4]], vector_offset=a), "E103"),  # indices must be an SBUF tile
    "ap_dtype_runtime_offset": (lambda a: a.ap([[1, 4]], dtype=nl.int8, scalar_offset=nl.load(a)), "E160"),
    "ap_not_pairs": (lambda a: a.ap([1, 4]), "E103"),
    "ap_zero_num": (lambda a: a.ap([[1, 0]]), "E103"),
    "ap_indirect_dim": (lambda a: a.ap([[1, 4]], indirect_dim=2), "E103"),
    "ap_scalar_shape": (lambda a: a.ap([[1, 4]], scalar_offset=nl.load(a)), "E103"),
    "ap_scalar_hbm": (lambda a: a.ap([[1, 4]], scalar_offset=a[0:1, 0:1]), "E120"),
    "ap_scalar_type": (lambda a: a.ap([[1, 4]], scalar_offset="x"), "E103"),
    "ap_out_of_bounds": (lambda a: nl.load(a.ap([[8, 8], [1, 9]])), "E101"),  # where it is used (made: free)
    "reshape_count": (lambda a: a.reshape((3, 3)), "E140"),
    "reshape_strided": (lambda a: a[:, :4].reshape((32,)), "E140"),  # rows 8 apart, 4 used: needs a copy
    "buffer": (lambda a: nl.ndarray((2, 2), nl.float32, buffer="l3"), "E160"),
    "shape_entry": (lambda a: nl.ndarray((2, "x"), nl.float32), "E103"),
    "shape_zero": (lambda a: nl.ndarray((2, 0), nl.float32), "E103"),
    "zeros_on_hbm": (lambda a: nl.zeros((2, 2), nl.float32, buffer=nl.shared_hbm), "E120"),
    "not_a_dtype": (lambda a: nl.ndarray((2, 2), dtype=object()), "E160"),
    "float64_ok_complex_not": (lambda a: (nl.ndarray((2, 2), dtype=np.float64),
                                          nl.ndarray((2, 2), dtype=np.complex64)), "E160"),
    "op_needs_tile": (lambda a: nl.add(1.0, 2.0), "E103"),
    "op_not_tensor": (lambda a: nl.exp([1.0]), "E103"),
    "nisa_not_tensor": (lambda a: nisa.memset([1.0], 0.0), "E103"),
    "memset_value": (lambda a: nisa.memset(nl.load(a), "zero"), "E103"),
    "too_many_partitions": (lambda a: nisa.memset(a.ap([[1, 129], [1, 1]]), 0.0), "E120"),
    "rmw": (lambda a: nisa.dma_copy(nl.load(a), a, dst_rmw_op=nl.add), "E160"),
    "accumulate": (lambda a: nisa.nc_matmul(nl.ndarray((8, 8), nl.float32, buffer=nl.psum), nl.load(a),
                                            nl.load(a), accumulate=2), "E103"),
    "reduce_res": (lambda a: nisa.activation(nl.load(a), nl.exp, nl.load(a),
                                             reduce_res=nl.ndarray((8, 2), nl.float32)), "E140"),
    "axis_type": (lambda a: nl.sum(nl.load(a), axis=[1.0]), "E103"),
    "broadcast_rank": (lambda a: nl.broadcast_to(nl.load(a), (8,)), "E140"),
    "load_transpose2d_3d": (lambda a: nl.load_transpose2d(a.reshape((2, 4, 8))), "E140"),
    "transpose_3d": (lambda a: nl.transpose(nl.load(a.reshape((2, 4, 8)))), "E140"),
    "expand_dims_axis": (lambda a: nl.expand_dims(nl.load(a), 5), "E103"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_view_and_creation_mistakes(rng, name):
    body, code = MISTAKES[name]
    _expect(rng, body, code, shape=(8, 8) if name != "too_many_partitions" else (200, 1))


@pytest.mark.parametrize("what", ["slice", "ds", "shape"])
def test_sizes_that_depend_on_a_hardware_loop_index(rng, what):
    """A dynamic_range loop is one instruction stream on the device: a size that moves with its
    index is E102, at the kernel's line."""
    @nkicc.jit
    def k(a):
        for i in nl.dynamic_range(1, 3):
            if what == "slice":
                a[i:2 * i]  # SIZE
            elif what == "ds":
                nl.ds(0, i)  # SIZE
            else:
                nl.ndarray((i + 1, 2), nl.float32)  # SIZE
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (8, 8)))
    assert e.value.code == "E102" and e.value.loc.file.endswith("test_language_edges.py")
    assert "dynamic_range index" in e.value.message


@pytest.mark.parametrize("loop", ["static_range", "affine_range", "sequential_range"])
@pytest.mark.parametrize("what", ["slice", "ds", "shape"])
def test_sizes_that_move_with_a_static_loop_index(rng, loop, what):
    """NKI's static loops are Python ranges (the API reference: an alias for range()), so a size
    may move with the index, as the NKI Library's rotational_topk slices a growing prefix: nkicc
    traces that loop concretely, one size per iteration."""
    @nkicc.jit
    def k(a):
        out = nl.ndarray((a.shape[0], 3), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((a.shape[0], 3), dtype=nl.float32, buffer=nl.sbuf)
        for i in getattr(nl, loop)(3):
            width = 16 + 8 * i
            if what == "slice":
                t = nl.load(a[:, 0:width])
            elif what == "ds":
                t = nl.load(a[:, nl.ds(0, width)])
            else:
                t = nl.ndarray((a.shape[0], width), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a[:, 0:width])
            nisa.tensor_reduce(dst=res[:, i:i + 1], data=t, op=nl.add, axis=1)
        nisa.dma_copy(dst=out, src=res)
        return out

    a = rand(rng, (128, 64))
    want = np.stack([a[:, :16 + 8 * i].sum(axis=1) for i in range(3)], axis=1)
    close(k(a), want)
    assert nkicc.compile(k, a).report["loops"]["concrete"] == 1


def test_an_optional_tile_is_true(rng):
    """`if tile:` tests presence, as NKI's Python objects answer it and the NKI Library's MoE
    kernels write it: the kernel takes the branch. (A comparison's truth is E103: MISTAKES.)"""
    def add_if_given(dst, src, maybe=None):
        if maybe:
            nisa.tensor_tensor(dst=dst, data1=src, data2=maybe, op=nl.add)
        else:
            nisa.tensor_copy(dst=dst, src=src)

    @nkicc.jit
    def k(a, given):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        res = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        add_if_given(res, t, nl.exp(t) if given else None)
        nl.store(out, value=res)
        return out

    a = rand(rng, (128, 32))
    close(k(a, True), a + np.exp(a))
    close(k(a, False), a)


def test_while_on_a_tile_is_an_error_not_a_hang(rng):
    """A tile is always true, so `while t:` would trace forever: after MAX_TRUTH_TESTS tests of one
    tensor it is E103 at the loop's line."""
    @nkicc.jit
    def k(a):
        t = nl.load(a)
        while t:  # WHILE
            pass
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (8, 8)))
    check_error(e, "E103", "# WHILE", "test_language_edges.py")
    assert "nl.while_loop" in e.value.hint


def test_outside_a_kernel():
    with pytest.raises(nkicc.NkiccError) as e:
        nl.ndarray((2, 2), nl.float32)
    assert e.value.code == "E160"
    with pytest.raises(nkicc.NkiccError):
        nisa.memset(None, 0.0)


def test_creation_helpers(rng):
    @nkicc.jit
    def k(a):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((4,), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(o1, value=nl.add(nl.ones_like(t), nl.zeros_like(t, dtype=nl.bfloat16)))
        e = nl.empty_like(t, dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(e, True)
        one_d = nl.full(4, np.int32(7), dtype=nl.int32)              # a 1-d tile, an int shape
        nisa.tensor_tensor(one_d, one_d, e[0:4, 0], nl.add)
        nl.store(o2, value=one_d)
        return o1, o2

    o1, o2 = k(rand(rng, (4, 4)))
    np.testing.assert_array_equal(o1, np.ones((4, 4)))
    np.testing.assert_array_equal(o2, [8, 8, 8, 8])


def test_dtype_names():
    assert dtypes.dtype_name("fp32") == "float32" and dtypes.dtype_name("bf16") == "bfloat16"
    assert dtypes.dtype_name(np.float64) == "float32" and dtypes.dtype_name(np.int64) == "int32"
    assert dtypes.dtype_name(nl.tfloat32) == "tfloat32" and dtypes.dtype_name("float8_e4m3fn") == "float8_e4m3fn"
    assert dtypes.float8_e4m3 is nl.float8_e4m3
    with pytest.raises(AttributeError):
        dtypes.nosuch  # noqa: B018
    with pytest.raises(nkicc.NkiccError):
        dtypes.dtype_name("float7")
