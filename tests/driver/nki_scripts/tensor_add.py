"""Tiled tensor addition, as the NKI getting-started tutorial writes it: one
kernel that loops over 128 x 512 tiles (with a ragged last column tile), and
the SPMD form where each program of a 2-D launch grid adds one tile.

    nkicc run tests/driver/nki_scripts/tensor_add.py --rows 512 --cols 1100 --dtype float16
"""
import argparse

import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from _check import check

TILE_P = nl.tile_size.pmax   # 128
TILE_F = 512


@nki.jit
def tensor_add(a_input, b_input):
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    rows, cols = a_input.shape
    for i in nl.affine_range(rows // TILE_P):
        for j in nl.affine_range((cols + TILE_F - 1) // TILE_F):
            # the last column tile is narrower: min() splits the loop, each piece traced once
            width = min(TILE_F, cols - j * TILE_F)
            a = nl.ndarray((TILE_P, TILE_F), dtype=a_input.dtype, buffer=nl.sbuf)
            b = nl.ndarray((TILE_P, TILE_F), dtype=b_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a[:, 0:width], src=a_input[i * TILE_P:(i + 1) * TILE_P, nl.ds(j * TILE_F, width)])
            nisa.dma_copy(dst=b[:, 0:width], src=b_input[i * TILE_P:(i + 1) * TILE_P, nl.ds(j * TILE_F, width)])
            c = nl.ndarray((TILE_P, TILE_F), dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c[:, 0:width], data1=a[:, 0:width], data2=b[:, 0:width], op=nl.add)
            nisa.dma_copy(dst=out[i * TILE_P:(i + 1) * TILE_P, nl.ds(j * TILE_F, width)], src=c[:, 0:width])
    return out


@nki.jit
def tensor_add_spmd(a_input, b_input):
    """One tile per program: launch as tensor_add_spmd[rows // 128, cols // 512](a, b)."""
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    assert nl.num_programs() == nl.num_programs(0) * nl.num_programs(1) and nl.program_ndim() == 2
    rows = nl.ds(i * TILE_P, TILE_P)
    cols = nl.ds(j * TILE_F, TILE_F)
    a = nl.load(a_input[rows, cols])
    b = nl.load(b_input[rows, cols])
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)
    nl.store(out[rows, cols], value=c)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--cols", type=int, default=1100)
    p.add_argument("--dtype", action="append", choices=["float32", "bfloat16", "float16"])
    args = p.parse_args()
    for name in args.dtype or ["float32", "bfloat16"]:
        run(args.rows, args.cols, name)


def run(rows, cols, dtype_name):
    dtype = np.dtype(getattr(nl, dtype_name))
    tol = 1e-6 if dtype_name == "float32" else 1e-2
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, cols)).astype(dtype)
    b = rng.standard_normal((rows, cols)).astype(dtype)
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)

    got = tensor_add(a, b)
    assert got.dtype == dtype
    check(f"tensor_add {dtype_name}", got, want, tol, tol)
    check(f"tensor_add simulate {dtype_name}", nki.simulate(tensor_add)(a, b), want, tol, tol)

    cols = cols // TILE_F * TILE_F
    a2, b2 = np.ascontiguousarray(a[:, :cols]), np.ascontiguousarray(b[:, :cols])
    grid = (rows // TILE_P, cols // TILE_F)
    check(f"tensor_add_spmd {dtype_name}", tensor_add_spmd[grid](a2, b2), want[:, :cols], tol, tol)
    check(f"tensor_add_spmd simulate {dtype_name}", nki.simulate(tensor_add_spmd[grid])(a2, b2),
          want[:, :cols], tol, tol)


if __name__ == "__main__":
    main()
