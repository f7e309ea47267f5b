"""nc_matmul / nl.matmul shapes (E130), buffers (E131) and PSUM banks (E133)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def contraction_mismatch(s: "float32[128,64]", m: "float32[64,64]"):
    out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E130
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def stationary_wider_than_128(s: "float32[128,256]", m: "float32[128,64]"):
    out = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E130
    nl.store(out[0:128, :], value=nl.copy(ps))
    return out


@nkicc.jit
def moving_wider_than_512(s: "float32[128,128]", m: "float32[128,1024]"):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E130
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def dst_of_the_wrong_shape(s: "float32[128,128]", m: "float32[128,128]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E130
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def nl_matmul_contracts_over_256(x: "float32[128,256]", y: "float32[256,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nl.matmul(nl.load(x), nl.load(y[0:128, :]))  # EXPECT: E130
    nl.store(out, value=nl.copy(p))
    return out


@nkicc.jit
def vector_engine_transpose_of_64(a: "float32[64,64]"):
    out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    o = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_transpose(dst=o, data=nl.load(a))  # EXPECT: E130
    nl.store(out, value=o)
    return out


@nkicc.jit
def stationary_in_psum(s: "float32[64,8]", m: "float32[64,16]"):
    out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=p, src=nl.load(s))
    ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=p, moving=nl.load(m))  # EXPECT: E131
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def dst_in_sbuf(s: "float32[64,8]", m: "float32[64,16]"):
    out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    d = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(dst=d, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E131
    nl.store(out, value=d)
    return out


@nkicc.jit
def moving_in_hbm(s: "float32[64,8]", m: "float32[64,16]"):
    out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=m)  # EXPECT: E131
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def psum_tile_of_1024_fp32(a: "float32[128,1024]"):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)  # EXPECT: E133
    nisa.tensor_copy(dst=ps, src=nl.load(a))
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def psum_zeros_of_600(a: "float32[128,600]"):
    out = nl.ndarray((128, 600), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 600), dtype=nl.float32, buffer=nl.psum)  # EXPECT: E133
    nl.store(out, value=nl.copy(acc))
    return out
