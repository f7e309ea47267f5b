"""Near-literal scaled copies of the user's seed kernels (../shared/workloads),
for tests/test_seeds_scaled.py. Only the numbers are changed; every quirk of the
originals is kept on purpose:

- seed_mm2_static: in the ragged last m block the Ct tiles still run to MB, so
  the nc_matmul reads past the end of the At tile (W101); the extra rows never
  reach E.
- seed_mm2_dynamic: the E stores write n_te * TE >= MB rows per block, spilling
  zeros into the next block, which overwrites them later. Its B and D access
  patterns leave out the k0 and n1 offsets (the original does the same), so the
  result is wrong on random inputs and right on all-ones; `fix_offsets=True`
  adds them.

Scaling (seed -> here): m blocks 25 -> 4 of 1311 -> 300 rows, M 32768 -> 1190
(ragged last block of 290), K 4096 -> 256 (k0 32 -> 2), N 16384 -> 512 (n0 8 -> 2, n1 16 -> 2),
L 4096 -> 256 (l0 32 -> 2), Ct m tile 512 -> 128 (3 tiles), E m tile 120 -> 56 (11 -> 6 tiles);
compute_einsum: 256 -> 3 m0 blocks, K0 32 -> 4, P0 128 -> 4, L0 8 -> 2.
"""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

M, K, N, L = 1190, 256, 512, 256


