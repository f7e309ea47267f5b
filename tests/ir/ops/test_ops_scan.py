"""Conformance: nisa.tensor_tensor_scan, a recurrence along the free axis:
dst[:, 0] = (data0[:, 0] op0 initial) op1 data1[:, 0],
dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i]
(reverse0 / reverse1 swap the operands of op0 / op1; the free axes are scanned
flattened, in row-major order; the running value is fp32)."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, rand, rounded, run_rolled_and_unrolled


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nisa.tensor_tensor_scan")

BIN = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
       "minimum": np.minimum}


def scan_ref(d0, d1, initial, op0="multiply", op1="add", reverse0=False, reverse1=False):
    d0 = f32(d0).reshape(d0.shape[0], -1).astype(np.float32)
    d1 = f32(d1).reshape(d1.shape[0], -1).astype(np.float32)
    prev = np.broadcast_to(np.asarray(initial, np.float32).reshape(-1), (d0.shape[0],)).astype(np.float32)
    out = np.empty_like(d0)
    f0, f1 = BIN[op0], BIN[op1]
    for i in range(d0.shape[1]):
        x = f0(prev, d0[:, i]) if reverse0 else f0(d0[:, i], prev)
        prev = (f1(d1[:, i], x) if reverse1 else f1(x, d1[:, i])).astype(np.float32)
        out[:, i] = prev
    return out


def scan_kernel(op0, op1, reverse0=False, reverse1=False, initial_tile=False, initial=0.0, out_dtype=None):
    @nkicc.jit
    def k(a, b, init):
        out = nl.ndarray(a.shape, dtype=out_dtype or a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=out_dtype or a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=t, data0=nl.load(a), data1=nl.load(b),
                                initial=nl.load(init) if initial_tile else initial,
                                op0=op0, op1=op1, reverse0=reverse0, reverse1=reverse1)
        nl.store(out, value=t)
        return out
    return k


@pytest.mark.parametrize("shape", [(128, 64), (1, 37), (128, 1), (5, 513)])
@pytest.mark.parametrize("initial_tile", [False, True])
def test_scan_multiply_add(rng, shape, initial_tile):
    a, b = rand(rng, shape, lo=0.5, hi=1.0), rand(rng, shape)
    init = rand(rng, (shape[0], 1))
    got = scan_kernel(nl.multiply, nl.add, initial_tile=initial_tile, initial=1.5)(a, b, init)
    want = scan_ref(a, b, init if initial_tile else 1.5)
    close(got, want, np.float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op0,op1", [("add", "add"), ("maximum", "add"), ("add", "maximum"),
                                     ("multiply", "subtract"), ("minimum", "multiply")])
@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, True), (False, True)])
def test_scan_ops_and_reverse(rng, op0, op1, reverse0, reverse1):
    shape = (64, 29)
    a, b = rand(rng, shape, lo=-1, hi=1), rand(rng, shape, lo=0.5, hi=1.0)
    init = rand(rng, (64, 1))
    got = scan_kernel(op0, op1, reverse0, reverse1, initial_tile=True)(a, b, init)
    close(got, scan_ref(a, b, init, op0, op1, reverse0, reverse1), np.float32, rtol=1e-5, atol=1e-5)


def test_scan_numpy_ops_and_cumsum(rng):
    # with op0=add on zeros the scan is a running sum; numpy ufuncs name the ops too
    a, b = np.zeros((32, 100), np.float32), rand(rng, (32, 100))
    got = scan_kernel(np.add, np.add)(a, b, np.zeros((32, 1), np.float32))
    close(got, np.cumsum(b.astype(np.float64), axis=1), np.float32, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("in_dt,out_dt", [(bf16, bf16), (bf16, np.float32), (np.float32, bf16),
                                          (np.float16, np.float16)])
def test_scan_dtypes_state_in_fp32(rng, in_dt, out_dt):
    # the running value is fp32: only what is written to dst is rounded
    shape = (128, 48)
    a, b = rand(rng, shape, in_dt, 0.5, 1.0), rand(rng, shape, in_dt)
    got = scan_kernel(nl.multiply, nl.add, out_dtype=out_dt)(a, b, np.zeros((128, 1), np.float32))
    assert got.dtype == np.dtype(out_dt)
    want = rounded(scan_ref(a, b, 0.0), out_dt)
    np.testing.assert_array_equal(f32(got), want)


def test_scan_3d_free_axes_flattened_and_strided_views(rng):
    @nkicc.jit
    def k(a, b):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((a.shape[0], a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(t, ta, tb, 0.0, nl.multiply, nl.add)       # (P, 3, 10) scanned as (P, 30)
        nl.store(o1, value=t)
        col = nl.ndarray((a.shape[0], a.shape[2]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(col, ta[:, 1, :], tb[:, 2, :], 2.0, nl.add, nl.multiply)
        nl.store(o2, value=col)
        return o1, o2

    a, b = rand(rng, (16, 3, 10), lo=0.5, hi=1.0), rand(rng, (16, 3, 10))
    o1, o2 = k(a, b)
    close(o1, scan_ref(a, b, 0.0).reshape(a.shape), np.float32, rtol=1e-5, atol=1e-5)
    close(o2, scan_ref(a[:, 1, :], b[:, 2, :], 2.0, "add", "multiply"), np.float32, rtol=1e-5, atol=1e-5)


def test_scan_psum_input_and_chunked_carry_rolled(rng):
    # a long scan in chunks, the carry fed back as the `initial` tile: rolled == unrolled == numpy
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        carry = nl.zeros((a.shape[0], 1), dtype=nl.float32)
        for c in nl.sequential_range(a.shape[1] // 32):
            seg = nl.ds(c * 32, 32)
            pa = nl.ndarray((a.shape[0], 32), dtype=nl.float32, buffer=nl.psum)
            nisa.tensor_copy(dst=pa, src=nl.load(a[:, seg]))
            t = nl.ndarray((a.shape[0], 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=t, data0=pa, data1=nl.load(b[:, seg]), initial=carry,
                                    op0=nl.multiply, op1=nl.add)
            nisa.tensor_copy(dst=carry, src=t[:, 31:32])
            nl.store(out[:, seg], value=t)
        return out

    a, b = rand(rng, (128, 160), lo=0.8, hi=1.0), rand(rng, (128, 160))
    got = run_rolled_and_unrolled(k, a, b)
    close(got, scan_ref(a, b, 0.0), np.float32, rtol=1e-5, atol=1e-4)
    assert nkicc.compile(k, a, b).report["loops"]["rolled"] == 1


def test_scan_on_machine_simulator(rng):
    from nkicc.simulator.machine import simulate_machine
    k = scan_kernel(nl.multiply, nl.add, initial_tile=True)
    a, b, init = rand(rng, (64, 40), lo=0.5, hi=1.0), rand(rng, (64, 40)), rand(rng, (64, 1))
    ck = nkicc.compile(k, a, b, init)
    outs, report = simulate_machine(ck.ir, {"a": a, "b": b, "init": init}, target=_target(ck.target))
    close(outs[ck.ir.outputs[0]], scan_ref(a, b, init), np.float32, rtol=1e-5, atol=1e-5)


def _target(name):
    from nkicc.passes import registry
    return registry().targets[name]


# --- what NKI rejects -------------------------------------------------------------

def test_err_scan_shape_mismatch(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(t, nl.load(a), nl.load(b), 0.0, nl.multiply, nl.add)  # MARK
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (8, 16)), rand(rng, (8, 17)))
    check_error(e, "E140", "# MARK", "test_ops_scan.py")


def test_err_scan_initial_shape_and_both_psum(rng):
    @nkicc.jit
    def bad_initial(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.tensor_tensor_scan(t, t, t, nl.load(a), nl.multiply, nl.add)  # INIT
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        bad_initial(rand(rng, (8, 16)))
    check_error(e, "E140", "# INIT", "test_ops_scan.py")

    @nkicc.jit
    def both_psum(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(p, nl.load(a))
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(t, p, p, 0.0, nl.multiply, nl.add)  # PSUM
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        both_psum(rand(rng, (8, 16)))
    check_error(e, "E120", "# PSUM", "test_ops_scan.py")


def test_err_scan_hbm_operand_and_unknown_op(rng):
    @nkicc.jit
    def on_hbm(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.tensor_tensor_scan(t, a, t, 0.0, nl.multiply, nl.add)  # HBM
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        on_hbm(rand(rng, (8, 16)))
    check_error(e, "E120", "# HBM", "test_ops_scan.py")

    @nkicc.jit
    def bad_op(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nisa.tensor_tensor_scan(t, t, t, 0.0, nl.exp, nl.add)  # OP
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        bad_op(rand(rng, (8, 16)))
    check_error(e, "E160", "# OP", "test_ops_scan.py")
