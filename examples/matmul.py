"""The matmul progression of the public NKI tutorial, written for nkicc:
result[M, N] = lhsT[K, M].T @ rhs[K, N].

Each step keeps the math and changes how data moves: `matmul_basic` (one
tile), `matmul_tiled` (loops over M, N, K tiles), `matmul_hoisted` (loads of
the stationary operand hoisted out of the N loop), `matmul_block_free` (N
tiles processed in blocks, so each stationary tile is reused across a block),
and `matmul_blocked` (M, N and K blocked; block sizes are keyword
meta-parameters). bench/timing.py checks that the estimated latency falls at
each step.

    nkicc simulate examples/matmul.py::matmul_blocked --inputs random
"""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

TILE_K = nl.tile_size.pmax                    # 128: contraction on partitions
TILE_M = nl.tile_size.gemm_stationary_fmax    # 128
TILE_N = nl.tile_size.gemm_moving_fmax        # 512


@nkicc.jit
def matmul_basic(lhsT: "float32[128,64]", rhs: "float32[128,512]"):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    b = nl.load(rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(out, acc)
    nl.store(result, out)
    return result


@nkicc.jit
def matmul_tiled(lhsT: "bfloat16[512,256]", rhs: "bfloat16[512,1024]"):
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
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], out)
    return result


@nkicc.jit
def matmul_hoisted(lhsT: "bfloat16[512,256]", rhs: "bfloat16[512,1024]"):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        # every K tile of this M stripe, loaded once and reused for all of N
        a = nl.ndarray((TILE_K, K // TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            nisa.dma_copy(a[:, k, :], lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
        for n in nl.affine_range(N // TILE_N):
            b = nl.ndarray((TILE_K, K // TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                nisa.dma_copy(b[:, k, :], rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(acc, a[:, k, :], b[:, k, :])
            out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(out, acc)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], out)
    return result


@nkicc.jit
def matmul_block_free(lhsT: "bfloat16[512,256]", rhs: "bfloat16[512,1024]", TILES_IN_BLOCK_N=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // BLOCK_N):
        # the moving operand of a whole N block stays in SBUF
        b = nl.ndarray((TILE_K, K // TILE_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            nisa.dma_copy(b[:, k, :], rhs[k * TILE_K:(k + 1) * TILE_K, nb * BLOCK_N:(nb + 1) * BLOCK_N])
        for m in nl.affine_range(M // TILE_M):
            a = nl.ndarray((TILE_K, K // TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                nisa.dma_copy(a[:, k, :], lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // TILE_K):
                    nisa.nc_matmul(acc, a[:, k, :], b[:, k, bn * TILE_N:(bn + 1) * TILE_N])
                out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(out, acc)
                col = nb * BLOCK_N + bn * TILE_N
                nl.store(result[m * TILE_M:(m + 1) * TILE_M, col:col + TILE_N], out)
    return result


@nkicc.jit
def matmul_blocked(lhsT: "bfloat16[1024,512]", rhs: "bfloat16[1024,2048]",
                   TILES_IN_BLOCK_M=4, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Fully blocked: a block of M x N results accumulates in SBUF over K
    blocks; within a K block every stationary tile is used for every N tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // BLOCK_M):
        for nb in nl.affine_range(N // BLOCK_N):
            res = nl.zeros((TILE_M, TILES_IN_BLOCK_M, BLOCK_N), dtype=nl.float32, buffer=nl.sbuf)
            for kb in nl.sequential_range(K // BLOCK_K):
                a = nl.ndarray((TILE_K, TILES_IN_BLOCK_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TILE_K, TILES_IN_BLOCK_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(TILES_IN_BLOCK_K):
                    row = kb * BLOCK_K + k * TILE_K
                    nisa.dma_copy(a[:, k, :], lhsT[row:row + TILE_K, mb * BLOCK_M:(mb + 1) * BLOCK_M])
                    nisa.dma_copy(b[:, k, :], rhs[row:row + TILE_K, nb * BLOCK_N:(nb + 1) * BLOCK_N])
                for bm in nl.affine_range(TILES_IN_BLOCK_M):
                    for bn in nl.affine_range(TILES_IN_BLOCK_N):
                        acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(acc, a[:, k, bm * TILE_M:(bm + 1) * TILE_M],
                                           b[:, k, bn * TILE_N:(bn + 1) * TILE_N])
                        part = res[:, bm, bn * TILE_N:(bn + 1) * TILE_N]
                        nisa.tensor_tensor(part, part, acc, op=nl.add)
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                rows = mb * BLOCK_M + bm * TILE_M
                nl.store(result[rows:rows + TILE_M, nb * BLOCK_N:(nb + 1) * BLOCK_N], res[:, bm, :])
    return result
