"""Kernels for tests/cache/test_cache.py and bench/cache.py: small enough to
simulate in milliseconds, shaped like real kernels (several loop nests, one
per stage), so that editing one loop body leaves most regions untouched.

`stages` writes eight column blocks of `out`, each from its own loop nest;
`reference_stages` is the same in numpy. `scaled` bakes a global and a
closure constant into its IR. `matmul_acc` accumulates through PSUM.
"""
import numpy as np

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

ROWS, COLS = 256, 32   # x is [ROWS, COLS]; out is [ROWS, 8 * COLS]
P, W = 128, 16         # row tile, column sub-tile


@nkicc.jit
def stages(x: "float32[256,32]"):
    out = nl.ndarray((ROWS, 8 * COLS), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
    for i in nl.affine_range(ROWS // P):  # stage 0: shift
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 0 * COLS + j * W:0 * COLS + (j + 1) * W], value=nl.add(t, 1.0))
    for i in nl.affine_range(ROWS // P):  # stage 1: scale
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 1 * COLS + j * W:1 * COLS + (j + 1) * W], value=nl.multiply(t, 3.0))
    for i in nl.affine_range(ROWS // P):  # stage 2: relu
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 2 * COLS + j * W:2 * COLS + (j + 1) * W], value=nl.relu(t))
    for i in nl.affine_range(ROWS // P):  # stage 3: square
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 3 * COLS + j * W:3 * COLS + (j + 1) * W], value=nl.multiply(t, t))
    for i in nl.affine_range(ROWS // P):  # stage 4: tanh
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 4 * COLS + j * W:4 * COLS + (j + 1) * W], value=nl.tanh(t))
    for i in nl.affine_range(ROWS // P):  # stage 5: negate
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 5 * COLS + j * W:5 * COLS + (j + 1) * W], value=nl.negative(t))
    for i in nl.affine_range(ROWS // P):  # stage 6: sigmoid
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 6 * COLS + j * W:6 * COLS + (j + 1) * W], value=nl.sigmoid(t))
    for i in nl.affine_range(ROWS // P):  # stage 7: exp
        for j in nl.affine_range(COLS // W):
            t = nl.load(x[i * P:(i + 1) * P, j * W:(j + 1) * W])
            nl.store(out[i * P:(i + 1) * P, 7 * COLS + j * W:7 * COLS + (j + 1) * W], value=nl.exp(t))
    return out


STAGE_FUNCTIONS = [
    lambda t: t + 1.0,
    lambda t: t * 3.0,
    lambda t: np.maximum(t, 0.0),
    lambda t: t * t,
    np.tanh,
    lambda t: -t,
    lambda t: 1.0 / (1.0 + np.exp(-t)),
    np.exp,
]


def reference_stages(x: np.ndarray, functions=STAGE_FUNCTIONS) -> np.ndarray:
    x = x.astype(np.float64)
    return np.concatenate([f(x) for f in functions], axis=1)


# the line of stage 1's body, and an edit of it (scale by 5 instead of 3)
STAGE1_LINE = "value=nl.multiply(t, " + "3.0))"  # split so that the source has it once
STAGE1_EDIT = "value=nl.multiply(t, " + "5.0))"


SCALE = 2.0


def make_scaled(offset):
    @nkicc.jit
    def scaled(x: "float32[128,64]"):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
        for j in nl.affine_range(4):
            t = nl.load(x[:, j * 16:(j + 1) * 16])
            nl.store(out[:, j * 16:(j + 1) * 16], value=nl.add(nl.multiply(t, SCALE), offset))
        return out
    return scaled


@nkicc.jit
def shift(x: "float32[128,64]", amount=1.0):
    """`amount` is a compile-time constant (not an array): it is traced into the IR."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
    for j in nl.affine_range(4):
        t = nl.load(x[:, j * 16:(j + 1) * 16])
        nl.store(out[:, j * 16:(j + 1) * 16], value=nl.add(t, amount))
    return out


@nkicc.jit
def matmul_acc(a_t: "float32[256,128]", b: "float32[256,64]"):
    """out = a_t.T @ b, accumulated over k tiles through PSUM."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(2):
        at = nl.load(a_t[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        ps = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(ps, acc)
        nisa.nc_matmul(ps, at, bt)
        nisa.tensor_copy(acc, ps)
    nl.store(out, acc)
    return out
