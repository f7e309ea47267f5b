"""Run a kernel through both simulators: the machine model (the default) and
the reference interpreter must agree bit for bit."""
from __future__ import annotations

import numpy as np

import nkicc


def run_both_simulators(kernel, *arrays, unroll: bool = False):
    """Outputs of the machine simulator, checked equal to the reference simulator's."""
    ck = nkicc.compile(kernel, *arrays, unroll=unroll)
    machine = ck.run(*arrays)
    ref = ck.simulate(dict(zip(ck.ir.args, arrays)), simulator="reference")[0]
    got = machine if isinstance(machine, tuple) else (machine,)
    for m, name in zip(got, ck.ir.outputs):
        r = np.asarray(ref[name])
        assert m.dtype == r.dtype
        np.testing.assert_array_equal(m.view(np.uint8), r.view(np.uint8))  # bits, NaN included
    return machine
