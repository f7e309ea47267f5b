"""ir/loopdeps.py's overlap test for two copies of one nested grid of runs (the usual tile
access, decided from its steps) against enumerating every run, on random grids."""
import numpy as np

import nkicc.ir.loopdeps as ld


def test_grid_overlap_equals_enumeration():
    rng = np.random.default_rng(7)
    decided = 0
    for _ in range(1500):
        length = int(rng.choice([1, 1, 2, 3, 4]))
        step, levels = length + int(rng.integers(0, 4)), []
        for _ in range(int(rng.integers(1, 4))):
            num = int(rng.integers(2, 6))
            levels.append((step, num))
            # mostly nested (each step past the span below it), sometimes not (then no grid)
            step = step * num + int(rng.integers(0, 6)) if rng.random() < 0.8 else step + int(rng.integers(1, 5))
        pairs = [(1, length)] + levels if length > 1 else levels
        w, x = (ld._runs(int(rng.integers(-50, 51)), pairs) for _ in range(2))
        for t in range(-60, 61, 7):
            enumerated = ld._hits(ld._Runs(w.starts, w.length), ld._Runs(x.starts, x.length), t)
            assert ld._hits(w, x, t) == enumerated, (w.grid, x.grid, t)
            decided += w.grid is not None
    assert decided > 10_000  # the grid path ran, not only the enumeration
