"""PSUM placement: short-lived accumulators take turns over the banks (plugins/alloc.py
`_place`, rotate). First-fit gives each accumulator the bank the one before it just left, and
the next matmul group then waits for the Vector Engine to read the previous one out: a write
after read on the bank that the kernel never asked for (kernel-optimization step 4, docs/fidelity.md)."""
import numpy as np
import pytest

import nkicc
from nkicc.plugins import alloc
from tests.plugins import alloc_fit_kernels as kernels

BANK = 2048


def _compile(lhsT, rhs):
    return nkicc.compile(kernels.psum_groups, lhsT, rhs, passes={"target": "trn2"}, cache=False)


@pytest.fixture
def operands(rng):
    return rng.standard_normal((512, 512)).astype(np.float32), rng.standard_normal((512, 2048)).astype(np.float32)


def test_accumulators_take_turns_over_the_banks(operands):
    lhsT, rhs = operands
    c = _compile(lhsT, rhs)
    accs = [t for t in c.ir.tensors if t.buffer == "psum"]
    assert len(accs) == 16  # one per (m, n) tile: the tile loops are traced
    banks = [t.address // BANK for t in accs]
    assert banks == [i % 8 for i in range(16)]
    np.testing.assert_allclose(c.run(lhsT, rhs), lhsT.T.astype(np.float64) @ rhs + 1, rtol=1e-4, atol=1e-3)


def test_taking_turns_is_faster_than_first_fit_and_changes_no_result(operands, monkeypatch):
    lhsT, rhs = operands
    turns = _compile(lhsT, rhs)
    got = turns.run(lhsT, rhs)
    first_fit = alloc._place
    monkeypatch.setattr(alloc, "_place", lambda items, capacity, bank, rotate=False:
                        first_fit(items, capacity, bank, False))
    one_bank = _compile(lhsT, rhs)
    assert {t.address for t in one_bank.ir.tensors if t.buffer == "psum"} == {0}
    np.testing.assert_array_equal(one_bank.run(lhsT, rhs), got)
    fast, slow = turns.report["sim"], one_bank.report["sim"]
    assert fast["total_ns"] < 0.9 * slow["total_ns"]
    assert fast["engines"]["pe"]["active_pct"] > slow["engines"]["pe"]["active_pct"] + 5


def test_where_turns_do_not_fit_first_fit_places():
    """a (short) then b (long) then c (7 banks, while b lives): taking turns puts b in bank 1, and
    no 7 banks in a row are then free; first-fit puts b in bank 0, where a was."""
    items = [("a", BANK, 0, 1), ("b", BANK, 2, 10), ("c", 7 * BANK, 3, 5)]
    addresses, failed, _ = alloc._place_from(items, 8 * BANK, BANK, True)
    assert failed == "c" and addresses["b"] == BANK
    addresses, failed, _ = alloc._place(items, 8 * BANK, BANK, rotate=True)
    assert failed is None and addresses == {"a": 0, "b": 0, "c": BANK}
    # a kernel's first tiles are where first-fit puts them; turns start after
    addresses, _, peak = alloc._place([("x", 512, 0, 1), ("y", 512, 2, 3)], 8 * BANK, BANK, rotate=True)
    assert addresses == {"x": 0, "y": BANK} and peak == 512
