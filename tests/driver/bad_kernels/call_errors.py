"""Wrong arguments when a kernel is called from Python (E002): the report
names the caller's line."""
import numpy as np

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=nl.add)
    nl.store(out, value=t)
    return out


def tile():
    return np.ones((128, 64), dtype=np.float32)


def call_with_one_argument():
    return add(tile())  # EXPECT: E002 api


def call_with_three_arguments():
    return add(tile(), tile(), tile())  # EXPECT: E002 api


def call_with_an_unknown_keyword():
    return add(tile(), tile(), scale=2.0)  # EXPECT: E002 api


def call_compiled_with_another_shape():
    compiled = nkicc.compile(add, "float32[128,64]", "float32[128,64]")
    return compiled.run(tile(), np.ones((128, 32), dtype=np.float32))  # EXPECT: E002 api


def call_compiled_without_an_array():
    compiled = nkicc.compile(add, "float32[128,64]", "float32[128,64]")
    return compiled.run(tile())  # EXPECT: E002 api
