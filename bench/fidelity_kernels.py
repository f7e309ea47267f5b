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
