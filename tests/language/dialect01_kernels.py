"""Small kernels in NKI 0.1 (index grids, masks, instructions that return their
result, block dimensions, loop_reduce), each with its twin in NKI 0.6 written the
way the migration guide rewrites it. tests/language/test_dialect01.py runs both.

The 0.1 kernels call the 0.1 modules directly (what `import neuronxcc.nki.language
as nl` serves), so that this file imports without the `neuronxcc` alias."""
import math

import numpy as np

import nkicc
import nkicc.isa as nisa6
import nkicc.language as nl6
import nkicc.language.legacy_isa as nisa
import nkicc.language.legacy_nl as nl


# --- arange + mask: rows of a ragged last tile -----------------------------------------------

@nkicc.jit
def rmsnorm_01(a, g):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a.shape[1])[None, :]
    rows = a.shape[0]
    g_tile = nl.load(g.reshape((1, g.shape[0]))[iw, iy])
    for i in nl.affine_range(math.ceil(rows / 128)):
        a_tile = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < rows))
        mean = nl.sum(nl.square(a_tile), axis=[1]) / a.shape[1]
        scaled = nl.multiply(a_tile, nl.rsqrt(mean))
        out_tile = nl.multiply(scaled, g_tile.broadcast_to((128, g.shape[0])), mask=(i * 128 + ix < rows))
        nl.store(out[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < rows))
    return out


@nkicc.jit
def rmsnorm_06(a, g):
    out = nl6.ndarray(a.shape, dtype=a.dtype, buffer=nl6.shared_hbm)
    rows, cols = a.shape
    g_tile = nl6.load(g.reshape((1, cols)))
    for i in nl6.affine_range(math.ceil(rows / 128)):
        n = min(128, rows - i * 128)
        a_tile = nl6.load(a[i * 128:i * 128 + n, 0:cols])
        mean = nl6.sum(nl6.square(a_tile), axis=[1], keepdims=True) / cols
        scaled = nl6.multiply(a_tile, nl6.rsqrt(mean))
        nl6.store(out[i * 128:i * 128 + n, 0:cols], value=nl6.multiply(scaled, g_tile.broadcast_to((n, cols))))
    return out


def rmsnorm_np(a, g):
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g


# --- mgrid: an access pattern that permutes within each partition -----------------------------

@nkicc.jit
def transpose_01(a, rows: int, cols: int):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    i_p, i_r, i_c = nl.mgrid[0:a.shape[0], 0:rows, 0:cols]
    o = nl.ndarray((a.shape[0], rows * cols), dtype=a.dtype)
    o[i_p, i_c * rows + i_r] = nl.copy(t[i_p, i_r * cols + i_c])
    nl.store(out, value=o)
    return out


@nkicc.jit
def transpose_06(a, rows: int, cols: int):
    out = nl6.ndarray(a.shape, dtype=a.dtype, buffer=nl6.shared_hbm)
    t = nl6.load(a)
    o = nl6.ndarray((a.shape[0], rows * cols), dtype=a.dtype)
    nisa6.tensor_copy(o.reshape((a.shape[0], cols, rows)).permute((0, 2, 1)),
                      t.reshape((a.shape[0], rows, cols)))
    nl6.store(out, value=o)
    return out


# --- instructions that return their result ------------------------------------------------------

