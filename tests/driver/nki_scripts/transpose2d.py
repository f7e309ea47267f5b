"""2-D transpose of flattened rows, after the NKI tutorial: each partition
holds a row of sz_f1 * sz_f2 elements, read as an [sz_f1, sz_f2] matrix and
written back transposed. One element per instruction with nl.ds (the loops
stay rolled: one tensor_copy compiled for all sz_f1 * sz_f2 copies), then a
wider form that moves a whole strided column per instruction through `.ap`.

    nkicc run tests/driver/nki_scripts/transpose2d.py
"""
import sys

import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from _check import check


@nki.jit
def transpose2d(in_tensor, shape2D):
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, _ = in_tensor.shape
    sz_f1, sz_f2 = shape2D
    in_tile = nl.load(in_tensor)
    out_tile = nl.ndarray((sz_p, sz_f2 * sz_f1), dtype=in_tensor.dtype, buffer=nl.sbuf)
    for i_f1 in nl.affine_range(sz_f1):
        for i_f2 in nl.affine_range(sz_f2):
            nisa.tensor_copy(dst=out_tile[:, nl.ds(i_f2 * sz_f1 + i_f1, 1)],
                             src=in_tile[:, nl.ds(i_f1 * sz_f2 + i_f2, 1)])
    nl.store(out_tensor, value=out_tile)
    return out_tensor


@nki.jit
def transpose2d_columns(in_tensor, shape2D):
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, row = in_tensor.shape
    sz_f1, sz_f2 = shape2D
    in_tile = nl.load(in_tensor)
    out_tile = nl.ndarray((sz_p, row), dtype=in_tensor.dtype, buffer=nl.sbuf)
    for i_f1 in nl.affine_range(sz_f1):
        # row i_f1 of the [f1, f2] matrix becomes column i_f1 of the [f2, f1] one: stride sz_f1
        column = out_tile.ap([[row, sz_p], [sz_f1, sz_f2]], offset=i_f1)
        nisa.tensor_copy(dst=column, src=in_tile[:, nl.ds(i_f1 * sz_f2, sz_f2)])
    nl.store(out_tensor, value=out_tile)
    return out_tensor


def reference(x, f1, f2):
    return x.reshape(x.shape[0], f1, f2).transpose(0, 2, 1).reshape(x.shape[0], -1)


if __name__ == "__main__":
    rng = np.random.default_rng(1)
    for sz_p, f1, f2, dtype in ((128, 8, 12, np.float32), (1, 5, 7, np.float32), (64, 3, 33, nl.bfloat16),
                                (128, 16, 4, np.int32)):
        x = rng.standard_normal((sz_p, f1 * f2)) * 100
        x = x.astype(dtype)
        want = reference(x, f1, f2)
        check(f"transpose2d {sz_p}x({f1}x{f2}) {np.dtype(dtype).name}", transpose2d(x, (f1, f2)), want, 0, 0)
        check(f"transpose2d_columns {sz_p}x({f1}x{f2})", transpose2d_columns(x, shape2D=(f1, f2)), want, 0, 0)
    if hasattr(transpose2d, "compile"):  # a compiler that reports its code: the element loops stay rolled
        rolled = transpose2d.compile(x, (16, 4)).report["instructions_rolled"]
        if rolled > 3:  # load, one tensor_copy, store
            print(f"the element loops did not stay rolled: {rolled} instructions")
            sys.exit(1)
