"""Kernels that do not fit on chip as written, for tests/test_alloc_fit.py.

block_free_lists: the free-dimension-blocked matmul of the matmul tutorial,
written as the tutorial writes it: tiles kept in Python lists, so the tile
loops are traced concretely and every load comes before every matmul of a
block. Over capacity as written once K is large (on trn2 from K = 6144 with
two-tile blocks: 2 * 48 stationary tiles of 512 B and 2 * 48 moving tiles of
2 KiB per partition); fits once live ranges are shortened.

psum_up_front: one PSUM accumulator per output block, all allocated ahead of
the loops in a Python list as the NKI Library's attention_cte does (16 of
them, 2 KiB each: twice trn2's 8 banks as written), each used by a loop of
its own with accumulate=None matmuls; fits once allocations move to their
first use.

chunked_logsumexp: the NKI Library cross-entropy's online log-sum-exp: a
chunk tile and its exponentials, both allocated ahead of the chunk loop, the
second made from the first element by element where the first dies. On the
tiny target (8 KiB) two [P, 1024] float32 tiles do not fit, one does.
`keep_chunk` reads the chunk again after the exponentials are made, and
`partial_load` leaves the chunk's last column to the next iteration: either
way the two are live at once and may not share bytes.

psum_drained_after: the NKI Library's bwmm_shard_on_I: one PSUM accumulator per
128-row tile of the output (12 of 2 KiB at I = 1536: 24 KiB against trn2's 16),
each summed over K by a rolled loop, all of them summed first and drained after.
Fits once each drain moves up to where its accumulator is finished: the rolled
K loops move as whole statements.

centered_squares: every tile of x is loaded, summed into a mean, then used
again after the mean is known, so all tiles are live at once whatever the
order: over capacity, it must spill.
"""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

TM, TK, TN = 128, 128, 512


