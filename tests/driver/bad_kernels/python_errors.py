"""The kernel's own Python fails while nkicc traces it (E001): the report names
the exception and the user's own innermost line, never nkicc's."""
import numpy as np

import nkicc
import nkicc.language as nl

TILES = {"rows": 128}


@nkicc.jit
def missing_dict_key(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    cols = TILES["cols"]  # EXPECT: E001
    nl.store(out[:, 0:cols], value=nl.load(a[:, 0:cols]))
    return out


@nkicc.jit
def misspelt_name(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.load(a)
    nl.store(out, value=tiel)  # EXPECT: E001  # noqa: F821
    return out


def tile_rows(shape):
    if shape[0] % 128:
        raise ValueError(f"{shape[0]} rows do not tile by 128")  # EXPECT: E001 kernel=helper_rejects_shape
    return shape[0] // 128


@nkicc.jit
def helper_rejects_shape(a: "float32[200,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(tile_rows(a.shape)):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(a[i * 128:(i + 1) * 128, :]))
    return out


@nkicc.jit
def numpy_raises_inside(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scale = np.linalg.inv(np.zeros((2, 2)))  # EXPECT: E001
    nl.store(out, value=nl.multiply(nl.load(a), float(scale[0, 0])))
    return out


@nkicc.jit
def assertion_in_kernel(a: "float32[96,64]"):
    assert a.shape[0] % 128 == 0, "rows must tile by 128"  # EXPECT: E003
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    return out


@nkicc.jit
def raises_in_one_iteration(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        if i == 3:
            raise RuntimeError("the last tile is not handled")  # EXPECT: E001
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(a[i * 128:(i + 1) * 128, :]))
    return out


def depth(n):
    return depth(n + 1)  # EXPECT: E001 kernel=runaway_recursion


@nkicc.jit
def runaway_recursion(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(a), depth(0)))
    return out
