"""Instructions that return their result (and dma_copy), misused."""
import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def result_into_a_smaller_tile(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=a.dtype)
    t[...] = nisa.activation(op=nl.exp, data=nl.load(a))  # EXPECT: E140
    nl.store(out[:, 0:32], value=t)
    return out


@nki.jit
def matmul_partitions_disagree(x: "float32[128,64]", y: "float32[64,512]"):
    out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, 512), dtype=nl.float32, buffer=nl.psum)
    acc[...] += nisa.nc_matmul(nl.load(x), nl.load(y))  # EXPECT: E130
    nl.store(out, value=nl.copy(acc))
    return out


@nki.jit
def loop_reduce_not_assigned(a: "float32[256,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=a.dtype)
    for i in nl.affine_range(2):
        acc = nl.loop_reduce(nl.load(a[i * 128:(i + 1) * 128, :]), op=np.add, loop_indices=[i])
    nl.store(out, value=acc)  # EXPECT: E161
    return out


@nki.jit
def activation_on_hbm(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nisa.activation(op=nl.exp, data=a)  # EXPECT: E120
    nl.store(out, value=t)
    return out