@nkicc.jit
def block_free_lists(lhsT, rhs, BM=2, BN=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (TM * BM)):
        stationary = []
        for bm in nl.affine_range(BM):
            column = []
            for k in nl.affine_range(K // TK):
                t = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                col = (m * BM + bm) * TM
                nisa.dma_copy(dst=t, src=lhsT[k * TK:(k + 1) * TK, col:col + TM])
                column.append(t)
            stationary.append(column)
        for n in nl.affine_range(N // (TN * BN)):
            moving = []
            for bn in nl.affine_range(BN):
                column = []
                for k in nl.affine_range(K // TK):
                    t = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                    col = (n * BN + bn) * TN
                    nisa.dma_copy(dst=t, src=rhs[k * TK:(k + 1) * TK, col:col + TN])
                    column.append(t)
                moving.append(column)
            for bm in nl.affine_range(BM):
                for bn in nl.affine_range(BN):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TK):
                        nisa.nc_matmul(dst=acc, stationary=stationary[bm][k], moving=moving[bn][k])
                    out = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out, src=acc)
                    row, col = (m * BM + bm) * TM, (n * BN + bn) * TN
                    nisa.dma_copy(dst=result[row:row + TM, col:col + TN], src=out)
    return result


@nkicc.jit
def centered_squares(x):
    P, F = x.shape
    T = 128
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    total = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=total, value=0.0)
    for j in nl.affine_range(F // T):
        t = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, j * T:(j + 1) * T])
        nisa.tensor_tensor(dst=total, data1=total, data2=t, op=nl.add)
        tiles.append(t)
    mean = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=mean, data=total, op0=nl.multiply, operand0=1.0 / (F // T))
    for j in nl.affine_range(F // T):
        d = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=tiles[j], data2=mean, op=nl.subtract)
        sq = nl.ndarray((P, T), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=sq, data1=d, data2=d, op=nl.multiply)
        nisa.dma_copy(dst=out[:, j * T:(j + 1) * T], src=sq)
    return out


@nkicc.jit
def psum_groups(lhsT, rhs):
    """kernel-optimization step 4's inner pattern: one PSUM accumulator per output tile, which
    the Tensor Engine sums over K and the Vector Engine then adds into that tile's SBUF result,
    kept in Python lists (so the tile loops are traced). An accumulator is dead once added, so
    first-fit would give them all one bank (tests/plugins/test_alloc_psum.py)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    res = []
    for m in range(M // TM):
        row = []
        for n in range(N // TN):
            t = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=t, value=1.0)
            row.append(t)
        res.append(row)
    stationary, moving = [], []
    for k in range(K // TK):
        s = nl.ndarray((TK, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=lhsT[k * TK:(k + 1) * TK, :])
        stationary.append(s)
        t = nl.ndarray((TK, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=rhs[k * TK:(k + 1) * TK, :])
        moving.append(t)
    for m in range(M // TM):
        for n in range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // TK):
                nisa.nc_matmul(dst=acc, stationary=stationary[k][:, m * TM:(m + 1) * TM],
                               moving=moving[k][:, n * TN:(n + 1) * TN])
            nisa.tensor_tensor(dst=res[m][n], data1=res[m][n], data2=acc, op=nl.add)
    for m in range(M // TM):
        for n in range(N // TN):
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res[m][n])
    return result


@nkicc.jit
def psum_up_front(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    accs = [nl.ndarray((M, TN), dtype=nl.float32, buffer=nl.psum) for _ in range(N // TN)]
    for j in range(N // TN):
        for k in nl.affine_range(K // TK):
            st = nl.ndarray((TK, M), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=st, src=lhsT[k * TK:(k + 1) * TK, :])
            mv = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=mv, src=rhs[k * TK:(k + 1) * TK, j * TN:(j + 1) * TN])
            nisa.nc_matmul(accs[j], st, mv)
        res = nl.ndarray((M, TN), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=accs[j])
        nisa.dma_copy(dst=out[:, j * TN:(j + 1) * TN], src=res)
    return out


@nkicc.jit
def chunked_logsumexp(x, chunk=1024, keep_chunk=False, partial_load=False):
    P, V = x.shape
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    d = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((P, chunk), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.ndarray((P, chunk), dtype=nl.float32, buffer=nl.sbuf)
    cm = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(m, -1e30)
    nisa.memset(d, 0.0)
    for i in range(V // chunk):
        if partial_load:  # the last column keeps the previous chunk's: c's value crosses iterations
            nisa.dma_copy(dst=c[:, 0:chunk - 1], src=x[:, i * chunk:(i + 1) * chunk - 1])
        else:
            nisa.dma_copy(dst=c, src=x[:, i * chunk:(i + 1) * chunk])
        nisa.tensor_reduce(dst=cm, op=nl.maximum, data=c, axis=1)
        nisa.tensor_tensor(dst=cm, data1=cm, data2=m, op=nl.maximum)
        nisa.tensor_tensor(dst=m, data1=m, data2=cm, op=nl.subtract)
        nisa.activation(dst=m, op=nl.exp, data=m)
        nisa.tensor_tensor(dst=d, data1=d, data2=m, op=nl.multiply)
        nisa.tensor_scalar(dst=e, data=c, op0=nl.subtract, operand0=cm)
        nisa.activation(dst=e, op=nl.exp, data=e)
        if keep_chunk:
            nisa.tensor_tensor(dst=e, data1=e, data2=c, op=nl.multiply)
            nisa.tensor_tensor(dst=e, data1=e, data2=c, op=nl.divide)
        nisa.tensor_reduce(dst=s, op=nl.add, data=e, axis=1)
        nisa.tensor_tensor(dst=d, data1=d, data2=s, op=nl.add)
        nisa.tensor_copy(dst=m, src=cm)
    nisa.activation(dst=d, op=nl.log, data=d)
    nisa.tensor_tensor(dst=d, data1=d, data2=m, op=nl.add)
    nisa.dma_copy(dst=out, src=d)
    return out


@nkicc.jit
def psum_drained_after(w, x):
    K, I = w.shape
    _, B = x.shape
    out = nl.ndarray((I, B), dtype=nl.float32, buffer=nl.shared_hbm)
    ws = nl.ndarray((TK, K // TK, I), dtype=w.dtype, buffer=nl.sbuf)
    xs = nl.ndarray((TK, K // TK, B), dtype=x.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(K // TK):
        nisa.dma_copy(dst=ws[:, k, :], src=w[k * TK:(k + 1) * TK, :])
        nisa.dma_copy(dst=xs[:, k, :], src=x[k * TK:(k + 1) * TK, :])
    res = [nl.ndarray((TM, B), dtype=nl.float32, buffer=nl.sbuf) for _ in range(I // TM)]
    accs = [nl.ndarray((TM, B), dtype=nl.float32, buffer=nl.psum) for _ in range(I // TM)]
    for i in range(I // TM):
        for k in nl.affine_range(K // TK):
            nisa.nc_matmul(accs[i], ws[:, k, i * TM:(i + 1) * TM], xs[:, k, :])
    for i in range(I // TM):
        nisa.tensor_copy(dst=res[i], src=accs[i])
        nisa.dma_copy(dst=out[i * TM:(i + 1) * TM, :], src=res[i])
    return out


@nkicc.jit
def many_slices_then_sum(x):
    """Every slice of x loaded into a tile of its own, all live until they are summed at the end:
    past the capacity by a few tiles at each allocation, by many at the sum."""
    P, F = x.shape
    W = 16
    out = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(F // W):
        t = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, i * W:(i + 1) * W])
        tiles.append(t)
    acc = nl.ndarray((P, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=acc, src=tiles[0])
    # a loop on the device: nothing is reordered across it, so every tile stays live over it
    nl.fori_loop(0, 1, lambda i: nisa.tensor_scalar(dst=acc, data=acc, op0=nl.multiply, operand0=1.0))
    for t in tiles[1:]:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out
