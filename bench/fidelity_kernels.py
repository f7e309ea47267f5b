"""nkicc's own versions of the vendor tutorial kernels whose measured figures
bench/fidelity.py compares with nkicc's estimates. They follow the loop
structure each tutorial describes (that is what the published figures
measure); the code is this project's.

Fused Mamba (nki/guides/tutorials/fused_mamba.rst): for batch b, channel c,
state s,  h[t] = exp(delta[t] * A[c, s]) * h[t-1] + delta[t] * u[t] * B[s, t]
and out[t] = sum_s C[s, t] * h[t].
  v1  loops batch > channel tile > state, and loads delta and u again for
      every state ("Initial NKI Kernel");
  v2  hoists the delta / u loads out of the state loop ("Minimizing data
      reloading by loop reordering");
  v3  also tiles seq_len by 512 inside the state loop, the scan state carried
      from tile to tile through `initial` ("Mitigate spilling by tiling
      seq_len").

Kernel optimization (nki/guides/tutorials/kernel-optimization.rst): steps 3
and 4 of its matmul, `kopt_block_mn` and `kopt_block_mnk` (see below).
"""
import numpy as np
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

P = 128
SEQ_TILE = 512


def _state_step(acc, delta_t, u_t, a_col, b_row, c_row, init, width):
    """One state's contribution over `width` time steps; returns the scan
    result (its last column is the next tile's `initial`)."""
    d_a = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=d_a, op=nl.exp, data=delta_t, scale=a_col)
    d_u = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=d_u, data1=delta_t, data2=u_t, op=nl.multiply)
    d_bu = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=d_bu, data1=d_u, data2=b_row.broadcast_to((P, width)), op=nl.multiply)
    h = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=h, data0=d_a, data1=d_bu, initial=init, op0=nl.multiply, op1=nl.add)
    h_c = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=h_c, data1=h, data2=c_row.broadcast_to((P, width)), op=nl.multiply)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=h_c, op=nl.add)
    return h


def _load(src, shape):
    t = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


