"""2-D average pooling, after the NKI tutorial: the [C, H, W] input is viewed
as [C, H/p, W/p, p, p] windows through a five-pair access pattern, summed
over the last two axes with nl.sum, and scaled with tensor_scalar. Channels
tile by 128 (the last tile may be ragged). A second kernel reads the windows
straight out of HBM with a five-pair `.ap` on the DRAM tensor.

    nkicc run tests/driver/nki_scripts/avgpool.py
"""
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from _check import check


@nki.jit
def avgpool(in_tensor, pool_size):
    C, H, W = in_tensor.shape
    p = pool_size
    out = nl.ndarray((C, H // p, W // p), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for c in nl.affine_range((C + P - 1) // P):
        n = min(P, C - c * P)                       # ragged last channel tile
        t = nl.ndarray((P, H, W), dtype=in_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:n], src=in_tensor[nl.ds(c * P, n)])
        windows = t.ap([[H * W, n], [p * W, H // p], [p, W // p], [W, p], [1, p]])
        s = nl.sum(windows, axis=[3, 4])            # [n, H/p, W/p]
        avg = nl.ndarray((P, H // p, W // p), dtype=in_tensor.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=avg[0:n], data=s, op0=nl.multiply, operand0=1.0 / (p * p))
        nisa.dma_copy(dst=out[nl.ds(c * P, n)], src=avg[0:n])
    return out


@nki.jit
def avgpool_hbm_windows(in_tensor, pool_size=2):
    C, H, W = in_tensor.shape
    p = pool_size
    out = nl.ndarray((C, H // p, W // p), dtype=nl.float32, buffer=nl.shared_hbm)
    windows = nl.ndarray((C, H // p, W // p, p, p), dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=windows, src=in_tensor.ap([[H * W, C], [p * W, H // p], [p, W // p], [W, p], [1, p]]))
    s = nl.ndarray((C, H // p, W // p), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=windows, axis=(3, 4))
    nisa.tensor_scalar(dst=s, data=s, op0=nl.divide, operand0=float(p * p))
    nl.store(out, value=s)
    return out


def reference(x, p):
    C, H, W = x.shape
    return x.astype(np.float64).reshape(C, H // p, p, W // p, p).mean(axis=(2, 4))


if __name__ == "__main__":
    rng = np.random.default_rng(2)
    for C, H, W, p, dtype, tol in ((200, 8, 12, 2, np.float32, 1e-5), (1, 6, 6, 3, np.float32, 1e-5),
                                   (128, 4, 8, 4, nl.bfloat16, 2e-2)):
        x = rng.standard_normal((C, H, W)).astype(dtype)
        check(f"avgpool C={C} {H}x{W} pool {p}", avgpool(x, p), reference(x, p), tol, tol)
    x = rng.standard_normal((96, 8, 8)).astype(np.float32)
    check("avgpool_hbm_windows", avgpool_hbm_windows(x), reference(x, 2))
