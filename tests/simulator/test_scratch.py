"""The batched path's array pool (simulator/scratch.py): what it hands out is never handed out
twice at once, and it keeps no more than its cap."""
import numpy as np

from nkicc.simulator.scratch import Scratch


def test_an_array_given_back_twice_is_handed_out_once():
    s = Scratch()
    a = s.take((4, 8), np.float32)
    s.give(a)
    s.give(a.T)  # a view of the same buffer: the same buffer
    b, c = s.take((8, 4), np.float32), s.take((32,), np.float32)
    assert np.may_share_memory(a, b) and not np.may_share_memory(b, c)


def test_fill_and_reuse_by_byte_size():
    s = Scratch()
    a = s.take((16,), np.float64, 7.0)
    assert (a == 7.0).all()
    s.give(a)
    b = s.take((4, 8), np.float32, 0)  # 128 bytes again, another dtype and shape
    assert np.may_share_memory(a, b) and b.dtype == np.float32 and (b == 0).all()


def test_no_more_than_the_cap_is_kept():
    s = Scratch(cap=1000)
    arrays = [s.take((100,), np.float32) for _ in range(3)]  # 400 bytes each
    for x in arrays:
        s.give(x)
    assert s.kept == 800
    assert not np.may_share_memory(s.take((100,), np.float32), arrays[2])  # the third went back
