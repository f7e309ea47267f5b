"""The matmul progression of the public NKI tutorial, result[M, N] =
lhsT[K, M].T @ rhs[K, N]: basic (one tile), tiled (loops over M, N, K tiles),
hoisted loads (the stationary tiles of an M stripe loaded once for all of N),
blocked free dimensions (an N block of moving tiles kept in SBUF), and fully
blocked with keyword meta-parameters for the block sizes. Each kernel is
checked against numpy, some with several meta-parameter settings.

    nkicc run tests/driver/nki_scripts/matmul_tutorial.py
"""
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from _check import check

TILE_K = nl.tile_size.pmax                    # 128: contraction on partitions
TILE_M = nl.tile_size.gemm_stationary_fmax    # 128
TILE_N = nl.tile_size.gemm_moving_fmax        # 512


@nki.jit
def matmul_basic(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    b = nl.load(rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=acc)
    nl.store(result, value=out)
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                a = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                b = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(acc, a, b)
            out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(out, acc)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=out)
    return result


@nki.jit
def matmul_hoisted(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        a = nl.ndarray((TILE_K, K // TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            nisa.dma_copy(dst=a[:, k, :], src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
        for n in nl.affine_range(N // TILE_N):
            b = nl.ndarray((TILE_K, K // TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                nisa.dma_copy(dst=b[:, k, :], src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(acc, a[:, k, :], b[:, k, :])
            out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(out, acc)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=out)
    return result


@nki.jit
def matmul_block_free(lhsT, rhs, TILES_IN_BLOCK_N=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // BLOCK_N):
        b = nl.ndarray((TILE_K, K // TILE_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            nisa.dma_copy(dst=b[:, k, :], src=rhs[k * TILE_K:(k + 1) * TILE_K, nb * BLOCK_N:(nb + 1) * BLOCK_N])
        for m in nl.affine_range(M // TILE_M):
            a = nl.ndarray((TILE_K, K // TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                nisa.dma_copy(dst=a[:, k, :], src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // TILE_K):
                    nisa.nc_matmul(acc, a[:, k, :], b[:, k, bn * TILE_N:(bn + 1) * TILE_N])
                out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(out, acc)
                col = nb * BLOCK_N + bn * TILE_N
                nl.store(result[m * TILE_M:(m + 1) * TILE_M, col:col + TILE_N], value=out)
    return result


@nki.jit
def matmul_blocked(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // BLOCK_M):
        for nb in nl.affine_range(N // BLOCK_N):
            res = nl.zeros((TILE_M, TILES_IN_BLOCK_M, BLOCK_N), dtype=nl.float32, buffer=nl.sbuf)
            for kb in nl.sequential_range(K // BLOCK_K):
                a = nl.ndarray((TILE_K, TILES_IN_BLOCK_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TILE_K, TILES_IN_BLOCK_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(TILES_IN_BLOCK_K):
                    row = kb * BLOCK_K + k * TILE_K
                    nisa.dma_copy(dst=a[:, k, :], src=lhsT[row:row + TILE_K, mb * BLOCK_M:(mb + 1) * BLOCK_M])
                    nisa.dma_copy(dst=b[:, k, :], src=rhs[row:row + TILE_K, nb * BLOCK_N:(nb + 1) * BLOCK_N])
                for bm in nl.affine_range(TILES_IN_BLOCK_M):
                    for bn in nl.affine_range(TILES_IN_BLOCK_N):
                        acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(acc, a[:, k, bm * TILE_M:(bm + 1) * TILE_M],
                                           b[:, k, bn * TILE_N:(bn + 1) * TILE_N])
                        part = res[:, bm, bn * TILE_N:(bn + 1) * TILE_N]
                        nisa.tensor_tensor(dst=part, data1=part, data2=acc, op=nl.add)
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                rows = mb * BLOCK_M + bm * TILE_M
                nl.store(result[rows:rows + TILE_M, nb * BLOCK_N:(nb + 1) * BLOCK_N], value=res[:, bm, :])
    return result


def reference(lhsT, rhs):
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)


if __name__ == "__main__":
    rng = np.random.default_rng(3)
    bf16 = nl.bfloat16
    a, b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)
    check("matmul_basic fp32", matmul_basic(a, b), reference(a, b), 1e-4, 1e-4)
    a, b = rng.standard_normal((512, 256)).astype(bf16), rng.standard_normal((512, 1024)).astype(bf16)
    want = reference(a, b)
    check("matmul_tiled", matmul_tiled(a, b), want, 1e-3, 1e-3)
    check("matmul_hoisted", matmul_hoisted(a, b), want, 1e-3, 1e-3)
    check("matmul_block_free", matmul_block_free(a, b), want, 1e-3, 1e-3)
    check("matmul_block_free TILES_IN_BLOCK_N=1", matmul_block_free(a, b, TILES_IN_BLOCK_N=1), want, 1e-3, 1e-3)
    check("matmul_blocked", matmul_blocked(a, b), want, 1e-3, 1e-3)
    check("matmul_blocked M=1 N=1 K=4",
          matmul_blocked(a, b, TILES_IN_BLOCK_M=1, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=4), want, 1e-3, 1e-3)
