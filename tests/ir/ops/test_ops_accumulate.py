"""Conformance: the instructions that reduce through an engine's accumulator
registers (reduce_cmd), and the NKI 0.6 element-wise and selection
instructions, against numpy on random data."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, rand, run_rolled_and_unrolled

# the reference names these tests check against numpy (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.tensor_copy_predicated",
    "nisa.tensor_partition_reduce",
    "nisa.tensor_scalar_cumulative",
    "nisa.activation_reduce",
    "nisa.affine_select",
    "nisa.exponential",
    "nisa.reciprocal",
    "nisa.scalar_tensor_tensor",
    "nisa.tensor_scalar_reduce",
    "nisa.range_select",
    "nisa.select_reduce",
    "nisa.reduce_cmd", "nisa.reduce_cmd.idle", "nisa.reduce_cmd.reduce", "nisa.reduce_cmd.reset_reduce",
    "nisa.reduce_cmd.load_reduce")


def _out(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


@pytest.mark.parametrize("shape", [(128, 64), (1, 7), (37, 300)])
def test_activation_reduce_registers_chain(rng, shape):
    """reset_reduce, then reduce onto the registers, then read them out."""
    a, b = rand(rng, shape), rand(rng, shape)

    @nkicc.jit
    def k(a, b):
        o1, o2 = _out(shape), _out((shape[0], 1))
        y = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=nl.load(a), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=y, op=nl.tanh, data=nl.load(b), scale=0.5, reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(o1, value=y)
        nl.store(o2, value=r)
        return o1, o2

    y, r = k(a, b)
    close(y, np.tanh(0.5 * b))
    close(r, (np.exp(a).sum(1) + np.tanh(0.5 * b).sum(1))[:, None], rtol=1e-5, atol=1e-4)


def test_activation_reduce_res_aliasing_dst_keeps_the_reduction(rng):
    """NKI 0.6.0 fix: a reduce_res view inside dst is written after dst."""
    a = rand(rng, (64, 9))

    @nkicc.jit
    def k(a):
        o = _out((64, 9))
        y = nl.ndarray((64, 9), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.square, data=nl.load(a), reduce_op=nl.add, reduce_res=y[:, 8:9],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(o, value=y)
        return o

    want = np.square(a)
    want[:, 8] = np.square(a).sum(1)
    close(k(a), want, rtol=1e-5, atol=1e-5)


@pytest.mark.api("nl.bypass")
def test_activation_reduce_and_activate2(trn3, rng):
    a, bias = rand(rng, (96, 40)), rand(rng, (96, 1))

    @nkicc.jit
    def k(a, bias):
        o1, o2, o3 = _out((96, 40)), _out((96, 1)), _out((96, 40))
        y = nl.ndarray((96, 40), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((96, 1), dtype=nl.float32, buffer=nl.sbuf)
        bt = nl.load(bias)
        nisa.activation_reduce(dst=y, op=nl.sigmoid, data=nl.load(a), reduce_op=nl.add, reduce_res=r, bias=bt,
                               scale=2.0)
        z = nl.ndarray((96, 40), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activate2(dst=z, op=nl.relu, data=nl.load(a), imm0=bt, imm1=0.25, op0=nl.subtract, op1=nl.bypass,
                       reverse0=True)
        nl.store(o1, value=y)
        nl.store(o2, value=r)
        nl.store(o3, value=z)
        return o1, o2, o3

    y, r, z = k(a, bias)
    want = 1 / (1 + np.exp(-(2 * a + bias)))
    close(y, want)
    close(r, want.sum(1, keepdims=True), rtol=1e-5, atol=1e-4)
    close(z, np.maximum(bias - a, 0))


@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_reciprocal_and_scalar_tensor_tensor(rng, dtype):
    a = rand(rng, (128, 33), lo=0.5, hi=3.0).astype(dtype)
    b, s = rand(rng, (128, 33)).astype(dtype), rand(rng, (128, 1))

    @nkicc.jit
    def k(a, b, s):
        o1, o2 = _out((128, 33), a.dtype), _out((128, 33))
        r = nl.ndarray((128, 33), dtype=a.dtype, buffer=nl.sbuf)
        nisa.reciprocal(dst=r, data=nl.load(a))
        t = nl.ndarray((128, 33), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=t, data=nl.load(a), op0=nl.subtract, operand0=nl.load(s), op1=nl.multiply,
                                  operand1=nl.load(b), reverse0=True)
        nl.store(o1, value=r)
        nl.store(o2, value=t)
        return o1, o2

    r, t = k(a, b, s)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    close(r, 1 / af, dtype)
    close(t, (s - af) * bf, np.float32, rtol=1e-5, atol=1e-5)


def test_tensor_scalar_reduce_chain_load_and_negate(rng):
    """A reduction chained over three tiles: reset, accumulate with no
    reduce_res (0.6.0), then load_reduce from a tile on another chain."""
    a, b, c, init = (rand(rng, (64, 20)) for _ in range(3)), None, None, rand(rng, (64, 1))
    a, b, c = a
    init = rand(rng, (64, 1))

    @nkicc.jit
    def k(a, b, c, init):
        o1, o2 = _out((64, 1)), _out((64, 1))
        y = nl.ndarray((64, 20), dtype=nl.float32, buffer=nl.sbuf)
        r1 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        r2 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=y, data=nl.load(a), op0=nl.multiply, operand0=2.0, reduce_op=nl.add)
        nisa.tensor_scalar_reduce(dst=y, data=nl.load(b), op0=nl.add, operand0=1.0, reduce_op=nl.add,
                                  reduce_res=r1, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res_negate=True)
        nisa.tensor_scalar_reduce(dst=y, data=nl.load(c), op0=nl.maximum, operand0=0.0, reduce_op=nl.max,
                                  reduce_res=r2, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=nl.load(init))
        nl.store(o1, value=r1)
        nl.store(o2, value=r2)
        return o1, o2

    r1, r2 = k(a, b, c, init)
    close(r1, -((2 * a).sum(1) + (b + 1).sum(1))[:, None], rtol=1e-5, atol=1e-4)
    close(r2, np.maximum(init, np.maximum(c, 0).max(1, keepdims=True)))


@pytest.mark.parametrize("op1,ref", [(nl.add, np.cumsum), (nl.maximum, np.maximum.accumulate),
                                     (nl.multiply, np.cumprod)])
def test_tensor_scalar_cumulative(rng, op1, ref):
    a = rand(rng, (32, 50), lo=0.8, hi=1.2)

    @nkicc.jit
    def k(a):
        o = _out((32, 50))
        y = nl.ndarray((32, 50), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=y, src=nl.load(a), op0=nl.multiply, op1=op1, imm0=0.5)
        nl.store(o, value=y)
        return o

    close(k(a), ref(0.5 * a, axis=1), rtol=1e-5, atol=1e-5)


def test_tensor_scalar_cumulative_continues_across_tiles_in_a_loop(rng):
    """reduce_cmd=reduce carries the running sum from one tile to the next:
    a prefix sum over a long row, rolled and unrolled alike."""
    a = rand(rng, (16, 4 * 64))

    @nkicc.jit
    def k(a):
        o = _out((16, 4 * 64))
        for i in nl.sequential_range(4):
            y = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.sbuf)
            cmd = nisa.reduce_cmd.reset_reduce if i == 0 else nisa.reduce_cmd.reduce
            nisa.tensor_scalar_cumulative(dst=y, src=nl.load(a[:, i * 64:(i + 1) * 64]), op0=nl.add, op1=nl.add,
                                          imm0=0.0, reduce_cmd=cmd)
            nl.store(o[:, i * 64:(i + 1) * 64], value=y)
        return o

    close(run_rolled_and_unrolled(k, a), np.cumsum(a, axis=1), rtol=1e-5, atol=1e-4)


def test_exponential_with_running_sum(trn3, rng):
    a, m = rand(rng, (128, 30)), rand(rng, (128, 1))

    @nkicc.jit
    def k(a, m):
        o1, o2 = _out((128, 30)), _out((128, 1))
        y = nl.ndarray((128, 30), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=y, src=nl.load(a), max_value=nl.load(m), reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.exponential(dst=y, src=nl.load(a), max_value=1.0, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(o1, value=y)
        nl.store(o2, value=r)
        return o1, o2

    y, r = k(a, m)
    close(y, np.exp(a - 1.0))
    close(r, (np.exp(a - m).sum(1) + np.exp(a - 1).sum(1))[:, None], rtol=1e-5, atol=1e-4)


def test_tensor_copy_predicated_keeps_dst_and_takes_scalar_and_other_ranks(rng):
    a, base = rand(rng, (64, 24)), rand(rng, (64, 24))
    pred = rng.integers(0, 2, size=(64, 2, 12)).astype(np.uint8)

    @nkicc.jit
    def k(a, base, pred):
        o1, o2 = _out((64, 24)), _out((64, 24))
        d = nl.load(base)
        p = nl.load(pred)
        nisa.tensor_copy_predicated(dst=d, src=nl.load(a), predicate=p)
        e = nl.load(base)
        nisa.tensor_copy_predicated(dst=e, src=-7.5, predicate=p, reverse_pred=True)
        nl.store(o1, value=d)
        nl.store(o2, value=e)
        return o1, o2

    d, e = k(a, base, pred)
    p = pred.reshape(64, 24) != 0
    close(d, np.where(p, a, base))
    close(e, np.where(~p, -7.5, base))


def test_affine_select_causal_mask(rng):
    a = rand(rng, (128, 128))

    @nkicc.jit
    def k(a):
        o = _out((128, 128))
        y = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        # keep k <= q: q - k >= 0, with q the partition and k the free index
        nisa.affine_select(dst=y, pattern=[[-1, 128]], channel_multiplier=1, on_true_tile=nl.load(a),
                           on_false_value=-9984.0, cmp_op=nl.greater_equal)
        nl.store(o, value=y)
        return o

    q, kk = np.arange(128)[:, None], np.arange(128)[None, :]
    close(k(a), np.where(q - kk >= 0, a, -9984.0))


@pytest.mark.parametrize("cmd", ["reset_reduce", "idle"])
def test_range_select(rng, cmd):
    a = rand(rng, (64, 100))
    lo = rng.integers(0, 50, size=(64, 1)).astype(np.float32)
    hi = lo + rng.integers(0, 60, size=(64, 1)).astype(np.float32)
    fmin = float(np.finfo(np.float32).min)

    @nkicc.jit
    def k(a, lo, hi):
        o1, o2 = _out((64, 100)), _out((64, 1))
        y = nl.ndarray((64, 100), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=y, on_true_tile=nl.load(a), comp_op0=nl.greater_equal, comp_op1=nl.less,
                          bound0=nl.load(lo), bound1=nl.load(hi), reduce_res=r, reduce_op=nl.maximum,
                          reduce_cmd=getattr(nisa.reduce_cmd, cmd), range_start=10, on_false_value=fmin)
        nl.store(o1, value=y)
        nl.store(o2, value=r)
        return o1, o2

    y, r = k(a, lo, hi)
    idx = 10 + np.arange(100)[None, :]
    want = np.where((idx >= lo) & (idx < hi), a, fmin)
    close(y, want)
    close(r, want.max(1, keepdims=True))


def test_select_reduce(rng):
    a, f = rand(rng, (32, 17)), rand(rng, (32, 1))
    pred = rng.integers(0, 2, size=(32, 17)).astype(np.int8)

    @nkicc.jit
    def k(a, f, pred):
        o1, o2 = _out((32, 17)), _out((32, 1))
        y = nl.ndarray((32, 17), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=y, predicate=nl.load(pred), on_true=nl.load(a), on_false=nl.load(f), reduce_res=r,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce, reverse_pred=True)
        nl.store(o1, value=y)
        nl.store(o2, value=r)
        return o1, o2

    y, r = k(a, f, pred)
    want = np.where(pred == 0, a, f)
    close(y, want)
    close(r, want.max(1, keepdims=True))


@pytest.mark.parametrize("op,ref", [(nl.add, np.sum), (nl.maximum, np.max), (nl.minimum, np.min)])
def test_tensor_partition_reduce(rng, op, ref):
    a = rand(rng, (100, 48))

    @nkicc.jit
    def k(a):
        o = _out((1, 48))
        y = nl.ndarray((1, 48), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=y, op=op, data=nl.load(a))
        nl.store(o, value=y)
        return o

    close(k(a), ref(a, axis=0, keepdims=True), rtol=1e-5, atol=1e-4)


def test_err_accumulator_rules(trn3, rng):
    a = rand(rng, (8, 4))

    @nkicc.jit
    def bad_res(a):
        y = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((8, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=y, data=nl.load(a), op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=r)  # MARK-res
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        bad_res(a)
    check_error(e, "E140", "MARK-res", "test_ops_accumulate.py")

    @nkicc.jit
    def bad_cmd(a):
        y = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=y, src=nl.load(a), reduce_cmd="sometimes")  # MARK-cmd
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        bad_cmd(a)
    check_error(e, "E103", "MARK-cmd", "test_ops_accumulate.py")

    @nkicc.jit
    def bad_pred(a):
        y = nl.load(a)
        nisa.tensor_copy_predicated(dst=y, src=y, predicate=nl.load(a))  # MARK-pred
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        bad_pred(a)
    check_error(e, "E132", "MARK-pred", "test_ops_accumulate.py")

    @nkicc.jit
    def bad_sig(a):
        y = nl.load(a)
        nisa.reciprocal(y)  # MARK-sig
        return a

    with pytest.raises(nkicc.NkiccError) as e:
        bad_sig(a)
    check_error(e, "E103", "MARK-sig", "test_ops_accumulate.py")


def test_reference_interpreter_agrees_on_accumulator_chains(rng):
    """The IR interpreter (no allocation, no schedule) gives what the machine
    simulator gives for a chain through both engines' registers."""
    a, b = rand(rng, (48, 30)), rand(rng, (48, 30))

    @nkicc.jit
    def k(a, b):
        o1, o2 = _out((48, 30)), _out((48, 1))
        y = nl.ndarray((48, 30), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((48, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=nl.load(a), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=y, op=nl.copy, data=nl.load(b), reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        z = nl.ndarray((48, 30), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=z, src=y, op0=nl.add, op1=nl.add, imm0=r)
        nl.store(o1, value=z)
        nl.store(o2, value=r)
        return o1, o2

    ck = nkicc.compile(k, a, b)
    machine = ck.run(a, b)
    reference, _ = ck.simulate({"a": a, "b": b}, simulator="reference")
    r = (np.exp(a).sum(1) + b.sum(1))[:, None]
    close(machine[1], r, rtol=1e-5, atol=1e-4)
    close(machine[0], np.cumsum(b + r, axis=1), rtol=1e-5, atol=1e-3)
    for name, got in zip(ck.ir.outputs, machine):
        np.testing.assert_array_equal(reference[name], got)


def test_unary_alu_op_in_tensor_scalar_reduce_ignores_its_operand(rng):
    """op0=nl.abs with reduce_op=max: the absolute maximum per row (the NKI Library's rmsnorm_quant)."""
    a = rand(rng, (32, 40))

    @nkicc.jit
    def k(a):
        o = _out((32, 1))
        y = nl.ndarray((32, 40), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=y, data=nl.load(a), op0=nl.abs, operand0=0.0, reduce_op=nl.maximum,
                                  reduce_res=r)
        nl.store(o, value=r)
        return o

    close(k(a), np.abs(a).max(1, keepdims=True))


def test_core_barrier_on_one_core_waits_for_nobody(rng):
    a = rand(rng, (8, 8))

    @nkicc.jit
    def k(a):
        o = _out((8, 8))
        nl.store(o, value=nl.load(a))
        nisa.core_barrier(data=o, cores=(0, 1))
        return o

    close(k(a), a)
