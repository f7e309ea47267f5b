"""Conformance: gathers and shuffles inside SBUF: nisa.local_gather (within each
GpSimd core's 16 partitions), nisa.nc_n_gather (within a partition) and
nisa.nc_stream_shuffle (whole partitions within quadrants of 32). They copy
bits: values of any dtype come out unchanged."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, rand, run_rolled_and_unrolled
from tests.support.sim_helpers import run_both_simulators

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.local_gather",
    "nisa.nc_n_gather",
    "nisa.nc_stream_shuffle")


def bits(x):
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


# --- local_gather --------------------------------------------------------------------


def local_gather_ref(src, index, k, valid):
    src = src.reshape(src.shape[0], -1)
    out = np.empty((src.shape[0], valid * k), src.dtype)
    for core in range(src.shape[0] // 16):
        rows = range(16 * core, 16 * core + 16)
        order = [index[p, c] for c in range(index.shape[1]) for p in rows][:valid]  # partition first
        for p in rows:
            out[p] = [src[p, j + e] for j in order for e in range(k)]
    return out


def local_gather_kernel(k, valid, out_free, pass_valid=True):
    @nkicc.jit
    def kern(src, index):
        out = nl.ndarray((src.shape[0], out_free), dtype=src.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((src.shape[0], out_free), dtype=src.dtype, buffer=nl.sbuf)
        if pass_valid:
            nisa.local_gather(dst=t, src_buffer=nl.load(src), index=nl.load(index), num_elem_per_idx=k,
                              num_valid_indices=valid)
        else:
            nisa.local_gather(t, nl.load(src), nl.load(index))
        nl.store(out, value=t)
        return out
    return kern


@pytest.mark.parametrize("P,F,I,k,valid,dtype", [
    (128, 512, 4, 4, 64, np.float32), (16, 40, 3, 1, 48, bf16), (32, 100, 5, 2, 37, np.int32),
    (16, 64, 1, 32, 1, np.uint8), (128, 256, 16, 1, 256, np.float32), (16, 4096, 256, 1, 4096, np.float32),
    (32, 77, 2, 8, 20, bf16), (64, 33, 4, 16, 50, np.int32),
])
def test_local_gather(rng, P, F, I, k, valid, dtype):
    src = rand(rng, (P, F), dtype, 0, 250)
    index = rng.integers(0, F - k + 1, size=(P, I)).astype(np.uint16)
    got = run_both_simulators(local_gather_kernel(k, valid, valid * k), src, index)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(bits(got), bits(local_gather_ref(src, index, k, valid)))


def test_local_gather_defaults_and_3d_source(rng):
    # defaults: one element per index, every index of the core's 16 partitions
    src = rand(rng, (32, 6, 7))
    index = rng.integers(0, 42, size=(32, 3)).astype(np.uint16)
    got = run_both_simulators(local_gather_kernel(1, None, 48, pass_valid=False), src, index)
    np.testing.assert_array_equal(got, local_gather_ref(src, index, 1, 48))


def test_local_gather_index_out_of_range_at_run_time(rng):
    src = rand(rng, (16, 10))
    index = np.full((16, 1), 9, np.uint16)
    with pytest.raises(nkicc.NkiccError) as ei:
        local_gather_kernel(2, 16, 32)(src, index)
    assert ei.value.code == "E170" and "local_gather" in str(ei.value)


# --- nc_n_gather ---------------------------------------------------------------------


def n_gather_kernel(out_shape):
    @nkicc.jit
    def k(data, idx):
        out = nl.ndarray(out_shape, dtype=data.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(out_shape, dtype=data.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=t, data=nl.load(data), indices=nl.load(idx))
        nl.store(out, value=t)
        return out
    return k


@pytest.mark.parametrize("dshape,ishape,dtype", [
    ((128, 60), (128, 70), np.float32), ((1, 1), (1, 1), np.float32), ((1, 5), (1, 9), bf16),
    ((64, 4, 9), (64, 3, 5), np.int32), ((8, 30000), (8, 40), np.float32), ((16, 300), (16, 20), np.uint16),
    ((2, 65536), (2, 4), bf16),
])
def test_nc_n_gather(rng, dshape, ishape, dtype):
    data = rand(rng, dshape, dtype, 0, 60000)
    F = int(np.prod(dshape[1:]))
    idx = rng.integers(0, F, size=ishape).astype(np.uint32)
    got = run_both_simulators(n_gather_kernel(ishape), data, idx)
    flat, fi = data.reshape(dshape[0], -1), idx.reshape(ishape[0], -1)
    want = np.array([[flat[p, j] for j in fi[p]] for p in range(dshape[0])], dtype=data.dtype).reshape(ishape)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_nc_n_gather_in_a_loop_rolled_and_unrolled(rng):
    @nkicc.jit
    def k(data, idx):
        out = nl.ndarray(idx.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        d = nl.load(data)
        for c in nl.affine_range(idx.shape[1] // 16):
            t = nl.ndarray((idx.shape[0], 16), dtype=data.dtype, buffer=nl.sbuf)
            nisa.nc_n_gather(dst=t, data=d, indices=nl.load(idx[:, nl.ds(16 * c, 16)]))
            nl.store(out[:, nl.ds(16 * c, 16)], value=t)
        return out

    data = rand(rng, (64, 50))
    idx = rng.integers(0, 50, size=(64, 64)).astype(np.uint32)
    got = run_rolled_and_unrolled(k, data, idx)
    np.testing.assert_array_equal(got, np.take_along_axis(data, idx.astype(np.int64), axis=1))


def test_nc_n_gather_index_out_of_range_at_run_time(rng):
    idx = np.array([[0, 3]], np.uint32)
    with pytest.raises(nkicc.NkiccError) as ei:
        n_gather_kernel((1, 2))(rand(rng, (1, 3)), idx)
    assert ei.value.code == "E170"


# --- nc_stream_shuffle ---------------------------------------------------------------


def shuffle_ref(dst, src, mask):
    out = dst.copy()
    for i in range(dst.shape[0]):
        m = mask[i % 32]
        if m != 255:
            out[i] = src[(i // 32) * 32 + m]
    return out


def shuffle_kernel(mask, dst_rows, src_rows=None, dst_start=0, src_start=0, src_buffer="sbuf"):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        dst = nl.load(b)  # the destination's old values show where the mask keeps them
        src = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum if src_buffer == "psum" else nl.sbuf)
        nisa.tensor_copy(dst=src, src=nl.load(a))
        rows = src_rows or dst_rows
        nisa.nc_stream_shuffle(dst=dst[dst_start:dst_start + dst_rows], src=src[src_start:src_start + rows],
                               shuffle_mask=mask)
        nl.store(out, value=dst)
        return out
    return k


@pytest.mark.parametrize("rows", [32, 128, 1, 64, 96])
@pytest.mark.parametrize("dtype", [np.float32, bf16, np.int32])
def test_stream_shuffle_random_mask_with_keeps(rng, rows, dtype):
    mask = [int(m) for m in rng.integers(0, min(rows, 32), size=32)]
    for i in rng.choice(32, size=5, replace=False):
        mask[i] = 255
    a, b = rand(rng, (rows, 40), dtype, 0, 1000), rand(rng, (rows, 40), dtype, 0, 1000)
    got = run_both_simulators(shuffle_kernel(mask, rows), a, b)
    np.testing.assert_array_equal(bits(got), bits(shuffle_ref(b, a, mask)))


def test_stream_shuffle_in_place_rotation_and_psum_source(rng):
    # the reference's own example: partition i takes partition i - 1 of the same tile
    mask = [(i - 1) % 32 for i in range(32)]

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.nc_stream_shuffle(src=t, dst=t, shuffle_mask=mask)
        nl.store(out, value=t)
        return out

    a = rand(rng, (32, 128))
    np.testing.assert_array_equal(run_both_simulators(k, a), a[mask])
    a, b = rand(rng, (64, 8)), rand(rng, (64, 8))
    got = run_both_simulators(shuffle_kernel(mask, 64, src_buffer="psum"), a, b)
    np.testing.assert_array_equal(got, shuffle_ref(b, a, mask))


def test_stream_shuffle_broadcast_one_partition_into_a_quadrant(rng):
    # the library's broadcast: src is one partition, dst a quadrant starting at 64
    a, b = rand(rng, (1, 16)), rand(rng, (128, 16))
    got = run_both_simulators(shuffle_kernel([0] * 32, 20, src_rows=1, dst_start=64), a, b)
    want = b.copy()
    want[64:84] = a[0]
    np.testing.assert_array_equal(got, want)


def test_stream_shuffle_in_a_loop_rolled_and_unrolled(rng):
    mask = [31 - i for i in range(32)]

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for q in nl.affine_range(a.shape[1] // 8):
            t = nl.load(a[:, nl.ds(8 * q, 8)])
            u = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=u, src=t, shuffle_mask=mask)
            nl.store(out[:, nl.ds(8 * q, 8)], value=u)
        return out

    a = rand(rng, (128, 32))
    want = np.concatenate([a[32 * q:32 * q + 32][::-1] for q in range(4)])
    np.testing.assert_array_equal(run_rolled_and_unrolled(k, a), want)


# --- documented constraints ------------------------------------------------------------


def _gather_error_kernel(case):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        f = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(f, 1.0)
        u16 = nl.ndarray((32, 4), dtype=nl.uint16, buffer=nl.sbuf)
        u32 = nl.ndarray((32, 4), dtype=nl.uint32, buffer=nl.sbuf)
        b = nl.ndarray((32, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        p = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.psum)
        big = nl.ndarray((16, 300), dtype=nl.uint16, buffer=nl.sbuf)
        m = list(range(32))
        if case == "lg_index_dtype":
            nisa.local_gather(dst=f, src_buffer=f, index=u32)  # MARK lg_index_dtype
        elif case == "lg_cast":
            nisa.local_gather(dst=b, src_buffer=f, index=u16)  # MARK lg_cast
        elif case == "lg_parts16":
            nisa.local_gather(dst=f[0:8, :], src_buffer=f[0:8, :], index=u16[0:8, :])  # MARK lg_parts16
        elif case == "lg_parts_match":
            nisa.local_gather(dst=f, src_buffer=f, index=u16[0:16, :])  # MARK lg_parts_match
        elif case == "lg_elems":
            nisa.local_gather(dst=f[:, 0:48], src_buffer=f, index=u16, num_elem_per_idx=3)  # MARK lg_elems
        elif case == "lg_valid":
            nisa.local_gather(dst=f, src_buffer=f, index=u16, num_valid_indices=65)  # MARK lg_valid
        elif case == "lg_4096":
            nisa.local_gather(dst=f[0:16, 0:1], src_buffer=f[0:16, :], index=big)  # MARK lg_4096
        elif case == "lg_dst_size":
            nisa.local_gather(dst=f[:, 0:63], src_buffer=f, index=u16)  # MARK lg_dst_size
        elif case == "lg_psum":
            nisa.local_gather(dst=f, src_buffer=p, index=u16)  # MARK lg_psum
        elif case == "ng_index_dtype":
            nisa.nc_n_gather(dst=f[:, 0:4], data=f, indices=u16)  # MARK ng_index_dtype
        elif case == "ng_cast":
            nisa.nc_n_gather(dst=b[:, 0:4], data=f, indices=u32)  # MARK ng_cast
        elif case == "ng_count":
            nisa.nc_n_gather(dst=f[:, 0:5], data=f, indices=u32)  # MARK ng_count
        elif case == "ng_parts":
            nisa.nc_n_gather(dst=f[0:16, 0:4], data=f, indices=u32)  # MARK ng_parts
        elif case == "ng_psum":
            nisa.nc_n_gather(dst=p[:, 0:4], data=f, indices=u32)  # MARK ng_psum
        elif case == "sh_dtype":
            nisa.nc_stream_shuffle(dst=b, src=f, shuffle_mask=m)  # MARK sh_dtype
        elif case == "sh_free":
            nisa.nc_stream_shuffle(dst=f[:, 0:8], src=f[:, 8:17], shuffle_mask=m)  # MARK sh_free
        elif case == "sh_len":
            nisa.nc_stream_shuffle(dst=f[:, 0:8], src=f[:, 8:16], shuffle_mask=m[:31])  # MARK sh_len
        elif case == "sh_value":
            nisa.nc_stream_shuffle(dst=f[:, 0:8], src=f[:, 8:16], shuffle_mask=[32] * 32)  # MARK sh_value
        elif case == "sh_not_list":
            nisa.nc_stream_shuffle(dst=f[:, 0:8], src=f[:, 8:16], shuffle_mask=3)  # MARK sh_not_list
        elif case == "sh_src_rows":
            nisa.nc_stream_shuffle(dst=f[:, 0:8], src=f[0:4, 8:16], shuffle_mask=m)  # MARK sh_src_rows
        elif case == "sh_start":
            q = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=q[32:64, :], src=q[0:40, :], shuffle_mask=[0] * 32)  # MARK sh_start
        nl.store(out, value=f[:, 0:8])
        return out
    return k


@pytest.mark.parametrize("case,code", [
    ("lg_index_dtype", "E132"), ("lg_cast", "E132"), ("lg_parts16", "E110"), ("lg_parts_match", "E140"),
    ("lg_elems", "E103"), ("lg_valid", "E103"), ("lg_4096", "E130"), ("lg_dst_size", "E140"), ("lg_psum", "E120"),
    ("ng_index_dtype", "E132"), ("ng_cast", "E132"), ("ng_count", "E140"), ("ng_parts", "E140"),
    ("ng_psum", "E120"), ("sh_dtype", "E132"), ("sh_free", "E140"), ("sh_len", "E103"), ("sh_value", "E103"),
    ("sh_not_list", "E103"), ("sh_src_rows", "E103"), ("sh_start", "E111"),
])
def test_gather_errors_one_line_at_the_kernel(rng, case, code):
    with pytest.raises(nkicc.NkiccError) as ei:
        nkicc.compile(_gather_error_kernel(case), rand(rng, (32, 8)))
    check_error(ei, code, f"MARK {case}", "test_ops_gather.py")


def test_stream_shuffle_mask_from_a_loop_index(rng):
    # mask entries may be affine in a loop index: each iteration broadcasts another partition
    @nkicc.jit
    def k(a):
        out = nl.ndarray((32, 4 * a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        for i in nl.affine_range(4):
            u = nl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=u, src=t, shuffle_mask=[i * 2 + 1] * 32)
            nl.store(out[:, nl.ds(i * a.shape[1], a.shape[1])], value=u)
        return out

    a = rand(rng, (32, 5))
    want = np.concatenate([np.broadcast_to(a[2 * i + 1], (32, 5)) for i in range(4)], axis=1)
    np.testing.assert_array_equal(run_rolled_and_unrolled(k, a), want)


@pytest.mark.parametrize("opcode", ["local_gather", "nc_n_gather", "topk", "nonzero_with_count",
                                    "sequence_bounds"])
def test_gpsimd_operands_stay_in_sbuf_after_the_passes(rng, opcode):
    # the IR rule verify re-checks after every pass: a GpSimd operand moved to PSUM is E120 at the call
    import dataclasses
    from nkicc.ir import Op, ops
    from tests.ir.ops.test_ops_sort import bounds_kernel, nonzero_kernel, topk_kernel
    kernels = {
        "local_gather": (local_gather_kernel(1, 16, 16), rand(rng, (16, 8)), np.zeros((16, 1), np.uint16)),
        "nc_n_gather": (n_gather_kernel((4, 3)), rand(rng, (4, 6)), np.zeros((4, 3), np.uint32)),
        "topk": (topk_kernel(16, 2), rand(rng, (16, 1), bf16)),
        "nonzero_with_count": (nonzero_kernel(0, -1), rand(rng, (16, 4))),
        "sequence_bounds": (bounds_kernel(), np.ones((1, 4), np.int32)),
    }
    kernel, *arrays = kernels[opcode]
    ir = nkicc.compile(kernel, *arrays).ir
    op = next(s for s in ir.body.walk() if isinstance(s, Op) and s.opcode == opcode)
    decls = dict(ir.tensor_map())
    ops.get(opcode).verify(op, decls)  # as compiled: fine
    decls[op.outs[0].tensor] = dataclasses.replace(decls[op.outs[0].tensor], buffer="psum")
    with pytest.raises(nkicc.NkiccError) as ei:
        ops.get(opcode).verify(op, decls)
    assert ei.value.code == "E120" and ei.value.loc == op.loc


def test_rows_inside_agrees_with_every_element(rng):
    """A gathered row is in range when its lowest and highest elements are (one comparison a row);
    oracle: every element of every row compared, on random patterns with negative steps, rows
    straddling both ends and empty axes."""
    from nkicc.simulator.reference import rows_inside
    for _ in range(300):
        pattern = tuple((int(rng.integers(-40, 41)), int(rng.integers(0, 5))) for _ in range(rng.integers(0, 4)))
        size = int(rng.integers(1, 400))
        first = rng.integers(-100, 500, size=int(rng.integers(1, 20))).astype(np.int64)
        idx = first.reshape((-1,) + (1,) * len(pattern))
        for axis, (s, n) in enumerate(pattern, 1):
            shape = [1] * (len(pattern) + 1)
            shape[axis] = n
            idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
        every = ((idx >= 0) & (idx < size)).reshape(len(first), -1).all(axis=1)
        np.testing.assert_array_equal(rows_inside(first, pattern, size), every)
