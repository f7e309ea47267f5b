"""Registers and loops whose trip count only the device knows (NKI 0.6:
nisa.register_*, nl.fori_loop, nl.while_loop, nl.dynamic_range over
registers): traced once, run by both simulators, checked against numpy."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import check_error

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.register_alloc",
    "nisa.register_move",
    "nisa.register_load",
    "nisa.register_store",
    "nl.fori_loop",
    "nl.while_loop")


def load_register(src):
    """A register holding the int32 of src, an HBM [1, 1] tensor (a helper the kernels call)."""
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    r = nisa.register_alloc()
    nisa.register_load(r, t)
    return r


@nkicc.jit
def prefix_copy(data, ub):
    """out[0, :n] = data[0, :n] for n read from an input at run time."""
    out = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ub_reg = load_register(ub)
    zeros = nl.zeros((1, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=zeros)
    temp = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=temp, src=data.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
        nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=temp)

    nl.fori_loop(0, ub_reg, body)
    return out


@pytest.mark.parametrize("n", [0, 1, 5, 64])
def test_fori_loop_with_a_runtime_bound(rng, n):
    d = rng.standard_normal((1, 64)).astype(np.float32)
    ub = np.array([[n]], np.int32)
    want = np.zeros((1, 64), np.float32)
    want[0, :n] = d[0, :n]
    ck = nkicc.compile(prefix_copy, d, ub)
    np.testing.assert_array_equal(ck.run(d, ub), want)
    reference, _ = ck.simulate({"data": d, "ub": ub}, simulator="reference")
    np.testing.assert_array_equal(reference[ck.ir.outputs[0]], want)


def test_one_compile_serves_every_trip_count(rng):
    d = rng.standard_normal((1, 64)).astype(np.float32)
    a = nkicc.compile(prefix_copy, d, np.array([[3]], np.int32))
    b = nkicc.compile(prefix_copy, d, np.array([[60]], np.int32))
    assert a.print_ir() == b.print_ir()  # the bound is data, not a constant of the compile
    assert a.report["instructions_rolled"] < 20


@nkicc.jit
def strided_sum(x, lo, hi):
    """acc = sum of rows lo, lo + 2, ... < hi of x, with both bounds at run time."""
    out = nl.ndarray((1, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((1, 32), dtype=nl.float32, buffer=nl.sbuf)
    regs = [load_register(b) for b in (lo, hi)]
    row = nl.ndarray((1, 32), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=x.ap([[32, 1], [1, 32]], scalar_offset=i, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

    nl.fori_loop(regs[0], regs[1], body, step=2)
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("lo,hi", [(0, 10), (3, 4), (5, 5), (7, 2), (1, 16)])
def test_fori_loop_register_bounds_and_step(rng, lo, hi):
    x = rng.standard_normal((16, 32)).astype(np.float32)
    got = strided_sum(x, np.array([[lo]], np.int32), np.array([[hi]], np.int32))
    want = x[lo:hi:2].sum(0, keepdims=True) if hi > lo else np.zeros((1, 32), np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@nkicc.jit
def countdown(val, count):
    """The reference's while_loop example: acc = val added `count` times."""
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    v = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=val)
    acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    count_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count_sb, src=count)
    one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1)
    reg = nisa.register_alloc()
    nisa.register_load(reg, count_sb)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=v, op=nl.add)
        nisa.tensor_tensor(dst=count_sb, data1=count_sb, data2=one, op=nl.subtract)
        nisa.register_load(r, count_sb)
        return r

    nl.while_loop(reg, body)
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 9])
def test_while_loop_checks_before_each_iteration(rng, n):
    val = rng.standard_normal((1, 1)).astype(np.float32)
    got = countdown(val, np.array([[n]], np.int32))
    np.testing.assert_allclose(got, val * n, rtol=1e-5)


def test_registers_move_store_and_deprecated_dynamic_range(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)

    @nkicc.jit
    def k(x):
        out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        n = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        r = nisa.register_alloc(6)
        r2 = nisa.register_alloc()
        nisa.register_move(r2, r)
        nisa.register_store(n, r2)
        zeros = nl.zeros((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=zeros)
        row = nl.ndarray((1, 16), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.dynamic_range(2, r2):
            nisa.dma_copy(dst=row, src=x.ap([[16, 1], [1, 16]], scalar_offset=i, indirect_dim=0))
            nisa.dma_copy(dst=out.ap([[16, 1], [1, 16]], scalar_offset=i, indirect_dim=0), src=row)
        return out, n

    ck = nkicc.compile(k, x)
    assert any("W150" in w for w in ck.report["warnings"])
    out, n = ck.run(x)
    want = np.zeros_like(x)
    want[2:6] = x[2:6]
    np.testing.assert_array_equal(out, want)
    assert n[0, 0] == 6


def test_err_register_in_python_control_flow(rng):
    x = rng.standard_normal((1, 1)).astype(np.float32)

    @nkicc.jit
    def k(x):
        r = nisa.register_alloc(3)
        if r:  # MARK-bool
            pass
        return x

    with pytest.raises(nkicc.NkiccError) as e:
        k(x)
    check_error(e, "E150", "MARK-bool", "test_runtime_loops.py")

    @nkicc.jit
    def k2(x):
        nl.fori_loop(0, 4, lambda i: None, step=0)  # MARK-step
        return x

    with pytest.raises(nkicc.NkiccError) as e:
        k2(x)
    check_error(e, "E103", "MARK-step", "test_runtime_loops.py")

    @nkicc.jit
    def k3(x):
        r = nisa.register_alloc(1)
        nl.while_loop(r, lambda v: 0)  # MARK-ret
        return x

    with pytest.raises(nkicc.NkiccError) as e:
        k3(x)
    check_error(e, "E103", "MARK-ret", "test_runtime_loops.py")