@nkicc.jit
def softmax_rows_01(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        s = nisa.tensor_tensor(x, y, op=nl.add)
        m = nisa.tensor_reduce(np.max, data=s, axis=(1,), negate=True)
        e = nisa.activation(op=nl.exp, data=s, bias=m, scale=1.0)
        total = nisa.tensor_reduce(np.add, data=e, axis=(1,))
        r = nisa.reciprocal(total)
        o = nl.ndarray((128, a.shape[1]), dtype=a.dtype)
        o[...] = nisa.tensor_scalar(e, op0=np.multiply, operand0=r)
        nl.store(out[i * 128:(i + 1) * 128, :], value=o)
    return out


@nkicc.jit
def softmax_rows_06(a, b):
    out = nl6.ndarray(a.shape, dtype=a.dtype, buffer=nl6.shared_hbm)
    n = a.shape[1]
    for i in nl6.affine_range(a.shape[0] // 128):
        x = nl6.load(a[i * 128:(i + 1) * 128, :])
        y = nl6.load(b[i * 128:(i + 1) * 128, :])
        s = nl6.ndarray((128, n), dtype=a.dtype)
        nisa6.tensor_tensor(s, x, y, op=nl6.add)
        m = nl6.ndarray((128, 1), dtype=a.dtype)
        nisa6.tensor_reduce(m, np.max, s, axis=(1,), negate=True, keepdims=True)
        e = nl6.ndarray((128, n), dtype=a.dtype)
        nisa6.activation(e, op=nl6.exp, data=s, bias=m, scale=1.0)
        total = nl6.ndarray((128, 1), dtype=a.dtype)
        nisa6.tensor_reduce(total, np.add, e, axis=(1,), keepdims=True)
        r = nl6.ndarray((128, 1), dtype=a.dtype)
        nisa6.reciprocal(r, total)
        o = nl6.ndarray((128, n), dtype=a.dtype)
        nisa6.tensor_scalar(o, e, op0=np.multiply, operand0=r)
        nl6.store(out[i * 128:(i + 1) * 128, :], value=o)
    return out


def softmax_np(a, b):
    s = a + b
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --- block dimensions and matmul accumulation ----------------------------------------------

@nkicc.jit
def matmul_blocks_01(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    lhs_tiles = nl.ndarray((K // 128, nl.par_dim(128), M), dtype=lhsT.dtype)
    rhs_tiles = nl.ndarray((K // 128, nl.par_dim(128), N), dtype=rhs.dtype)
    i_l = nl.mgrid[0:128, 0:M]
    i_r = nl.mgrid[0:128, 0:N]
    for k in nl.affine_range(K // 128):
        lhs_tiles[k, i_l.p, i_l.x] = nl.load(lhsT[k * 128 + i_l.p, i_l.x])
        rhs_tiles[k, i_r.p, i_r.x] = nl.load(rhs[k * 128 + i_r.p, i_r.x])
    acc = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        acc[...] += nisa.nc_matmul(lhs_tiles[k, i_l.p, i_l.x], rhs_tiles[k, i_r.p, i_r.x])
    nl.store(out, value=nl.copy(acc))
    return out


@nkicc.jit
def matmul_blocks_06(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl6.ndarray((M, N), dtype=nl6.float32, buffer=nl6.shared_hbm)
    lhs_tiles = nl6.ndarray((128, K // 128, M), dtype=lhsT.dtype)
    rhs_tiles = nl6.ndarray((128, K // 128, N), dtype=rhs.dtype)
    for k in nl6.affine_range(K // 128):
        nisa6.dma_copy(lhs_tiles[:, k, :], lhsT[k * 128:(k + 1) * 128, :])
        nisa6.dma_copy(rhs_tiles[:, k, :], rhs[k * 128:(k + 1) * 128, :])
    acc = nl6.zeros((M, N), dtype=nl6.float32, buffer=nl6.psum)
    for k in nl6.affine_range(K // 128):
        nisa6.nc_matmul(acc, lhs_tiles[:, k, :], rhs_tiles[:, k, :], accumulate=True)
    nl6.store(out, value=nl6.copy(acc))
    return out


# --- loop_reduce, a lower mask bound, iota ----------------------------------------------------

@nkicc.jit
def column_sum_01(a):
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, a.shape[1]), dtype=a.dtype)
    for i in nl.affine_range(a.shape[0] // 128):
        acc[...] = nl.loop_reduce(nl.load(a[i * 128:(i + 1) * 128, :]), op=np.add, loop_indices=[i])
    nl.store(out, value=acc)
    return out


@nkicc.jit
def tail_columns_01(a, start: int):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:a.shape[0], 0:a.shape[1]]
    zero = nl.zeros(a.shape, dtype=a.dtype)
    nl.store(out, value=zero)
    t = nl.load(a[i_p, i_f], mask=(i_f >= start))
    nl.store(out[i_p, i_f], value=nl.exp(t, mask=(i_f >= start)), mask=(i_f >= start))
    return out


@nkicc.jit
def iota_01(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:a.shape[0], 0:a.shape[1]]
    idx = nisa.iota(i_p * a.shape[1] + i_f, dtype=nl.float32)
    nl.store(out, value=nl.add(idx, nl.load(a)))
    return out


@nkicc.jit
def causal_01(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:a.shape[0], 0:a.shape[1]]
    t = nl.load(a)
    nl.store(out, value=nisa.affine_select(i_p - i_f >= 0, t, -9984.0))
    return out


@nkicc.jit
def transpose_pe_01(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nisa.nc_transpose(nl.load(a))
    nl.store(out, value=nl.copy(t))
    return out


@nkicc.jit
def exp_into_01(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype)
    t[...] = nl.exp(nl.load(a))
    nl.store(out, value=t)
    return out