@nkicc.jit
def mamba_v1(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for ct in nl.affine_range(channels // P):
            rows = nl.ds(ct * P, P)
            acc = nl.zeros((P, seq), dtype=nl.float32, buffer=nl.sbuf)
            for s in nl.affine_range(states):
                d_t = _load(delta[b, rows, :], (P, seq))       # reloaded for every state
                u_t = _load(u[b, rows, :], (P, seq))
                a_col = _load(A[rows, s:s + 1], (P, 1))
                b_row = _load(B[b, s:s + 1, :], (1, seq))
                c_row = _load(C[b, s:s + 1, :], (1, seq))
                _state_step(acc, d_t, u_t, a_col, b_row, c_row, 0.0, seq)
            nisa.dma_copy(dst=out[b, rows, :], src=acc)
    return out


@nkicc.jit
def mamba_v2(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for ct in nl.affine_range(channels // P):
            rows = nl.ds(ct * P, P)
            acc = nl.zeros((P, seq), dtype=nl.float32, buffer=nl.sbuf)
            d_t = _load(delta[b, rows, :], (P, seq))           # once per channel tile
            u_t = _load(u[b, rows, :], (P, seq))
            for s in nl.affine_range(states):
                a_col = _load(A[rows, s:s + 1], (P, 1))
                b_row = _load(B[b, s:s + 1, :], (1, seq))
                c_row = _load(C[b, s:s + 1, :], (1, seq))
                _state_step(acc, d_t, u_t, a_col, b_row, c_row, 0.0, seq)
            nisa.dma_copy(dst=out[b, rows, :], src=acc)
    return out


@nkicc.jit
def mamba_v3(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    states = A.shape[1]
    width = min(SEQ_TILE, seq)
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for ct in nl.affine_range(channels // P):
            rows = nl.ds(ct * P, P)
            acc = nl.zeros((P, seq), dtype=nl.float32, buffer=nl.sbuf)
            d_t = _load(delta[b, rows, :], (P, seq))
            u_t = _load(u[b, rows, :], (P, seq))
            for s in nl.affine_range(states):
                a_col = _load(A[rows, s:s + 1], (P, 1))
                carry = nl.zeros((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                for t in nl.sequential_range(seq // width):
                    cols = nl.ds(t * width, width)
                    b_row = _load(B[b, s:s + 1, cols], (1, width))
                    c_row = _load(C[b, s:s + 1, cols], (1, width))
                    h = _state_step(acc[:, cols], d_t[:, cols], u_t[:, cols], a_col, b_row, c_row, carry, width)
                    nisa.tensor_copy(dst=carry, src=h[:, width - 1:width])
            nisa.dma_copy(dst=out[b, rows, :], src=acc)
    return out


def mamba_inputs(batch, channels, seq, states, seed=0):
    rng = np.random.default_rng(seed)
    f = np.float32
    return (rng.uniform(0.01, 0.2, (batch, channels, seq)).astype(f),
            rng.standard_normal((batch, channels, seq)).astype(f),
            -rng.uniform(0.5, 2.0, (channels, states)).astype(f), rng.standard_normal((batch, states, seq)).astype(f),
            rng.standard_normal((batch, states, seq)).astype(f))


def mamba_reference(delta, u, A, B, C):
    delta, u, A, B, C = (np.asarray(x, np.float64) for x in (delta, u, A, B, C))
    out = np.zeros_like(delta)
    for s in range(A.shape[1]):
        d_a = np.exp(delta * A[None, :, s:s + 1])
        d_bu = delta * u * B[:, s:s + 1, :]
        h = np.zeros(delta.shape[:2])
        for t in range(delta.shape[2]):
            h = d_a[:, :, t] * h + d_bu[:, :, t]
            out[:, :, t] += C[:, s, t][:, None] * h
    return out


# --- kernel-optimization tutorial (nki/guides/tutorials/kernel-optimization.rst), steps 3 and 4 ----
# result[M, N] = lhsT[K, M].T @ rhs[K, N]. Steps 1 and 2 are examples/matmul.py's (the same loop
# structure); its steps 3 and 4 are written differently (step 3 blocks N only, step 4 keeps one
# result block per M and N block), so these follow the structure the tutorial profiled.
TILE_K, TILE_M, TILE_N = 128, 128, 512


@nkicc.jit
def kopt_block_mn(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2):
    """Step 3 ('Overlapping data and compute through blocking'): M and N
    blocked; an M block's lhsT column tiles and an N block's rhs column
    tiles are loaded once each, one SBUF tile per (block tile, k); K is not
    blocked (PSUM accumulates over it)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    BM, BN = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BM):
        lhs = []
        for bm in range(TILES_IN_BLOCK_M):
            row = []
            for k in range(K // TILE_K):
                t = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=lhsT[k * TILE_K:(k + 1) * TILE_K,
                                              m * BM + bm * TILE_M:m * BM + (bm + 1) * TILE_M])
                row.append(t)
            lhs.append(row)
        for n in nl.affine_range(N // BN):
            rhs_t = []
            for bn in range(TILES_IN_BLOCK_N):
                row = []
                for k in range(K // TILE_K):
                    t = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t, src=rhs[k * TILE_K:(k + 1) * TILE_K,
                                                 n * BN + bn * TILE_N:n * BN + (bn + 1) * TILE_N])
                    row.append(t)
                rhs_t.append(row)
            for bm in range(TILES_IN_BLOCK_M):
                for bn in range(TILES_IN_BLOCK_N):
                    acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in range(K // TILE_K):
                        nisa.nc_matmul(dst=acc, stationary=lhs[bm][k], moving=rhs_t[bn][k])
                    out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out, src=acc)
                    nisa.dma_copy(dst=result[m * BM + bm * TILE_M:m * BM + (bm + 1) * TILE_M,
                                             n * BN + bn * TILE_N:n * BN + (bn + 1) * TILE_N], src=out)
    return result


@nkicc.jit
def kopt_block_mnk(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Step 4 ('Optimizing DMA through blocking the contraction dimension'):
    M, N and K blocked. For an N block the results of every M block
    accumulate in SBUF over the K blocks; an rhs K block is loaded once per
    (N block, K block) and reused by every M block."""
    K, M = lhsT.shape
    _, N = rhs.shape
    BM, BN, BK = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BN):
        res = []
        for m in range(M // BM):
            tiles = []
            for bm in range(TILES_IN_BLOCK_M):
                row = []
                for bn in range(TILES_IN_BLOCK_N):
                    t = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=t, value=0.0)
                    row.append(t)
                tiles.append(row)
            res.append(tiles)
        for k in nl.sequential_range(K // BK):
            rhs_t = []
            for bk in range(TILES_IN_BLOCK_K):
                t = nl.ndarray((TILE_K, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[k * BK + bk * TILE_K:k * BK + (bk + 1) * TILE_K, n * BN:(n + 1) * BN])
                rhs_t.append(t)
            for m in range(M // BM):
                lhs = []
                for bk in range(TILES_IN_BLOCK_K):
                    t = nl.ndarray((TILE_K, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t, src=lhsT[k * BK + bk * TILE_K:k * BK + (bk + 1) * TILE_K,
                                                  m * BM:(m + 1) * BM])
                    lhs.append(t)
                for bn in range(TILES_IN_BLOCK_N):
                    for bm in range(TILES_IN_BLOCK_M):
                        acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for bk in range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=acc, stationary=lhs[bk][:, bm * TILE_M:(bm + 1) * TILE_M],
                                           moving=rhs_t[bk][:, bn * TILE_N:(bn + 1) * TILE_N])
                        part = res[m][bm][bn]
                        nisa.tensor_tensor(dst=part, data1=part, data2=acc, op=nl.add)
        for m in range(M // BM):
            for bm in range(TILES_IN_BLOCK_M):
                for bn in range(TILES_IN_BLOCK_N):
                    nisa.dma_copy(dst=result[m * BM + bm * TILE_M:m * BM + (bm + 1) * TILE_M,
                                             n * BN + bn * TILE_N:n * BN + (bn + 1) * TILE_N], src=res[m][bm][bn])
    return result
