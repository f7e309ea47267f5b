"""Loop-carried dependences in affine_range loops (E190). NKI may run the
iterations of an affine_range loop in any order; a loop that passes values
from one iteration to another must be a sequential_range (see
near_misses.py for the same kernels written that way)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def prefix_sum_over_columns(a: "float32[128,16]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(1, a.shape[1]):
        nisa.tensor_tensor(dst=t[:, i:i + 1], data1=t[:, i - 1:i], data2=t[:, i:i + 1], op=nl.add)  # EXPECT: E190
    nl.store(out, value=t)
    return out


@nkicc.jit
def chain_through_hbm(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a[0:128, :]))
    for i in nl.affine_range(1, 4):
        prev = nl.load(out[(i - 1) * 128:i * 128, :])  # EXPECT: E190
        cur = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(prev, cur))
    return out


@nkicc.jit
def shift_left_in_place(a: "float32[128,16]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(15):
        nisa.tensor_copy(dst=t[:, i:i + 1], src=t[:, i + 1:i + 2])  # EXPECT: E190
    nl.store(out, value=t)
    return out


@nkicc.jit
def first_column_read_by_all(a: "float32[128,16]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(16):
        nisa.tensor_scalar(dst=t[:, i:i + 1], data=t[:, i:i + 1], op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=t[:, i:i + 1], data1=t[:, i:i + 1], data2=t[:, 0:1], op=nl.add)  # EXPECT: E190
    nl.store(out, value=t)
    return out


@nkicc.jit
def overlapping_stores(a: "float32[128,64]"):
    out = nl.ndarray((192, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(2):
        nl.store(out[i * 64:i * 64 + 128, :], value=t)  # EXPECT: E190
    return out


@nkicc.jit
def broadcast_of_a_row_scaled_in_place(a: "float32[128,64]", bias: "float32[1,64]"):
    # near_misses.broadcast_row_in_place without the scaling is order-free (W190); here iteration 0
    # doubles row 0 after copying it, and whether the others copy it before or after depends on the order
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:1, :], src=bias)
    for b in nl.affine_range(4):
        nisa.nc_stream_shuffle(dst=t[nl.ds(b * 32, 32), :], src=t[0:1, :], shuffle_mask=[0] * 32)  # EXPECT: E190
        nisa.tensor_scalar(dst=t[nl.ds(b * 32, 32), :], data=t[nl.ds(b * 32, 32), :], op0=nl.multiply, operand0=2.0)
    nl.store(out, value=nl.add(nl.load(a), t))
    return out
