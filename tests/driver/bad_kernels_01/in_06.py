"""0.1 forms in a kernel of NKI 0.6 (`import nki`, nkicc's nl), and a dialect option
that contradicts the import path."""
import numpy as np

import nkicc
import nkicc.language as nl
import neuronxcc.nki as nki01
import neuronxcc.nki.language as nl01


@nkicc.jit
def item_assignment(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype)
    t[...] = nl.load(a)  # EXPECT: E160
    nl.store(out, value=t)
    return out


@nkicc.jit
def arange_in_06(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]  # EXPECT: E160
    nl.store(out, value=nl.load(a[ix, 0]))
    return out


@nki01.jit
def copy01(a):
    out = nl01.ndarray(a.shape, dtype=a.dtype, buffer=nl01.shared_hbm)
    nl01.store(out, value=nl01.load(a))
    return out


def call_dialect_contradicts_the_import():
    a = np.zeros((8, 8), np.float32)
    nkicc.compile(copy01, a, dialect="0.3")  # EXPECT: E201 api
