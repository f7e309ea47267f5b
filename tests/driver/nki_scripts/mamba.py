"""Mamba-style selective scans, after the NKI tutorial. For each batch b,
channel c and state s:

    deltaA[c, t]  = exp(delta[b, c, t] * A[c, s])
    deltaBu[c, t] = delta[b, c, t] * u[b, c, t] * B[b, s, t]
    h[c, t]       = deltaA[c, t] * h[c, t-1] + deltaBu[c, t]      (h[c, -1] = 0)
    out[b, c, t] += C[b, s, t] * h[c, t]

The exponent is one activation with a per-partition `scale` tile, the B and C
rows are broadcast across the channel partitions with broadcast_to, and the
recurrence is nisa.tensor_tensor_scan. v1 recomputes everything per state;
v2 hoists what does not depend on the state out of the state loop; v3 also
tiles the sequence, carrying the scan state from one chunk to the next as
the scan's `initial` tile.

    nkicc run tests/driver/nki_scripts/mamba.py
"""
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from _check import check

P = nl.tile_size.pmax


@nki.jit
def mamba_v1(delta, u, A, B, C):
    batch, channels, seq_len = delta.shape
    state_size = A.shape[1]
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for c in nl.affine_range(channels // P):
            ch = nl.ds(c * P, P)
            acc = nl.zeros((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
            for s in nl.affine_range(state_size):
                delta_i = nl.load(delta[b, ch, :])
                u_i = nl.load(u[b, ch, :])
                A_i = nl.load(A[ch, s:s + 1])                       # [P, 1]: one value per channel
                deltaA = nl.ndarray((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=deltaA, op=nl.exp, data=delta_i, scale=A_i)
                B_i = nl.load(B[b, s:s + 1, :])                     # [1, seq_len]
                deltaU = nl.multiply(delta_i, u_i)
                deltaBu = nl.ndarray((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=deltaBu, data1=deltaU, data2=B_i.broadcast_to((P, seq_len)), op=nl.multiply)
                h = nl.ndarray((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor_scan(dst=h, data0=deltaA, data1=deltaBu, initial=0.0,
                                        op0=nl.multiply, op1=nl.add)
                C_i = nl.load(C[b, s:s + 1, :])
                hC = nl.multiply(nl.broadcast_to(C_i, (P, seq_len)), h)
                nisa.tensor_tensor(dst=acc, data1=acc, data2=hC, op=nl.add)
            nl.store(out[b, ch, :], value=acc)
    return out


@nki.jit
def mamba_v2(delta, u, A, B, C):
    batch, channels, seq_len = delta.shape
    state_size = A.shape[1]
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for c in nl.affine_range(channels // P):
        ch = nl.ds(c * P, P)
        A_c = nl.load(A[ch, :])                                    # [P, state_size], loaded once
        for b in nl.affine_range(batch):
            delta_i = nl.load(delta[b, ch, :])
            u_i = nl.load(u[b, ch, :])
            deltaU = nl.multiply(delta_i, u_i)
            B_b = nl.load(B[b])                                    # [state_size, seq_len]
            C_b = nl.load(C[b])
            acc = nl.zeros((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
            for s in nl.affine_range(state_size):
                deltaA = nl.ndarray((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=deltaA, op=nl.exp, data=delta_i, scale=A_c[:, s:s + 1])
                deltaBu = nl.multiply(deltaU, B_b[s:s + 1, :].broadcast_to((P, seq_len)))
                h = nl.ndarray((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor_scan(h, deltaA, deltaBu, 0.0, nl.multiply, nl.add)
                hC = nl.multiply(h, C_b[s:s + 1, :].broadcast_to((P, seq_len)))
                nisa.tensor_tensor(dst=acc, data1=acc, data2=hC, op=nl.add)
            nl.store(out[b, ch, :], value=acc)
    return out


@nki.jit
def mamba_v3(delta, u, A, B, C, seq_chunk=64):
    batch, channels, seq_len = delta.shape
    state_size = A.shape[1]
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for c in nl.affine_range(channels // P):
            ch = nl.ds(c * P, P)
            A_c = nl.load(A[ch, :])
            acc = nl.zeros((P, seq_len), dtype=nl.float32, buffer=nl.sbuf)
            carry = nl.zeros((P, state_size), dtype=nl.float32, buffer=nl.sbuf)  # h[:, last] per state
            for t in nl.sequential_range(seq_len // seq_chunk):
                seg = nl.ds(t * seq_chunk, seq_chunk)
                delta_i = nl.load(delta[b, ch, seg])
                deltaU = nl.multiply(delta_i, nl.load(u[b, ch, seg]))
                for s in nl.affine_range(state_size):
                    deltaA = nl.ndarray((P, seq_chunk), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation(dst=deltaA, op=nl.exp, data=delta_i, scale=A_c[:, s:s + 1])
                    B_i = nl.load(B[b, s:s + 1, seg])
                    deltaBu = nl.multiply(deltaU, nl.broadcast_to(B_i, (P, seq_chunk)))
                    h = nl.ndarray((P, seq_chunk), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_tensor_scan(dst=h, data0=deltaA, data1=deltaBu, initial=carry[:, s:s + 1],
                                            op0=nl.multiply, op1=nl.add)
                    nisa.tensor_copy(dst=carry[:, s:s + 1], src=h[:, seq_chunk - 1:seq_chunk])
                    C_i = nl.load(C[b, s:s + 1, seg])
                    hC = nl.multiply(h, nl.broadcast_to(C_i, (P, seq_chunk)))
                    nisa.tensor_tensor(dst=acc[:, seg], data1=acc[:, seg], data2=hC, op=nl.add)
            nl.store(out[b, ch, :], value=acc)
    return out


def reference(delta, u, A, B, C):
    delta, u, A, B, C = (np.asarray(x, np.float64) for x in (delta, u, A, B, C))
    batch, channels, seq_len = delta.shape
    out = np.zeros_like(delta)
    for s in range(A.shape[1]):
        dA = np.exp(delta * A[None, :, s:s + 1])                 # [batch, channels, seq]
        dBu = delta * u * B[:, s:s + 1, :]
        h = np.zeros((batch, channels))
        for t in range(seq_len):
            h = dA[:, :, t] * h + dBu[:, :, t]
            out[:, :, t] += C[:, s, t][:, None] * h
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(4)
    batch, channels, state_size, seq_len = 2, 256, 4, 256
    delta = rng.uniform(0.01, 0.2, (batch, channels, seq_len)).astype(np.float32)
    u = rng.standard_normal((batch, channels, seq_len)).astype(np.float32)
    A = -rng.uniform(0.5, 2.0, (channels, state_size)).astype(np.float32)
    B = rng.standard_normal((batch, state_size, seq_len)).astype(np.float32)
    C = rng.standard_normal((batch, state_size, seq_len)).astype(np.float32)
    want = reference(delta, u, A, B, C)
    check("mamba_v1", mamba_v1(delta, u, A, B, C), want, 1e-4, 1e-4)
    check("mamba_v2", mamba_v2(delta, u, A, B, C), want, 1e-4, 1e-4)
    check("mamba_v3", mamba_v3(delta, u, A, B, C), want, 1e-4, 1e-4)
    check("mamba_v3 seq_chunk=128", nki.simulate(mamba_v3)(delta, u, A, B, C, seq_chunk=128), want, 1e-4, 1e-4)
