"""multi-buffer with k buffers per loop: k from the cost table (enough copies
that the compute of k - 1 iterations hides a load's latency), every copy in
disjoint bytes, fewer copies where k do not fit, remainder iterations after
the loop; results identical to the unoptimised pipeline on random data."""
import sys

import numpy as np
import pytest

import nkicc
import nkicc.plugins.multi_buffer as mb
from nkicc.ir import Loop
from nkicc.plugins.alloc import partition_bytes
from tests.support.paths import EXAMPLES
from tests.plugins.test_multi_buffer import exp_row_tiles

sys.path.insert(0, str(EXAMPLES))
import matmul as mm  # noqa: E402

TRN2 = {"target": "trn2"}


def compile3(kernel, *args):
    """(optimised, multi-buffer off, opt_level 0) compilations on trn2."""
    return (nkicc.compile(kernel, *args, passes=TRN2, cache=False),
            nkicc.compile(kernel, *args, passes={**TRN2, "disable": ["multi-buffer"]}, cache=False),
            nkicc.compile(kernel, *args, passes={**TRN2, "opt_level": 0}, cache=False))


def small_ints(rng, shape):
    """Random integers as fp32: every partial sum of a K loop is exact, so the
    result does not depend on the order the simulator's batched execution
    sums in (it reorders fp32 accumulations), and any iteration the copies
    lose or repeat shows as a different result."""
    return rng.integers(-8, 9, size=shape).astype(np.float32)


def copies_of(c, tensor: str) -> list[str]:
    return sorted(t.name for t in c.ir.tensors if t.name.startswith(tensor + ".mb"))


def assert_disjoint(c, names):
    """Tiles that are live together must not share bytes."""
    decls = c.ir.tensor_map()
    spans = sorted((decls[n].address, decls[n].address + partition_bytes(decls[n]), n) for n in names)
    for (_, hi, a), (lo, _, b) in zip(spans, spans[1:]):
        assert hi <= lo, (a, b)


def test_fp32_tiled_matmul_gets_four_buffers_from_the_cost_table(rng):
    """By hand from the documented trn2 constants: a K step's matmul is 512
    moving columns x 4 cycles (fp32) at 2.4 GHz = 853 ns, plus the 100 + 60
    cycle overhead, 920 ns: C. Its loads: 1300 ns fixed latency, then lhsT's
    128 x 128 fp32 tile in 512-byte rows (512 / (512 + 512) = 50% of the
    375 bytes/ns HBM share: 350 ns) and rhs's 128 x 512 tile in 2 KiB rows
    (80%: 874 ns): L = 2524 ns. k = 1 + ceil(L / C) = 1 + 3 = 4."""
    k, m, n = 1024, 128, 512   # one M and N tile: K's trip 8 is the only long loop
    a, b = small_ints(rng, (k, m)), small_ints(rng, (k, n))
    multi, single, base = compile3(mm.matmul_tiled, a, b)
    assert multi.report["notes"]["multi-buffer"]["multi_buffered"].startswith("matmul.py:46 x4")
    for tile in {t.name.split(".mb")[0] for t in multi.ir.tensors if ".mb" in t.name}:
        names = [tile] + copies_of(multi, tile)
        assert len(names) == 4, names                 # k copies: mb1, mb2, mb3
        assert_disjoint(multi, names)
    assert not multi.report["notes"]["alloc"].get("spills")
    got, want = multi.run(a, b), base.run(a, b)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(single.run(a, b), want)
    np.testing.assert_array_equal(got, a.astype(np.float64).T @ b.astype(np.float64))
    # four buffers hide more of the load latency than two (the pass's earlier behaviour)
    assert multi.report["sim"]["total_ns"] < single.report["sim"]["total_ns"]


@pytest.mark.parametrize("k,trip", [(3, 7), (3, 8), (3, 9), (4, 6), (4, 5)],
                         ids=["r1", "r2", "r0", "one-round-r2", "one-round-r1"])
def test_remainder_iterations_follow_the_loop(rng, monkeypatch, k, trip):
    """k copies per round, trip // k rounds (a single round is bound, no loop
    left), trip % k copies after it, each with tiles of its own."""
    monkeypatch.setattr(mb, "buffers_wanted", lambda loop, decls, target: min(k, loop.trip))
    a, b = small_ints(rng, (trip * 128, 128)), small_ints(rng, (trip * 128, 512))
    multi, _, base = compile3(mm.matmul_tiled, a, b)
    assert f"matmul.py:46 x{k}" in multi.report["notes"]["multi-buffer"]["multi_buffered"]
    copies = {t.name.split(".mb")[1] for t in multi.ir.tensors if ".mb" in t.name}
    assert copies == {str(j) for j in range(1, k + trip % k)}, copies  # mb1..mb{k-1}, then one per remainder
    loops = [s for s in multi.ir.body.walk() if isinstance(s, Loop) and s.loc and s.loc.line == 46]
    if trip // k > 1:
        assert [s.trip for s in loops] == [trip // k]
    else:
        assert not loops
    got = multi.run(a, b)
    np.testing.assert_array_equal(got, base.run(a, b))
    np.testing.assert_array_equal(got, a.astype(np.float64).T @ b.astype(np.float64))


def test_fewer_buffers_where_k_do_not_fit(rng, monkeypatch):
    """48 KB tiles: the cost table wants 3 buffers (a load of 6 MB against an
    activation of 12000 elements), but three pairs (288 KB per partition) do
    not fit trn2's 224 KiB; two do."""
    wanted = []
    rule = mb.buffers_wanted
    monkeypatch.setattr(mb, "buffers_wanted", lambda *a: wanted.append(rule(*a)) or wanted[-1])
    a = rng.standard_normal((768, 12000)).astype(np.float32) * 0.1
    c = nkicc.compile(exp_row_tiles, a, passes=TRN2, cache=False)
    assert wanted and wanted[0] >= 3, wanted
    tags = {t.name.split(".mb")[1] for t in c.ir.tensors if ".mb" in t.name}
    assert tags == {"1"}, tags                       # two buffers, no remainder (trip 6)
    assert c.report["notes"]["multi-buffer"]["multi_buffered"].endswith("x2")
    assert not c.report["notes"]["alloc"].get("spills")
    assert_disjoint(c, ["t", "t.mb1", "u", "u.mb1"])
    np.testing.assert_allclose(c.run(a), np.exp(a), rtol=1e-5)
