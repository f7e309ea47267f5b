"""NKI 0.2 kernels (`import nki` of SDK 2.27/2.28) traced with dialect="0.2":
the nisa signatures 0.3 changed, as 0.2 wrote them (language/nki02_isa.py)."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError
from tests.support.rolling import NO_CACHE, data


def causal_02(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    # 0.2's order: dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value
    nisa.affine_select(o, [[-1, a.shape[1]]], 3, 1, t, -50.0, cmp_op=nl.greater_equal)
    nisa.dma_copy(out, o)
    return out


def rmw_02(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.dma_copy(out, t, dst_rmw_op=np.add)
    return out


def test_affine_select_in_02_order(rng):
    a = data(rng, 64, 48)
    got = nkicc.compile(causal_02, a, dialect="0.2", **NO_CACHE).run(a)
    keep = 3 + np.arange(64)[:, None] - np.arange(48)[None, :] >= 0
    np.testing.assert_array_equal(got, np.where(keep, a, -50.0))
    with pytest.raises(NkiccError):  # the same call is not 0.6's (offset where channel_multiplier goes)
        nkicc.compile(causal_02, a, **NO_CACHE).run(a)


def test_what_03_removed_is_a_coded_error_naming_the_section(rng):
    with pytest.raises(NkiccError) as e:
        nkicc.compile(rmw_02, data(rng, 8, 8), dialect="0.2", **NO_CACHE)
    assert e.value.code == "E161" and "(NKI 0.2)" in e.value.message
    assert "0.2 -> 0.3" in e.value.hint and e.value.loc.line == rmw_02.__code__.co_firstlineno + 4
