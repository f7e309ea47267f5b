"""Accesses through a runtime scalar offset that leave their tensor while the
kernel runs (E170): only the simulation can see them."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def offset_advanced_too_far(a: "float32[512,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    row = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.dynamic_range(5):
        t = nl.load(a.ap([[64, 128], [1, 64]], scalar_offset=row, indirect_dim=0))  # EXPECT: E170 simulate
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=128)
    nl.store(out, value=acc)
    return out


@nkicc.jit
def offset_set_out_of_range(a: "float32[128,64]"):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    col = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(col, 60)
    t = nl.load(a.ap([[64, 128], [1, 8]], scalar_offset=col, indirect_dim=1))  # EXPECT: E170 simulate
    nl.store(out, value=t)
    return out