@nkicc.jit
def mm2_static(At, B, D, m_factor=1):
    E = nl.ndarray((min(300 * (4 // m_factor), M), L), dtype=nl.float32, buffer=nl.shared_hbm, name="E")
    for m0 in nl.static_range(4 // m_factor):
        E_write_1 = nl.zeros((56, L, 6), dtype=nl.float32, buffer=nl.sbuf, name="E_write_1")
        for n0 in nl.static_range(2):
            Ct_write_0 = nl.zeros((128, 300, 2), dtype=nl.float32, buffer=nl.sbuf, name="Ct_write_0")
            for k0 in nl.static_range(2):
                actual_m_start = m0 * 300
                actual_m_end = min(actual_m_start + 300, M)
                m_elems = actual_m_end - actual_m_start
                At_read_0 = nl.load(At[k0 * 128:(k0 + 1) * 128, actual_m_start:actual_m_end])
                for n1 in nl.static_range(2):
                    actual_n = n0 * 256 + n1 * 128
                    B_read_0 = nl.load(B[k0 * 128:(k0 + 1) * 128, actual_n:actual_n + 128])
                    for m1 in nl.static_range(3):
                        ct_m_idx_start = m1 * 128
                        ct_m_idx_end = min(ct_m_idx_start + 128, 300)
                        ct_m_elems = ct_m_idx_end - ct_m_idx_start
                        Ct_write_0_psum = nl.ndarray((128, ct_m_elems), dtype=nl.float32, buffer=nl.psum)
                        nisa.tensor_copy(Ct_write_0_psum, Ct_write_0[:, ct_m_idx_start:ct_m_idx_end, n1])
                        nisa.nc_matmul(Ct_write_0_psum, B_read_0, At_read_0[:, ct_m_idx_start:ct_m_idx_end])
                        nisa.tensor_copy(Ct_write_0[:, ct_m_idx_start:ct_m_idx_end, n1], Ct_write_0_psum)
            Ct_read_1 = Ct_write_0
            for n1 in nl.static_range(2):
                actual_n = n0 * 256 + n1 * 128
                for l0 in nl.static_range(2):
                    D_read_1 = nl.load(D[actual_n:actual_n + 128, l0 * 128:(l0 + 1) * 128])
                    for m1 in nl.static_range(6):
                        ct_m_idx_start = m1 * 56
                        ct_m_idx_end = min(ct_m_idx_start + 56, 300)
                        ct_m_elems = ct_m_idx_end - ct_m_idx_start
                        E_write_1_psum = nl.ndarray((ct_m_elems, 128), dtype=nl.float32, buffer=nl.psum)
                        nisa.tensor_copy(E_write_1_psum, E_write_1[:ct_m_elems, l0 * 128:(l0 + 1) * 128, m1])
                        nisa.nc_matmul(E_write_1_psum, Ct_read_1[:, ct_m_idx_start:ct_m_idx_end, n1], D_read_1)
                        nisa.tensor_copy(E_write_1[:ct_m_elems, l0 * 128:(l0 + 1) * 128, m1], E_write_1_psum)
        for m1 in nl.static_range(6):
            actual_m_start = m0 * 300 + m1 * 56
            actual_m_end = min(actual_m_start + 56, E.shape[0])
            m_elems = actual_m_end - actual_m_start
            nl.store(E[actual_m_start:actual_m_end, :], E_write_1[:m_elems, :, m1])
    return E


@nkicc.jit
def mm2_dynamic(At, B, D, fix_offsets=False):
    kB = 128 * N if fix_offsets else 0  # B elements per k0 tile (the seed omits it)
    nD = 128 * L if fix_offsets else 0  # D elements per n1 tile (the seed omits it)
    E = nl.ndarray((M, L), dtype=nl.float32, buffer=nl.shared_hbm, name="E")
    m_start_idx = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf, name="m_start_idx")
    for m_ in nl.dynamic_range(3):  # 3 * 300 + 290
        E_write_1 = nl.zeros((56, L, 6), dtype=nl.float32, buffer=nl.sbuf, name="E_write_1")
        n_start_idx = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf, name="n_start_idx")
        for n0 in nl.dynamic_range(2):
            Ct_write_0 = nl.zeros((128, 300, 2), dtype=nl.float32, buffer=nl.sbuf, name="Ct_write_0")
            for k0 in nl.static_range(2):
                At_read_access_pattern = At.ap(
                    pattern=[[M, 128], [1, 300]],
                    offset=k0 * 128 * M,
                    scalar_offset=m_start_idx,
                    indirect_dim=1
                )
                At_read_0 = nl.load(At_read_access_pattern)
                for n1 in nl.static_range(2):
                    B_ap = B.ap(
                        pattern=[[N, 128], [1, 128]],
                        offset=n1 * 128 + k0 * kB,
                        scalar_offset=n_start_idx,
                        indirect_dim=1
                    )
                    B_read_0 = nl.load(B_ap)
                    for m1 in nl.static_range(3):
                        ct_m_idx_start = m1 * 128
                        ct_m_idx_end = min(ct_m_idx_start + 128, 300)
                        ct_m_elems = ct_m_idx_end - ct_m_idx_start
                        Ct_write_0_psum = nl.ndarray((128, ct_m_elems), dtype=nl.float32, buffer=nl.psum,
                                                     name=f"Ct_write_0_psum_{m1}_{n1}_{k0}")
                        nisa.tensor_copy(Ct_write_0_psum, Ct_write_0[:, ct_m_idx_start:ct_m_idx_end, n1])
                        nisa.nc_matmul(Ct_write_0_psum, B_read_0, At_read_0[:, ct_m_idx_start:ct_m_idx_end])
                        nisa.tensor_copy(Ct_write_0[:, ct_m_idx_start:ct_m_idx_end, n1], Ct_write_0_psum)
            Ct_read_1 = Ct_write_0
            for n1 in nl.static_range(2):
                for l0 in nl.static_range(2):
                    D_ap = D.ap(
                        pattern=[[L, 128], [1, 128]],
                        offset=l0 * 128 + n1 * nD,
                        scalar_offset=n_start_idx,
                        indirect_dim=0
                    )
                    D_read_1 = nl.load(D_ap)
                    for m1 in nl.static_range(6):
                        ct_m_idx_start = m1 * 56
                        ct_m_idx_end = min(ct_m_idx_start + 56, 300)
                        ct_m_elems = ct_m_idx_end - ct_m_idx_start
                        E_write_1_psum = nl.ndarray((ct_m_elems, 128), dtype=nl.float32, buffer=nl.psum,
                                                    name=f"E_write_1_psum_{m1}_{n1}_{l0}")
                        nisa.tensor_copy(E_write_1_psum, E_write_1[:ct_m_elems, l0 * 128:(l0 + 1) * 128, m1])
                        nisa.nc_matmul(E_write_1_psum, Ct_read_1[:, ct_m_idx_start:ct_m_idx_end, n1], D_read_1)
                        nisa.tensor_copy(E_write_1[:ct_m_elems, l0 * 128:(l0 + 1) * 128, m1], E_write_1_psum)
            nisa.tensor_scalar(dst=n_start_idx, data=n_start_idx, op0=nl.add, operand0=256)

        for m1 in nl.static_range(6):
            E_ap = E.ap(
                pattern=[[L, 56], [1, L]],
                offset=m1 * 56 * L,
                scalar_offset=m_start_idx,
                indirect_dim=0
            )
            nl.store(E_ap, E_write_1[:, :, m1])
        nisa.tensor_scalar(dst=m_start_idx, data=m_start_idx, op0=nl.add, operand0=300)
    m0 = 3
    E_write_1 = nl.zeros((56, L, 6), dtype=nl.float32, buffer=nl.sbuf, name="E_write_1_ragged")
    n_start_idx = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf, name="n_start_idx_ragged")
    for n0 in nl.dynamic_range(2):
        Ct_write_0 = nl.zeros((128, 300, 2), dtype=nl.float32, buffer=nl.sbuf, name="Ct_write_0_ragged")
        for k0 in nl.static_range(2):
            actual_m_start = m0 * 300
            actual_m_end = min(actual_m_start + 300, M)
            m_elems = actual_m_end - actual_m_start
            At_read_0 = nl.load(At[k0 * 128:(k0 + 1) * 128, actual_m_start:actual_m_end])
            for n1 in nl.static_range(2):
                B_ap = B.ap(
                    pattern=[[N, 128], [1, 128]],
                    offset=n1 * 128 + k0 * kB,
                    scalar_offset=n_start_idx,
                    indirect_dim=1
                )
                B_read_0 = nl.load(B_ap)
                for m1 in nl.static_range(3):
                    ct_m_idx_start = m1 * 128
                    ct_m_idx_end = min(ct_m_idx_start + 128, m_elems)
                    ct_m_elems = ct_m_idx_end - ct_m_idx_start
                    Ct_write_0_psum_r = nl.ndarray((128, ct_m_elems), dtype=nl.float32, buffer=nl.psum,
                                                   name=f"Ct_write_0_psum_ragged_{m1}_{n1}_{k0}")
                    nisa.tensor_copy(Ct_write_0_psum_r, Ct_write_0[:, ct_m_idx_start:ct_m_idx_end, n1])
                    nisa.nc_matmul(Ct_write_0_psum_r, B_read_0, At_read_0[:, ct_m_idx_start:ct_m_idx_end])
                    nisa.tensor_copy(Ct_write_0[:, ct_m_idx_start:ct_m_idx_end, n1], Ct_write_0_psum_r)
        Ct_read_1 = Ct_write_0
        for n1 in nl.static_range(2):
            for l0 in nl.static_range(2):
                D_ap = D.ap(
                    pattern=[[L, 128], [1, 128]],
                    offset=l0 * 128 + n1 * nD,
                    scalar_offset=n_start_idx,
                    indirect_dim=0
                )
                D_read_1 = nl.load(D_ap)
                for m1 in nl.static_range(6):
                    ct_m_idx_start = m1 * 56
                    ct_m_idx_end = min(ct_m_idx_start + 56, 300)
                    ct_m_elems = ct_m_idx_end - ct_m_idx_start
                    E_write_1_psum = nl.ndarray((ct_m_elems, 128), dtype=nl.float32, buffer=nl.psum,
                                                name=f"E_write_1_psum_ragged_{m1}_{n1}_{l0}")
                    nisa.tensor_copy(E_write_1_psum, E_write_1[:ct_m_elems, l0 * 128:(l0 + 1) * 128, m1])
                    nisa.nc_matmul(E_write_1_psum, Ct_read_1[:, ct_m_idx_start:ct_m_idx_end, n1], D_read_1)
                    nisa.tensor_copy(E_write_1[:ct_m_elems, l0 * 128:(l0 + 1) * 128, m1], E_write_1_psum)
        nisa.tensor_scalar(dst=n_start_idx, data=n_start_idx, op0=nl.add, operand0=256)
    for m1 in nl.static_range(6):
        actual_m_start = m0 * 300 + m1 * 56
        actual_m_end = min(actual_m_start + 56, E.shape[0])
        m_elems = actual_m_end - actual_m_start
        nl.store(E[actual_m_start:actual_m_end, :], E_write_1[:m_elems, :, m1])
    return E


M0_TOTAL = 3
K0, P0, L0 = 4, 4, 2


@nkicc.jit
def compute_einsum(A, B, C, D):
    E = nl.ndarray((M0_TOTAL * 128, L0 * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for m0 in nl.affine_range(M0_TOTAL):
        E_write_chunks = []
        for _ in range(L0):
            E_write_chunks.append(nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum))
        A_chunks = []
        for k0 in range(K0):
            A_chunks.append(nl.load_transpose2d(A[m0 * 128:(m0 + 1) * 128, k0 * 128:(k0 + 1) * 128]))
        for p0 in nl.affine_range(P0):
            C_write_0 = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
            for k0 in nl.affine_range(K0):
                B_read_0 = nl.load(B[k0 * 128:(k0 + 1) * 128, p0 * 128:(p0 + 1) * 128])
                nisa.nc_matmul(C_write_0, B_read_0, A_chunks[k0])
            C_read_1 = nl.zeros(C_write_0.shape, dtype=nl.float32)
            nisa.tensor_copy(C_read_1, C_write_0)
            for l0 in nl.affine_range(L0):
                D_subchunk = nl.load(D[p0 * 128:(p0 + 1) * 128, l0 * 512:(l0 + 1) * 512])
                nisa.nc_matmul(E_write_chunks[l0], C_read_1, D_subchunk)
        E_sbuf = nl.zeros((128, L0 * 512), dtype=nl.float32)
        for l0 in range(L0):
            nisa.tensor_copy(E_sbuf[:, l0 * 512:(l0 + 1) * 512], E_write_chunks[l0])
        nl.store(E[m0 * 128:(m0 + 1) * 128, :], E_sbuf)
    return E
