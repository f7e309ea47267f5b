"""nl.NkiTensor: the reference's zero-copy view methods, checked by moving the
view's elements out of a kernel and comparing with numpy's view of the same
array (transpose, reshape, slicing, broadcasting); plus MemoryRegion,
is_sbuf/is_psum/is_hbm/is_on_chip and nl.tile_size."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error, rand

api = pytest.mark.api


def hbm_view_kernel(make_view, facts=None):
    """Copy make_view(a) (a view of the HBM input) out with one HBM->HBM DMA."""
    @nkicc.jit
    def k(a):
        v = make_view(a)
        if facts is not None:
            facts.append((v.shape, v.strides, v.offset, v.size, v.is_contiguous(), v.get_pattern(),
                          v.is_indirect(), v.ndim))
        out = nl.ndarray(v.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=v)
        return out
    return k


def sbuf_view_kernel(make_view):
    """Load the input into SBUF, copy make_view(tile) into a new tile on chip, store it."""
    @nkicc.jit
    def k(a):
        t = nl.load(a)
        v = make_view(t)
        copy = nl.ndarray(v.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=copy, src=v)
        out = nl.ndarray(v.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=copy)
        return out
    return k


def _np_facts(base: np.ndarray, view: np.ndarray):
    """strides and offset of a numpy view of a C-contiguous base, in elements."""
    item = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return tuple(s // item for s in view.strides), offset


# (name, nkicc view of a, numpy view of a) on an HBM tensor of shape (4, 6, 8)
HBM_VIEWS = [
    ("permute", lambda a: a.permute((2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    ("permute_identity", lambda a: a.permute((0, 1, 2)), lambda a: a),
    ("broadcast", lambda a: a.slice(1, 2, 3).broadcast(1, 5), lambda a: np.broadcast_to(a[:, 2:3], (4, 5, 8))),
    ("expand_dim", lambda a: a.expand_dim(1), lambda a: a[:, None]),
    ("expand_dim_end", lambda a: a.expand_dim(3), lambda a: a[..., None]),
    ("squeeze_dim", lambda a: a.slice(2, 3, 4).squeeze_dim(2), lambda a: a[:, :, 3]),
    ("reshape_dim", lambda a: a.reshape_dim(1, (2, -1)), lambda a: a.reshape(4, 2, 3, 8)),
    ("reshape_dim_trivial", lambda a: a.reshape_dim(0, (4,)), lambda a: a),
    ("flatten_dims", lambda a: a.flatten_dims(1, 2), lambda a: a.reshape(4, 48)),
    ("flatten_all", lambda a: a.flatten_dims(0, 2), lambda a: a.reshape(192)),
    ("reshape", lambda a: a.reshape((8, 3, 8)), lambda a: a.reshape(8, 3, 8)),
    ("reshape_infer", lambda a: a.reshape((-1, 16)), lambda a: a.reshape(-1, 16)),
    ("reshape_strided", lambda a: a[:, :, ::2].reshape((24, 4)), lambda a: a[:, :, ::2].reshape(24, 4)),
    ("reshape_ones", lambda a: a[1].reshape((1, 6, 1, 8)), lambda a: a[1].reshape(1, 6, 1, 8)),
    ("rearrange", lambda a: a.rearrange(("b", ("h", "w"), "c"), ("b", "w", "h", "c"), {"h": 2}),
     lambda a: a.reshape(4, 2, 3, 8).transpose(0, 2, 1, 3)),
    ("rearrange_merge", lambda a: a.rearrange(("b", "h", "c"), (("b", "h"), "c")), lambda a: a.reshape(24, 8)),
    ("rearrange_swap", lambda a: a.rearrange(("b", "h", "c"), ("c", "b", "h")), lambda a: a.transpose(2, 0, 1)),
    ("slice", lambda a: a.slice(2, 1, 7, 2), lambda a: a[:, :, 1:7:2]),
    ("slice_last", lambda a: a.slice(0, 3, 4), lambda a: a[3:4]),
    ("select", lambda a: a.select(1, 3), lambda a: a[:, 3]),
    ("select_negative", lambda a: a.select(2, -1), lambda a: a[:, :, -1]),
    ("chain", lambda a: a.permute((1, 0, 2)).slice(0, 1, 5).select(2, 6), lambda a: a.transpose(1, 0, 2)[1:5, :, 6]),
    ("ap_composes_offset", lambda a: a[1].ap([[8, 6], [1, 8]], offset=2),
     lambda a: a.reshape(-1)[50:98].reshape(6, 8)),
    ("ap_no_offset", lambda a: a[2:4].ap([[1, 5]]), lambda a: a.reshape(-1)[96:101]),
]


@api("nl.NkiTensor", "nl.NkiTensor.permute", "nl.NkiTensor.broadcast", "nl.NkiTensor.expand_dim",
     "nl.NkiTensor.squeeze_dim", "nl.NkiTensor.reshape_dim", "nl.NkiTensor.flatten_dims", "nl.NkiTensor.reshape",
     "nl.NkiTensor.rearrange", "nl.NkiTensor.slice", "nl.NkiTensor.select", "nl.NkiTensor.ap",
     "nl.NkiTensor.shape", "nl.NkiTensor.strides", "nl.NkiTensor.offset", "nl.NkiTensor.size",
     "nl.NkiTensor.ndim", "nl.NkiTensor.get_pattern", "nl.NkiTensor.is_contiguous", "nl.NkiTensor.is_indirect")
@pytest.mark.parametrize("name,view,np_view", HBM_VIEWS, ids=[v[0] for v in HBM_VIEWS])
def test_hbm_view_elements_and_layout(rng, name, view, np_view):
    a = rand(rng, (4, 6, 8))
    facts = []
    got = hbm_view_kernel(view, facts)(a)
    want = np_view(a)
    np.testing.assert_array_equal(got, want)
    shape, strides, offset, size, contiguous, pattern, indirect, ndim = facts[0]
    assert shape == want.shape and size == want.size and ndim == want.ndim
    if name != "ap_composes_offset" and name != "ap_no_offset":
        want_strides, want_offset = _np_facts(a, want)
        # numpy gives broadcast and size-1 dimensions any stride; only real ones must agree
        assert [s for s, n in zip(strides, shape) if n > 1] == [s for s, n in zip(want_strides, shape) if n > 1]
        assert offset == want_offset
        assert contiguous == (want.flags.c_contiguous and 0 not in [s for s, n in zip(want_strides, shape) if n > 1])
    assert pattern == [[s, n] for s, n in zip(strides, shape)]
    assert indirect is False


SBUF_VIEWS = [
    ("reshape_dim_permute", lambda t: t.reshape_dim(1, (4, 6)).permute((0, 2, 1)),
     lambda a: a.reshape(-1, 4, 6).transpose(0, 2, 1)),
    ("rearrange", lambda t: t.rearrange(("p", ("h", "w")), ("p", "w", "h"), {"h": 4}),
     lambda a: a.reshape(-1, 4, 6).transpose(0, 2, 1)),
    ("reshape_free", lambda t: t.reshape((t.shape[0], 2, 12)), lambda a: a.reshape(-1, 2, 12)),
    ("flatten_after_split", lambda t: t.reshape_dim(1, (2, 3, 4)).flatten_dims(2, 3),
     lambda a: a.reshape(-1, 2, 12)),
    ("broadcast", lambda t: t.slice(1, 5, 6).broadcast(1, 7), lambda a: np.broadcast_to(a[:, 5:6], (a.shape[0], 7))),
    ("expand_squeeze", lambda t: t.expand_dim(1).squeeze_dim(1), lambda a: a),
    ("select_free", lambda t: t.reshape_dim(1, (4, 6)).select(2, 4), lambda a: a.reshape(-1, 4, 6)[:, :, 4]),
    ("select_partition_keeps_dim", lambda t: t.select(0, 32), lambda a: a[32:33]),  # a legal start partition
    ("slice_step", lambda t: t.slice(1, 0, 24, 5), lambda a: a[:, 0:24:5]),
]


@api("nl.NkiTensor.permute", "nl.NkiTensor.rearrange", "nl.NkiTensor.reshape", "nl.NkiTensor.reshape_dim",
     "nl.NkiTensor.flatten_dims", "nl.NkiTensor.broadcast", "nl.NkiTensor.expand_dim", "nl.NkiTensor.squeeze_dim",
     "nl.NkiTensor.select", "nl.NkiTensor.slice")
@pytest.mark.parametrize("partitions", [128, 1])
@pytest.mark.parametrize("name,view,np_view", SBUF_VIEWS, ids=[v[0] for v in SBUF_VIEWS])
def test_sbuf_view_elements(rng, name, view, np_view, partitions):
    if name == "select_partition_keeps_dim" and partitions == 1:
        pytest.skip("one partition has no partition 32")
    a = rand(rng, (partitions, 24))
    np.testing.assert_array_equal(sbuf_view_kernel(view)(a), np_view(a))


@api("nl.NkiTensor.select", "nl.NkiTensor.is_indirect")
def test_select_with_runtime_index(rng):
    facts = []

    @nkicc.jit
    def k(a, idx):
        i = nl.load(idx)
        v = a.select(0, i)
        facts.append((v.shape, v.is_indirect()))
        out = nl.ndarray(v.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=v)
        col = nl.ndarray((a.shape[0], a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=col, src=a.select(2, i))
        return out, col

    a = rand(rng, (5, 16, 6))
    for which in (0, 3, 4):
        idx = np.array([[which]], dtype=np.int32)
        out, col = k(a, idx)
        np.testing.assert_array_equal(out, a[which])
        np.testing.assert_array_equal(col, a[:, :, which])
    assert facts[0] == ((16, 6), True)


@api("nl.NkiTensor.select")
def test_select_runtime_index_on_a_free_dimension(rng):
    @nkicc.jit
    def k(a, idx):
        i = nl.load(idx)
        out = nl.ndarray((a.shape[0], a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a.select(1, i))
        return out

    a = rand(rng, (16, 7, 5))
    for which in (0, 6):
        np.testing.assert_array_equal(k(a, np.array([[which]], dtype=np.int32)), a[:, which])


@api("nl.NkiTensor")
def test_constructor_new_and_rebound_storage(rng):
    @nkicc.jit
    def k(a):
        t = nl.NkiTensor(a.shape, a.dtype, None, buffer=nl.sbuf)     # fresh storage, as nl.ndarray
        assert isinstance(t, nl.NkiTensor) and isinstance(a, nl.NkiTensor)
        nisa.dma_copy(dst=t, src=a)
        flat = nl.ndarray((a.shape[0] * a.shape[1],), dtype=a.dtype, buffer=nl.shared_hbm)
        again = nl.NkiTensor(a.shape, a.dtype, flat, buffer=nl.shared_hbm)  # the same storage, 2-d
        nl.store(again, value=t)
        return flat

    a = rand(rng, (8, 12))
    np.testing.assert_array_equal(k(a), a.reshape(-1))


@api("nl.NkiTensor.view", "nl.NkiTensor.reinterpret_cast")
def test_view_to_its_own_dtype_is_the_same_view(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        v = a.view(nl.float32)
        assert v.get_pattern() == a.get_pattern()
        nisa.dma_copy(dst=out, src=a.reinterpret_cast(nl.float32))
        return out

    a = rand(rng, (3, 5))
    np.testing.assert_array_equal(k(a), a)


def test_is_contiguous_on_chip_ignores_the_partition_step():
    facts = []

    @nkicc.jit
    def k(a):
        t = nl.load(a)
        facts.append((t.is_contiguous(), t[:, 0:4].is_contiguous(), t[:, ::2].is_contiguous(),
                      a[:, 0:4].is_contiguous(), a[0:2].is_contiguous(), t.permute((0, 1)).is_contiguous()))
        return None

    k(np.zeros((8, 8), np.float32))
    assert facts[0] == (True, True, False, False, True, True)


MISTAKES = {
    "permute_partition": (lambda t, a: t.reshape_dim(1, (2, 4)).permute((1, 0, 2)), "E140"),  # MARK permute_partition
    "permute_not_perm": (lambda t, a: a.permute((0, 0)), "E140"),  # MARK permute_not_perm
    "broadcast_not_one": (lambda t, a: a.broadcast(1, 3), "E140"),  # MARK broadcast_not_one
    "broadcast_partition": (lambda t, a: t[0:1].broadcast(0, 4), "E140"),  # MARK broadcast_partition
    "squeeze_not_one": (lambda t, a: a.squeeze_dim(0), "E140"),  # MARK squeeze_not_one
    "expand_partition": (lambda t, a: t.expand_dim(0), "E140"),  # MARK expand_partition
    "reshape_dim_count": (lambda t, a: a.reshape_dim(1, (3, 3)), "E140"),  # MARK reshape_dim_count
    "reshape_dim_partition": (lambda t, a: t.reshape_dim(0, (2, 4)), "E140"),  # MARK reshape_dim_partition
    "flatten_strided": (lambda t, a: a[:, 0:4].flatten_dims(0, 1), "E140"),  # MARK flatten_strided
    "flatten_permuted": (lambda t, a: a.permute((1, 0)).flatten_dims(0, 1), "E140"),  # MARK flatten_permuted
    "reshape_copy": (lambda t, a: a.permute((1, 0)).reshape((64,)), "E140"),  # MARK reshape_copy
    "reshape_partitions": (lambda t, a: t.reshape((4, 16)), "E140"),  # MARK reshape_partitions
    "rearrange_names": (lambda t, a: a.rearrange(("x", "y"), ("x", "z")), "E140"),  # MARK rearrange_names
    "slice_oob": (lambda t, a: a.slice(1, 2, 9), "E101"),  # MARK slice_oob
    "slice_step": (lambda t, a: a.slice(1, 0, 8, 0), "E103"),  # MARK slice_step
    "select_oob": (lambda t, a: a.select(1, 8), "E101"),  # MARK select_oob
    "dim_range": (lambda t, a: a.select(2, 0), "E103"),  # MARK dim_range
    "vector_select_float": (lambda t, a: a.vector_select(0, t[:, 0:1]), "E103"),  # MARK vector_select_float
    "indirect": (lambda t, a: t.indirect(t), "E135"),  # MARK indirect (NeuronCore-v4 only; trn2 here)
    "view_dtype_strided": (lambda t, a: a[:, 0:8:2].view(nl.int32), "E140"),  # MARK view_dtype_strided
    "ap_dtype_oob": (lambda t, a: a.ap([[1, 300]], dtype=nl.float8_e4m3), "E101"),  # MARK ap_dtype_oob
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_view_mistakes_are_one_line_errors(rng, name):
    make, code = MISTAKES[name]

    @nkicc.jit
    def k(a):
        t = nl.load(a)
        make(t, a)
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (8, 8)))
    check_error(e, code, f"# MARK {name}", "test_nki_tensor.py")


def test_runtime_select_mistakes(rng):
    @nkicc.jit
    def k(a, idx):
        t = nl.load(a)
        i = nl.load(idx)
        t.select(0, i)  # MARK partition
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (8, 8)), np.zeros((1, 1), np.int32))
    check_error(e, "E140", "# MARK partition", "test_nki_tensor.py")

    @nkicc.jit
    def twice(a, idx):
        i = nl.load(idx)
        a.select(0, i).select(0, i)  # MARK twice
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        twice(rand(rng, (4, 8, 8)), np.zeros((1, 1), np.int32))
    check_error(e, "E160", "# MARK twice", "test_nki_tensor.py")


# --- buffers and tile sizes -----------------------------------------------------------

@api("nl.private_hbm", "nl.NkiTensor.name", "nl.NkiTensor.dtype", "nl.NkiTensor.buffer", "nl.MemoryRegion",
     "nl.MemoryRegion.sbuf", "nl.MemoryRegion.psum", "nl.MemoryRegion.private_hbm",
     "nl.MemoryRegion.shared_hbm", "nl.is_sbuf", "nl.is_psum", "nl.is_hbm", "nl.is_on_chip")
def test_memory_regions_and_buffer_queries(rng):
    facts = {}

    @nkicc.jit
    def k(a):
        s = nl.ndarray((4, 8), dtype=a.dtype, buffer=nl.MemoryRegion.sbuf, name="s_tile")
        facts["named"] = (s.name, s.dtype, s.buffer, a.name, a.buffer)
        p = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.MemoryRegion.psum)
        h = nl.ndarray((4, 8), dtype=a.dtype, buffer=nl.MemoryRegion.private_hbm)
        out = nl.ndarray((4, 8), dtype=a.dtype, buffer=nl.MemoryRegion.shared_hbm)
        for t, name in ((s, "s"), (p, "p"), (h, "h"), (out, "out"), (a, "a")):
            facts[name] = (nl.is_sbuf(t), nl.is_psum(t), nl.is_hbm(t), nl.is_on_chip(t),
                           nl.is_sbuf(t.buffer), nl.is_hbm(t.buffer))
        nisa.dma_copy(dst=s, src=a)
        nisa.dma_copy(dst=h, src=s)
        nisa.dma_copy(dst=out, src=h)
        return out

    a = rand(rng, (4, 8))
    np.testing.assert_array_equal(k(a), a)
    assert facts.pop("named") == ("s_tile", np.float32, "sbuf", "a", "hbm")
    assert facts == {"s": (True, False, False, True, True, False), "p": (False, True, False, True, False, False),
                     "h": (False, False, True, False, False, True), "out": (False, False, True, False, False, True),
                     "a": (False, False, True, False, False, True)}
    assert [m.value for m in nl.MemoryRegion] == ["sbuf", "psum", "private_hbm", "shared_hbm"]
    assert nl.MemoryRegion.sbuf == nl.sbuf and f"{nl.MemoryRegion.psum}" == "psum"
    for buf, want in ((nl.sbuf, (True, False, False, True)), (nl.psum, (False, True, False, True)),
                      (nl.hbm, (False, False, True, False)), (nl.shared_hbm, (False, False, True, False)),
                      (nl.private_hbm, (False, False, True, False)), ("l3", (False, False, False, False))):
        assert (nl.is_sbuf(buf), nl.is_psum(buf), nl.is_hbm(buf), nl.is_on_chip(buf)) == want


@api("nl.tile_size", "nl.tile_size.pmax", "nl.tile_size.psum_fmax", "nl.tile_size.psum_bank_fmax",
     "nl.tile_size.psum_bank_fmax_bytes", "nl.tile_size.gemm_stationary_fmax", "nl.tile_size.gemm_moving_fmax",
     "nl.tile_size.bn_stats_fmax", "nl.tile_size.psum_min_align", "nl.tile_size.sbuf_min_align",
     "nl.tile_size.psum_num_banks", "nl.tile_size.sbuf_size_bytes", "nl.tile_size.sbuf_fmax",
     "nl.tile_size.sbuf_fmax_bytes", "nl.tile_size.total_available_sbuf_size")
def test_tile_sizes_agree_with_the_target_and_the_checks():
    from nkicc.plugins.targets import TRN2
    ts = nl.tile_size
    assert (ts.pmax, ts.gemm_stationary_fmax, ts.gemm_moving_fmax, ts.bn_stats_fmax) == (128, 128, 512, 512)
    assert ts.psum_fmax == ts.psum_bank_fmax == 512 and ts.psum_bank_fmax_bytes == 2048 and ts.psum_num_banks == 8
    assert ts.sbuf_fmax_bytes == ts.total_available_sbuf_size == TRN2.sbuf_partition_bytes
    assert ts.sbuf_size_bytes == 128 * TRN2.sbuf_partition_bytes and ts.sbuf_fmax == ts.sbuf_fmax_bytes // 4
    from nkicc.plugins.alloc import ALIGN
    assert ts.psum_min_align == ts.sbuf_min_align == ALIGN

    # the limits are the ones nkicc enforces: a full PSUM bank is fine, one more element is not
    @nkicc.jit
    def ok(a):
        nl.ndarray((ts.pmax, ts.psum_bank_fmax), dtype=nl.float32, buffer=nl.psum)
        return None

    ok(np.zeros((1, 1), np.float32))

    @nkicc.jit
    def too_big(a):
        nl.ndarray((ts.pmax, ts.psum_bank_fmax + 1), dtype=nl.float32, buffer=nl.psum)
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        too_big(np.zeros((1, 1), np.float32))
    assert e.value.code == "E133"


# --- the shape algebra against numpy's own no-copy reshape ------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from nkicc.language import views  # noqa: E402


@st.composite
def _strided_views(draw):
    """A numpy view of arange(n): reshaped, permuted, sliced with steps."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    base = np.arange(int(np.prod(shape)))
    v = base.reshape(shape).transpose(draw(st.permutations(range(len(shape)))))
    keys = []
    for n in v.shape:
        start = draw(st.integers(0, n - 1))
        keys.append(slice(start, n, draw(st.integers(1, 2))))
    v = v[tuple(keys)]
    sizes, total = [], v.size
    while total > 1 and len(sizes) < 4:  # a random factorisation of the element count
        f = draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0]))
        sizes.append(f)
        total //= f
    sizes.append(total)
    if draw(st.booleans()):
        sizes.insert(draw(st.integers(0, len(sizes))), 1)
    return base, v, tuple(draw(st.permutations(sizes)))


@settings(max_examples=120, deadline=None)
@given(_strided_views())
def test_reshape_algebra_agrees_with_numpy(case):
    base, v, new_shape = case
    item = base.itemsize
    pattern = tuple((s // item, n) for s, n in zip(v.strides, v.shape))
    offset = (v.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    got = views.reshape(pattern, new_shape)
    w = v.view()
    try:
        w.shape = new_shape  # numpy refuses exactly when the reshape would need a copy
        numpy_no_copy = True
    except AttributeError:
        numpy_no_copy = False
    if got is None:
        assert not numpy_no_copy, (pattern, new_shape)
        return
    assert tuple(n for _, n in got) == new_shape
    seen = np.lib.stride_tricks.as_strided(base[offset:], shape=new_shape,
                                           strides=[s * item for s, _ in got])
    np.testing.assert_array_equal(seen, v.reshape(new_shape))


def test_base_tensor_is_the_whole_tensor_behind_a_view(rng):
    # the NKI Library's MX loaders read `weight.base_tensor` to get back the tensor a view was cut from
    a = rand(rng, (4, 6, 8))
    got = hbm_view_kernel(lambda t: t[1:3, :, 2:5].base_tensor)(a)
    np.testing.assert_array_equal(got, a)
