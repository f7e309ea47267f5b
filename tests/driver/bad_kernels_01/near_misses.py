"""Valid NKI 0.1 kernels that look like the bad ones: they compile and simulate cleanly."""
import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def ragged_rows_masked(a: "float32[200,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < 200))
        nl.store(out[i * 128 + ix, iy], value=nl.exp(t), mask=(i * 128 + ix < 200))
    return out


@nki.jit
def store_masks_fewer_rows_than_it_loads(a: "float32[200,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    nl.store(out[ix, iy], value=nl.load(a[ix, iy]))
    nl.store(out[128 + ix, iy], value=nl.load(a[128 + ix, iy], mask=(128 + ix < 200)), mask=(128 + ix < 200))
    t = nl.load(a[128 + ix, iy], mask=(128 + ix < 200))
    nl.store(out[128 + ix, iy], value=nl.exp(t), mask=(128 + ix < 150))  # each statement its own mask
    return out


@nki.jit
def grid_strides_within_a_partition(a: "float32[64,64]"):
    out = nl.ndarray((64, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:32]
    t = nl.load(a)
    nl.store(out, value=nl.copy(t[i_p, 2 * i_f + 1]))
    return out


@nki.jit
def loop_reduce_assigned(a: "float32[256,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=a.dtype)
    for i in nl.affine_range(2):
        acc[...] = nl.loop_reduce(nl.load(a[i * 128:(i + 1) * 128, :]), op=np.add, loop_indices=[i])
    nl.store(out, value=acc)
    return out


@nki.jit
def block_tensor_by_blocks(a: "float32[256,64]"):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    blk = nl.ndarray((2, nl.par_dim(128), 64), dtype=a.dtype)
    for i in nl.affine_range(2):
        blk[i] = nl.load(a[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(2):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nisa.activation(op=nl.exp, data=blk[i]))
    return out


@nki.jit
def matmul_accumulated(x: "float32[256,64]", y: "float32[256,512]"):
    out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        acc[...] += nisa.nc_matmul(nl.load(x[k * 128:(k + 1) * 128, :]), nl.load(y[k * 128:(k + 1) * 128, :]))
    nl.store(out, value=nl.copy(acc))
    return out
