"""Instructions given the wrong buffer (E120): DMA cannot touch PSUM, compute
reads on-chip memory only, tensor_tensor cannot read PSUM twice."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def store_straight_from_psum(s: "float32[128,128]", m: "float32[128,256]"):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))
    nl.store(out, value=ps)  # EXPECT: E120
    return out


@nkicc.jit
def dma_into_psum(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=ps, src=a)  # EXPECT: E120
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def store_the_accumulator_from_psum(x: "float32[4,128,256]"):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    accum = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        accum += nl.load(x[k])
    nl.store(out, value=accum)  # EXPECT: E120
    return out


@nkicc.jit
def tensor_tensor_both_in_psum(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    p1 = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    p2 = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    t = nl.load(a)
    nisa.tensor_copy(dst=p1, src=t)
    nisa.tensor_copy(dst=p2, src=t)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=r, data1=p1, data2=p2, op=nl.add)  # EXPECT: E120
    nl.store(out, value=r)
    return out


@nkicc.jit
def compute_on_hbm(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=a, op0=nl.multiply, operand0=2.0)  # EXPECT: E120
    nl.store(out, value=r)
    return out


@nkicc.jit
def scalar_offset_in_hbm(a: "float32[512,64]", rows: "int32[1,1]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a.ap([[64, 128], [1, 64]], scalar_offset=rows, indirect_dim=0))  # EXPECT: E120
    nl.store(out, value=t)
    return out
