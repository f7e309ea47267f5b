"""dtype rules: matmul operand pairs (E132), dtypes NKI does not have (E160),
a runtime offset that is not an integer (E103)."""
import numpy as np

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def matmul_fp32_with_bf16(s: "float32[64,8]", m: "bfloat16[64,16]"):
    out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E132
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def matmul_fp16_with_fp32(s: "float16[64,8]", m: "float32[64,16]"):
    out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m))  # EXPECT: E132
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def unknown_dtype_name(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype="float64x", buffer=nl.sbuf)  # EXPECT: E160
    nisa.tensor_copy(dst=t, src=nl.load(a))
    nl.store(out, value=t)
    return out


@nkicc.jit
def complex_dtype(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a, dtype=np.complex64)  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def float_scalar_offset(a: "float32[512,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    row = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(a.ap([[64, 128], [1, 64]], scalar_offset=row, indirect_dim=0))  # EXPECT: E103
    nl.store(out, value=t)
    return out
