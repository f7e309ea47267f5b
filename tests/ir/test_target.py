"""One definition of a target (nkicc.ir.target): every reader gets the same
object, costs come with it, and the cache key holds all of it."""
from __future__ import annotations

import dataclasses

import numpy as np

import nkicc
import nkicc.language as nl
from nkicc import pass_api
from nkicc.api import resolve_target
from nkicc.cached import kernel_key
from nkicc.ir import target as ir_target
from nkicc.ir.ops import require_generation
from nkicc.passes import registry
from nkicc.plugins import targets as plugin_targets
from nkicc.simulator.machine import MachineSimulator


@nkicc.jit
def add_one(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, nl.add(t, 1.0))
    return out


def test_every_reader_gets_the_one_definition():
    reg = registry()
    assert pass_api.Target is ir_target.Target and pass_api.CostTable is ir_target.CostTable
    for t in ir_target.GENERATIONS:
        assert reg.targets[t.name] is t  # the plugin registers the definitions, not copies
        assert resolve_target(f"gen{t.nc_version}", reg) is t
        assert getattr(plugin_targets, t.name.upper()) is t
    assert ir_target.TARGET_OF_GENERATION == {2: "trn1", 3: "trn2", 4: "trn3"}
    try:
        require_generation(2, 4, "this")
    except nkicc.NkiccError as err:
        assert "--target trn3" in err.hint and "(trn1)" in str(err)
    else:
        raise AssertionError("E135 expected")


def test_costs_are_the_targets_own(rng):
    a = rng.standard_normal((128, 256)).astype(np.float32)
    c = nkicc.compile(add_one, a, cache=False)
    for t in ir_target.GENERATIONS:
        assert MachineSimulator(c.ir, t).costs is t.costs
    assert len({t.costs for t in ir_target.GENERATIONS}) == 3  # bandwidths differ per generation
    # a target that names no table (a third-party one: tests/tiny_target_plugin.py) gets the generic one
    bare = pass_api.Target("bare", sbuf_partition_bytes=64 * 1024)
    assert bare.costs == ir_target.CostTable()
    slow = dataclasses.replace(ir_target.TRN2, costs=dataclasses.replace(ir_target.TRN2.costs,
                                                                         dma_fixed_ns=10 * ir_target.TRN2.costs.dma_fixed_ns))
    fast_ns = MachineSimulator(c.ir, ir_target.TRN2).run({"a": a})[1].total_ns
    slow_ns = MachineSimulator(c.ir, slow).run({"a": a})[1].total_ns
    assert slow_ns >= fast_ns + 2 * 9 * ir_target.TRN2.costs.dma_fixed_ns  # a load and a store on the path


def test_the_cache_key_holds_the_cost_table(rng):
    a = rng.standard_normal((128, 256)).astype(np.float32)
    traced = nkicc.compile(add_one, a, cache=False).traced_ir
    trn2 = ir_target.TRN2
    key = kernel_key(traced, target=trn2)
    assert key is not None
    assert kernel_key(traced, target=dataclasses.replace(trn2)) == key  # equal content, equal key
    other = dataclasses.replace(trn2, costs=dataclasses.replace(trn2.costs, hbm_bytes_per_ns=1.0))
    assert kernel_key(traced, target=other) != key  # costs decide multi-buffering: part of the key
