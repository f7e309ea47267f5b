"""The DMA fabric (simulator/fabric.py): transfers reserved in program order
fill the idle time from their start on, earlier ones keeping priority. The
oracle is a slot-by-slot greedy fill on integer times, which a fluid fill
must reproduce exactly."""
import numpy as np
import pytest

from nkicc.simulator.fabric import Fabric


def _slot_oracle(requests, horizon):
    busy = np.zeros(horizon, dtype=bool)
    finishes = []
    for start, dur in requests:
        t, left = start, dur
        while left:
            if not busy[t]:
                busy[t] = True
                left -= 1
            t += 1
        finishes.append(t if dur else start)
    return finishes


@pytest.mark.parametrize("seed", range(5))
def test_fill_matches_slot_oracle(seed):
    rng = np.random.default_rng(seed)
    n = 600  # more than the compaction threshold, with a floor that lets it drop old intervals
    starts = np.sort(rng.integers(0, 4000, n)) - rng.integers(0, 40, n)  # mostly increasing, some late-issued early
    starts = np.maximum(starts, 0)
    durs = rng.integers(0, 30, n)
    requests = list(zip(starts.tolist(), durs.tolist()))
    want = _slot_oracle(requests, 4000 + 30 * n + 100)
    fab = Fabric()
    got = []
    for i, (s, d) in enumerate(requests):
        # no later request starts before this: the same promise the simulator's floor gives
        floor = min(x for x, _ in requests[i:]) if i < n else 0
        got.append(fab.reserve(float(s), float(d), lambda f=floor: float(f)))
    assert got == pytest.approx(want)


def test_a_late_start_leaves_the_gap_before_it_usable():
    fab = Fabric()
    far = lambda: 0.0  # noqa: E731
    assert fab.reserve(100.0, 10.0, far) == 110.0
    # issued later, starts earlier: uses 0..10 instead of queueing behind the first
    assert fab.reserve(0.0, 10.0, far) == 10.0
    # spans the busy interval: 90 ns before it, the rest after it
    assert fab.reserve(10.0, 100.0, far) == 120.0


def test_memory_stays_bounded_when_the_floor_is_stuck():
    fab = Fabric()
    stuck = lambda: 0.0  # noqa: E731  (a queue idle since the start)
    for i in range(20000):  # gaps between all of them: nothing merges
        assert fab.reserve(10.0 * i, 5.0, stuck) == 10.0 * i + 5.0
    assert len(fab._busy) <= 2048
    # an early gap given up to bound memory is busy now: a late-issued early transfer waits
    assert fab.reserve(1.0, 1.0, stuck) > 1000.0
