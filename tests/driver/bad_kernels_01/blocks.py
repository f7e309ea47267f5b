"""Tensors with block dimensions (nl.par_dim after them), misused."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def block_tensor_used_whole(a: "float32[256,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    blk = nl.ndarray((2, nl.par_dim(128), 64), dtype=a.dtype)
    for i in nl.affine_range(2):
        blk[i] = nl.load(a[i * 128:(i + 1) * 128, :])
    nl.store(out, value=nl.copy(blk))  # EXPECT: E161
    return out


@nki.jit
def par_dim_in_hbm(a: "float32[128,64]"):
    out = nl.ndarray((2, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.shared_hbm)  # EXPECT: E161
    return out


@nki.jit
def block_index_past_the_end(a: "float32[256,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    blk = nl.ndarray((2, nl.par_dim(128), 64), dtype=a.dtype)
    for i in nl.affine_range(3):
        blk[i] = nl.load(a[0:128, :])  # EXPECT: E101
    nl.store(out, value=blk[0])
    return out


@nki.jit
def partition_dimension_too_large(a: "float32[256,64]"):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    blk = nl.ndarray((2, nl.par_dim(256), 64), dtype=a.dtype)  # EXPECT: E110
    nl.store(out, value=blk[0])
    return out
