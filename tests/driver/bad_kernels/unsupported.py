"""Operations, arguments and forms that nkicc does not support (E160)."""
import numpy as np

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def unknown_nl_operation(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.fft(nl.load(a))  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def unknown_isa_instruction(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_fft(dst=t, src=a)  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def indexing_with_a_tile(a: "float32[128,64]", idx: "int32[128,1]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.load(idx)
    t = nl.load(a[i, :])  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def vector_offset(a: "float32[128,64]", idx: "int32[128,1]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.load(idx)
    t = nl.load(a.ap([[32, 128], [1, 32]], vector_offset=i, dtype=nl.bfloat16))  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def dma_read_modify_write(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nisa.dma_copy(dst=out, src=t, dst_rmw_op=nl.add)  # EXPECT: E160
    return out


@nkicc.jit
def activation_with_a_numpy_function(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=t, op=np.arcsinh, data=nl.load(a))  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def unknown_buffer(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer="l2cache")  # EXPECT: E160
    nl.store(out, value=t)
    return out
