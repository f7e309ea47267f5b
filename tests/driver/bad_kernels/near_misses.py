"""Valid kernels that look like the bad ones: the test compiles and simulates
each of them and expects no error (false positives of the checks)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def prefix_sum_sequential(a: "float32[128,16]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.sequential_range(1, a.shape[1]):
        nisa.tensor_tensor(dst=t[:, i:i + 1], data1=t[:, i - 1:i], data2=t[:, i:i + 1], op=nl.add)
    nl.store(out, value=t)
    return out


@nkicc.jit
def chain_through_hbm_sequential(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a[0:128, :]))
    for i in range(1, 4):
        prev = nl.load(out[(i - 1) * 128:i * 128, :])
        cur = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(prev, cur))
    return out


@nkicc.jit
def columns_in_place(a: "float32[128,16]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(a.shape[1]):
        nisa.tensor_scalar(dst=t[:, i:i + 1], data=t[:, i:i + 1], op0=nl.multiply, operand0=2.0)
    nl.store(out, value=t)
    return out


@nkicc.jit
def sbuf_accumulator(a: "float32[512,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nl.store(out, value=acc)
    return out


@nkicc.jit
def psum_accumulation(at: "float32[512,128]", b: "float32[512,256]"):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        nisa.nc_matmul(dst=ps, stationary=nl.load(at[k * 128:(k + 1) * 128, :]),
                       moving=nl.load(b[k * 128:(k + 1) * 128, :]))
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def column_blocks_of_a_psum_tile(a: "float32[128,128]", b: "float32[128,512]"):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    st = nl.load(a)
    for j in nl.affine_range(4):
        nisa.nc_matmul(dst=ps[:, j * 128:(j + 1) * 128], stationary=st, moving=nl.load(b[:, j * 128:(j + 1) * 128]))
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def tiles_of_one_output(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(t))
    return out


@nkicc.jit
def read_written_half(a: "float32[128,64]"):
    out = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t[:, 0:32], src=nl.load(a[:, 0:32]))
    nl.store(out, value=t[:, 0:32])
    return out


@nkicc.jit
def nan_from_the_data(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    junk = nl.copy(scratch)  # reads never-written memory, but it reaches no output
    nl.store(out, value=nl.log(nl.load(a)))  # NaN where a < 0: not the kernel's fault
    return out


@nkicc.jit
def offset_within_range(a: "float32[512,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    row = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.dynamic_range(4):
        t = nl.load(a.ap([[64, 128], [1, 64]], scalar_offset=row, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=128)
    nl.store(out, value=acc)
    return out


@nkicc.jit
def partitions_from_64(a: "float32[128,64]"):
    out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t[64:128, :])
    nl.store(out, value=u)
    return out


@nkicc.jit
def broadcast_row_in_place(a: "float32[128,64]", bias: "float32[1,64]"):
    # iteration 0 rewrites row 0 with its own value, which iterations 1..3 read: a warning (W190), not E190
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:1, :], src=bias)
    for b in nl.affine_range(4):
        nisa.nc_stream_shuffle(dst=t[nl.ds(b * 32, 32), :], src=t[0:1, :], shuffle_mask=[0] * 32)
    nl.store(out, value=nl.add(nl.load(a), t))
    return out
