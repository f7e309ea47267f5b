"""The last names of the NKI 0.6 reference nkicc gained: NkiInstruction and
depends_on, NkiValidationError, VirtualRegister(state, frozen), nl.prelu,
nl.average, nl.gather_flattened, nl.shared_constant, the reference's
parameter order of nc_matmul, and nki.collectives all_gather_v /
all_to_all_v over N ranks. Results against numpy on random data, through
both simulators."""
import json

import ml_dtypes
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
import nkicc.language.collectives as cc
from tests.support.ops_helpers import check_error
from tests.support.sim_helpers import run_both_simulators

api = pytest.mark.api
bf16 = np.dtype(ml_dtypes.bfloat16)


# --- NkiInstruction.depends_on ---------------------------------------------------------

def two_engines(order: bool):
    @nkicc.jit
    def k(a, b):
        o1 = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray(b.shape, nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        t1 = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        t2 = nl.ndarray(b.shape, nl.float32, buffer=nl.sbuf)
        act = nisa.activation(t1, nl.exp, x)
        dve = nisa.tensor_scalar(t2, y, nl.multiply, 3.0)
        if order:
            assert dve.depends_on(act) is dve
        nl.store(o1, t1)
        nl.store(o2, t2)
        return o1, o2
    return k


def _span(events, opcode):
    (e,) = [e for e in events if e["ph"] == "X" and e.get("cat") != "loop" and opcode in e["name"]]
    return e["ts"], e["ts"] + e["dur"]


@api("nisa.NkiInstruction", "nisa.NkiInstruction.depends_on")
def test_depends_on_orders_independent_instructions(rng, tmp_path):
    a = rng.standard_normal((128, 2048)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    spans = {}
    for order in (False, True):
        r1, r2 = run_both_simulators(two_engines(order), a, b)
        np.testing.assert_allclose(r1, np.exp(a), rtol=2e-5, atol=1e-6)
        np.testing.assert_array_equal(r2, b * np.float32(3))
        ck = nkicc.compile(two_engines(order), a, b)
        path = tmp_path / f"t{order}.json"
        ck.simulate(dict(zip(ck.ir.args, (a, b))), trace=str(path))
        events = json.loads(path.read_text())["traceEvents"]
        spans[order] = _span(events, "activation"), _span(events, "tensor_scalar")
    (act0, dve0), (act1, dve1) = spans[False], spans[True]
    assert dve0[0] < act0[1]  # free to overlap without the edge
    assert dve1[0] >= act1[1] - 1e-6  # with it, the consumer starts after the producer ends


@api("nisa.NkiInstruction.depends_on")
def test_depends_on_inside_a_rolled_loop(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)

    @nkicc.jit
    def k(x, y):
        o1 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t1 = nl.ndarray((32, 64), nl.float32, buffer=nl.sbuf)
            t2 = nl.ndarray((32, 64), nl.float32, buffer=nl.sbuf)
            first = nisa.activation(t1, nl.exp, nl.load(x[i * 32:(i + 1) * 32]))
            nisa.tensor_scalar(t2, nl.load(y[i * 32:(i + 1) * 32]), nl.multiply, 2.0).depends_on(first)
            nl.store(o1[i * 32:(i + 1) * 32], t1)
            nl.store(o2[i * 32:(i + 1) * 32], t2)
        return o1, o2
    r1, r2 = run_both_simulators(k, a, b)
    u1, u2 = run_both_simulators(k, a, b, unroll=True)
    np.testing.assert_allclose(r1, np.exp(a), rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(r2, 2 * b)
    np.testing.assert_array_equal(r1, u1)
    np.testing.assert_array_equal(r2, u2)


def _spans(events, opcode):
    return [(e["ts"], e["ts"] + e["dur"]) for e in events
            if e["ph"] == "X" and e.get("cat") != "loop" and opcode in e["name"]]


@api("nisa.NkiInstruction.depends_on")
@pytest.mark.parametrize("where", ["producer in an ended loop", "consumer in an ended loop"])
def test_depends_on_across_static_loops(rng, tmp_path, where):
    """Static loops do not count (the vendor unrolls them): an edge may leave or
    enter one; every iteration of a rolled end takes part in it."""
    a = rng.standard_normal((128, 2048)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)

    def make(edge):
        @nkicc.jit
        def k(x, y):
            o1 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
            o2 = nl.ndarray((128, 2048), nl.float32, buffer=nl.shared_hbm)
            ys = nl.load(y)  # the consumers' small input first: they could start long before the producer ends
            xs = nl.load(x)
            t1 = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
            t2 = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            if where == "producer in an ended loop":
                for i in nl.affine_range(4):
                    p = nisa.activation(t1[:, i * 512:(i + 1) * 512], nl.exp, xs[:, i * 512:(i + 1) * 512])
                c = nisa.tensor_scalar(t2[:, 0:512], ys, nl.multiply, 3.0)
                if edge:
                    c.depends_on(p)
                for i in nl.affine_range(3):
                    nisa.tensor_scalar(t2[:, (i + 1) * 512:(i + 2) * 512], ys, nl.add, float(i))
            else:
                p = nisa.activation(t1, nl.exp, xs)
                for i in nl.affine_range(4):
                    c = nisa.tensor_scalar(t2[:, i * 512:(i + 1) * 512], ys, nl.add, float(i))
                if edge:
                    c.depends_on(p)
            nl.store(o1, t1)
            nl.store(o2, t2)
            return o1, o2
        return k

    last_consumer_start = {}
    for edge in (False, True):
        r1, r2 = run_both_simulators(make(edge), a, b)
        np.testing.assert_allclose(r1, np.exp(a), rtol=2e-5, atol=1e-6)
        if where == "producer in an ended loop":
            want2 = np.concatenate([b * np.float32(3)] + [b + np.float32(i) for i in range(3)], axis=1)
        else:
            want2 = np.concatenate([b + np.float32(i) for i in range(4)], axis=1)
        np.testing.assert_array_equal(r2, want2)
        ck = nkicc.compile(make(edge), a, b)
        path = tmp_path / f"t{edge}.json"
        ck.simulate(dict(zip(ck.ir.args, (a, b))), trace=str(path))
        events = json.loads(path.read_text())["traceEvents"]
        producer_end = max(end for _, end in _spans(events, "activation"))
        # the edge's consumer: the first tensor_scalar after the producer loop, or the consumer loop's last
        consumer = (min if where == "producer in an ended loop" else max)(s for s, _ in _spans(events, "tensor_scalar"))
        last_consumer_start[edge] = consumer, producer_end
    start, end = last_consumer_start[False]
    assert start < end  # free to overlap without the edge
    start, end = last_consumer_start[True]
    assert start >= end - 1e-6  # with it, the consumer starts after the producer's last iteration ends


@api("nisa.NkiInstruction.depends_on")
def test_depends_on_errors():
    def make(case):
        @nkicc.jit
        def k(a):
            out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
            first = nisa.tensor_scalar(t, x, nl.add, 1.0)
            if case == "not an instruction":
                first.depends_on(x)  # EDGE_A
            if case == "backwards":
                later = nisa.tensor_scalar(t, t, nl.add, 1.0)
                first.depends_on(later)  # EDGE_B
            if case == "out of a runtime loop":
                for i in nl.dynamic_range(2):
                    inner = nisa.tensor_scalar(t, t, nl.add, 1.0)
                nisa.tensor_scalar(t, t, nl.add, 1.0).depends_on(inner)  # EDGE_C
            nl.store(out, t)
            return out
        return k
    a = np.ones((8, 8), np.float32)
    for case, marker in (("not an instruction", "A"), ("backwards", "B"), ("out of a runtime loop", "C")):
        marker = "# EDGE_" + marker
        with pytest.raises(nkicc.NkiccError) as e:
            make(case)(a)
        check_error(e, "E103", marker, "test_nki06_names.py")


# --- NkiValidationError ----------------------------------------------------------------

@api("nisa.NkiValidationError")
def test_hardware_rules_raise_nki_validation_error():
    @nkicc.jit
    def k(a):
        out = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((64, 64), nl.float32, buffer=nl.psum)
        x = nl.load(a)
        nisa.nc_matmul(acc, x, x)  # MATMUL in SBUF
        try:
            nisa.nc_matmul(acc, acc, x)  # moving from PSUM: a hardware rule
        except nisa.NkiValidationError as e:
            assert e.code == "E131"
            raise
        return out
    with pytest.raises(nisa.NkiValidationError) as e:
        k(np.ones((64, 64), np.float32))
    assert isinstance(e.value, nkicc.NkiccError) and e.value.code == "E131"
    assert "nc_matmul" in str(e.value)


# --- VirtualRegister(state, frozen) -----------------------------------------------------

@api("nisa.VirtualRegister")
def test_virtual_register_constructor(rng):
    n = int(rng.integers(3, 9))
    a = rng.standard_normal((4, 16)).astype(np.float32)

    @nkicc.jit
    def k(x):
        out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 16), nl.float32, buffer=nl.shared_hbm)
        trips = nisa.VirtualRegister(state=n, frozen=True)
        t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.register_store(t, trips)
        s = nl.zeros((4, 16), nl.float32)
        tile = nl.load(x)

        def body(i):
            nisa.tensor_tensor(s, s, tile, nl.add)
        nl.fori_loop(0, trips, body)
        nl.store(out, t)
        nl.store(acc, s)
        return out, acc
    got, acc = run_both_simulators(k, a)
    assert got[0, 0] == n
    np.testing.assert_allclose(acc, a * n, rtol=1e-5)


@api("nisa.VirtualRegister")
def test_frozen_register_cannot_change():
    @nkicc.jit
    def k(x):
        out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        r = nisa.VirtualRegister(5, True)
        nisa.register_move(r, 3)  # FROZEN
        return out
    with pytest.raises(nkicc.NkiccError) as e:
        k(np.zeros((1, 1), np.float32))
    check_error(e, "E103", "# FROZEN", "test_nki06_names.py")


# --- nl.prelu, nl.average --------------------------------------------------------------

@api("nl.prelu", "nisa.activate2")
@pytest.mark.parametrize("shape,dtype", [((128, 256), np.float32), ((1, 1), np.float32), ((16, 3, 5), bf16)])
@pytest.mark.parametrize("tile_slope", [False, True])
def test_prelu_slope_from_relu_param(trn3, rng, shape, dtype, tile_slope):
    x = rng.uniform(-3, 3, shape).astype(dtype)
    slope = rng.uniform(0.01, 0.5, (shape[0], 1)).astype(np.float32)
    scalar_slope = float(rng.uniform(0.01, 0.5))
    scale, bias = float(rng.uniform(0.5, 2)), float(rng.uniform(-0.5, 0.5))

    @nkicc.jit
    def k(a, s):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activate2(t, nl.prelu, nl.load(a), scale, bias, nl.multiply, nl.add,
                       relu_param=nl.load(s) if tile_slope else scalar_slope)
        nl.store(out, t)
        return out
    got = run_both_simulators(k, x, slope)
    pre = x.astype(np.float32).reshape(shape[0], -1) * np.float32(scale) + np.float32(bias)
    s = slope if tile_slope else np.float32(scalar_slope)
    np.testing.assert_allclose(got.reshape(shape[0], -1), np.where(pre >= 0, pre, pre * s), rtol=1e-5, atol=1e-6)


@api("nl.prelu")
def test_prelu_in_activation_has_slope_zero_and_other_ops_take_no_slope(trn3, rng):
    x = rng.standard_normal((32, 64)).astype(np.float32)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(t, nl.prelu, nl.load(a))
        nl.store(out, t)
        return out
    np.testing.assert_array_equal(run_both_simulators(k, x), np.maximum(x, 0))

    @nkicc.jit
    def bad(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activate2(t, nl.exp, nl.load(a), 1.0, 0.0, nl.multiply, nl.add, relu_param=0.1)  # SLOPE
        return out
    with pytest.raises(nisa.NkiValidationError) as e:
        bad(x)
    check_error(e, "E103", "# SLOPE", "test_nki06_names.py")


@api("nl.average")
@pytest.mark.parametrize("shape", [(128, 64), (5, 7), (1, 3)])
def test_average_over_partitions(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)

    @nkicc.jit
    def k(a):
        out = nl.ndarray((1, shape[1]), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, shape[1]), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(t, nl.average, nl.load(a))
        nl.store(out, t)
        return out
    np.testing.assert_allclose(run_both_simulators(k, x), x.mean(axis=0, keepdims=True), rtol=1e-5, atol=1e-6)


# --- nl.gather_flattened ---------------------------------------------------------------

@api("nl.gather_flattened")
@pytest.mark.parametrize("dshape,ishape,idx_dt,out_dt", [
    ((128, 512), (128, 512), np.int32, None), ((7, 3, 5), (7, 9), np.uint32, None), ((1, 1), (1, 1), np.int32, None),
    ((64, 40), (64, 2, 6), np.int32, bf16)])
def test_gather_flattened(rng, dshape, ishape, idx_dt, out_dt):
    data = rng.standard_normal(dshape).astype(np.float32)
    n = int(np.prod(dshape[1:]))
    idx = rng.integers(0, n, ishape).astype(idx_dt)

    @nkicc.jit
    def k(d, i):
        out = nl.ndarray(i.shape, out_dt or nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.gather_flattened(nl.load(d), nl.load(i), dtype=out_dt))
        return out
    got = run_both_simulators(k, data, idx)
    want = np.take_along_axis(data.reshape(dshape[0], -1), idx.reshape(ishape[0], -1).astype(np.int64), 1)
    want = want.reshape(ishape)
    if out_dt is not None:
        want = want.astype(out_dt)
    np.testing.assert_array_equal(got, want)


@api("nl.gather_flattened")
def test_gather_flattened_errors():
    def make(idx_dtype, axis):
        @nkicc.jit
        def k(d):
            out = nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm)
            i = nl.zeros((8, 8), idx_dtype)
            nl.store(out, nl.gather_flattened(nl.load(d), i, axis=axis))  # GATHER
            return out
        return k
    for args, code in (((nl.float32, 0), "E132"), ((nl.int32, 1), "E103")):
        with pytest.raises(nkicc.NkiccError) as e:
            make(*args)(np.ones((8, 8), np.float32))
        check_error(e, code, "# GATHER", "test_nki06_names.py")


# --- nl.shared_constant ----------------------------------------------------------------

@api("nl.shared_constant")
@pytest.mark.parametrize("dtype", [np.float32, bf16, np.int8, np.uint16, np.int32])
def test_shared_constant_values(rng, dtype):
    const = (rng.integers(-100 if np.dtype(dtype).kind == "i" else 0, 100, (48, 20))
             if np.dtype(dtype).kind in "iu" else rng.standard_normal((48, 20))).astype(dtype)
    x = rng.standard_normal((48, 20)).astype(np.float32)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        c = nl.shared_constant(const)
        assert c.buffer == "shared_hbm"
        nl.store(out, nl.add(nl.load(a), nl.load(c, dtype=nl.float32)))
        return out
    got = run_both_simulators(k, x)
    np.testing.assert_allclose(got, x + const.astype(np.float32), rtol=1e-6, atol=1e-6)


@api("nl.shared_constant")
def test_shared_constant_from_npy_in_a_loop(rng, tmp_path):
    const = rng.standard_normal((4, 16, 8)).astype(np.float32)
    path = tmp_path / "c.npy"
    np.save(path, const)

    @nkicc.jit
    def k(a):
        out = nl.ndarray((4, 16, 8), nl.float32, buffer=nl.shared_hbm)
        c = nl.shared_constant(str(path))
        for i in nl.affine_range(4):
            nl.store(out[i], nl.multiply(nl.load(c[i]), nl.load(a)))
        return out
    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(run_both_simulators(k, x), const * x, rtol=1e-6)
    # the data is part of the program: another constant is another compile
    ck1 = nkicc.compile(k, x)
    np.save(path, const + 1)
    ck2 = nkicc.compile(k, x)
    np.testing.assert_allclose(ck2.run(x), (const + 1) * x, rtol=1e-6)
    assert ck1.run(x).tolist() != ck2.run(x).tolist()


@api("nl.shared_constant")
def test_shared_constant_errors(tmp_path):
    def make(value):
        @nkicc.jit
        def k(a):
            out = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
            nl.shared_constant(value)  # CONSTANT
            return out
        return k
    for value, code in ((np.zeros((2, 2)), "E132"), (str(tmp_path / "missing.npy"), "E103"),
                        (object(), "E103")):
        with pytest.raises(nkicc.NkiccError) as e:
            make(value)(np.zeros((2, 2), np.float32))
        check_error(e, code, "# CONSTANT", "test_nki06_names.py")


# --- the reference's parameter order ---------------------------------------------------

@api("nisa.nc_matmul")
def test_nc_matmul_positional_accumulate_is_seventh(rng):
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((32, 24)).astype(np.float32)

    @nkicc.jit
    def k(x, y):
        out = nl.ndarray((16, 24), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((16, 24), nl.float32, buffer=nl.psum)
        sx, sy = nl.load(x), nl.load(y)
        nisa.nc_matmul(acc, sx, sy, False, False, False, False)
        nisa.nc_matmul(acc, sx, sy, False, False, False, True)  # accumulate=True: twice the product
        nl.store(out, nl.copy(acc))
        return out
    np.testing.assert_allclose(run_both_simulators(k, a, b), 2 * a.T @ b, rtol=1e-4, atol=1e-4)


# --- nki.collectives all_gather_v / all_to_all_v ----------------------------------------

def devices(ranks):
    """Rank-lists of whole devices: 4 ranks each (LNC=2), as all_gather_v runs."""
    return [list(range(d, d + 4)) for d in range(0, ranks, 4)]


def gather_v_kernel(groups, known=False, sbuf_meta=False, rdispls=False):
    @nkicc.jit
    def k(x, meta, init):
        out = nl.ndarray(init.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        m = nl.ndarray(meta.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, init)  # elements no chunk covers keep these values
        nisa.dma_copy(m, meta)
        md = m
        if sbuf_meta:
            md = nl.ndarray((1,) + tuple(meta.shape), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.dma_copy(md[0], meta)
        cc.all_gather_v([x], [out], cc.ReplicaGroup(groups), md, recv_counts_known=known,  # AGV_CALL
                        has_rdispls=rdispls)
        if sbuf_meta:
            nisa.dma_copy(m, md[0])
        return out, m
    return k


@api("nki.collectives.all_gather_v")
@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_all_gather_v(rng, ranks, simulator):
    slot, g = 12, 4
    xs = [rng.standard_normal((30,)).astype(np.float32) for _ in range(ranks)]
    counts = rng.integers(0, slot + 1, ranks)
    displs = [int(rng.integers(0, 30 - c + 1)) for c in counts]
    metas = [np.array([[counts[r]] * g, [displs[r]] * g, [0] * g], np.uint32) for r in range(ranks)]
    init = [rng.standard_normal((g * slot,)).astype(np.float32) for _ in range(ranks)]
    got = nkicc.run_ranks(gather_v_kernel(devices(ranks)), ranks, xs, metas, init, simulator=simulator)
    for r in range(ranks):
        group = devices(ranks)[r // g]
        want = init[r].copy()
        for i, s in enumerate(group):
            want[i * slot:i * slot + counts[s]] = xs[s][displs[s]:displs[s] + counts[s]]
        np.testing.assert_array_equal(got[r][0], want)
        np.testing.assert_array_equal(got[r][1][2], counts[group])  # row 2: the counts received


@api("nki.collectives.all_gather_v")
def test_all_gather_v_known_counts_and_sbuf_metadata(rng):
    ranks, slot = 4, 10
    xs = [rng.standard_normal((16,)).astype(np.float32) for _ in range(ranks)]
    counts = rng.integers(1, 9, ranks)
    metas = [np.array([[counts[r]] * ranks, [0] * ranks, [77] * ranks], np.uint32) for r in range(ranks)]
    init = [np.zeros(ranks * slot, np.float32) for _ in range(ranks)]
    got = nkicc.run_ranks(gather_v_kernel(devices(ranks), known=True, sbuf_meta=True), ranks, xs, metas, init)
    for r in range(ranks):
        want = np.zeros(ranks * slot, np.float32)
        for s in range(ranks):
            want[s * slot:s * slot + counts[s]] = xs[s][:counts[s]]
        np.testing.assert_array_equal(got[r][0], want)
        assert list(got[r][1][2]) == [77] * ranks  # recv_counts_known: row 2 untouched


def to_all_v_kernel(groups, rdispls=False):
    @nkicc.jit
    def k(x, meta, start):
        out = nl.ndarray(start.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        m = nl.ndarray(meta.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, start)
        nisa.dma_copy(m, meta)
        cc.all_to_all_v([x], [out], cc.ReplicaGroup(groups), m, has_rdispls=rdispls)  # A2AV_CALL
        return out, m
    return k


@api("nki.collectives.all_to_all_v")
@pytest.mark.parametrize("ranks", [8, 12])
@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_all_to_all_v(rng, trn3, ranks, simulator):
    """On trn3 (NeuronSwitch) a rank-list is sequential whole devices, more than one."""
    slot, n = 6, 50
    xs = [rng.standard_normal((n,)).astype(np.float32) for _ in range(ranks)]
    sc = rng.integers(0, slot + 1, (ranks, ranks))      # sc[s, k]: elements s sends to k
    sd = rng.integers(0, n - slot, (ranks, ranks))      # where in s's src they start
    metas = [np.array([sc[s], sd[s], np.zeros(ranks)], np.uint32) for s in range(ranks)]
    init = [rng.standard_normal((ranks * slot,)).astype(np.float32) for _ in range(ranks)]
    got = nkicc.run_ranks(to_all_v_kernel([list(range(ranks))]), ranks, xs, metas, init, simulator=simulator)
    for r in range(ranks):
        want = init[r].copy()
        for s in range(ranks):
            want[s * slot:s * slot + sc[s, r]] = xs[s][sd[s, r]:sd[s, r] + sc[s, r]]
        np.testing.assert_array_equal(got[r][0], want)
        np.testing.assert_array_equal(got[r][1][2], sc[:, r])


@api("nki.collectives.all_to_all_v")
def test_all_to_all_v_receive_displacements(rng, trn3):
    ranks, n, size = 8, 16, 80
    xs = [rng.standard_normal((n,)).astype(np.float32) for _ in range(ranks)]
    sc = rng.integers(1, 9, (ranks, ranks))
    rd = np.arange(ranks) * 10  # where the chunk from each sender lands
    metas = [np.array([sc[s], np.zeros(ranks), np.zeros(ranks), rd], np.uint32) for s in range(ranks)]
    init = [np.zeros(size, np.float32) for _ in range(ranks)]
    got = nkicc.run_ranks(to_all_v_kernel([list(range(ranks))], rdispls=True), ranks, xs, metas, init)
    for r in range(ranks):
        want = np.zeros(size, np.float32)
        for s in range(ranks):
            want[rd[s]:rd[s] + sc[s, r]] = xs[s][:sc[s, r]]
        np.testing.assert_array_equal(got[r][0], want)


@api("nki.collectives.all_gather_v", "nki.collectives.all_to_all_v")
def test_variable_collective_platform_limits(monkeypatch):
    """The reference's current limitations, each a one-line error at the call."""
    GATHER_V, TO_ALL_V = "# " + "AGV_CALL", "# " + "A2AV_CALL"  # the markers of the calls above
    x, m3, m4 = [np.zeros((8,), np.float32)] * 8, [np.zeros((3, 4), np.uint32)] * 8, [np.zeros((4, 8), np.uint32)] * 8
    init = [np.zeros((16,), np.float32)] * 8
    cases = [
        (gather_v_kernel([[0, 1, 2, 3, 4, 5, 6, 7]]), 8, m3, "E130", GATHER_V),      # 8 ranks in a list
        (gather_v_kernel([[1, 2, 3, 4]]), 8, m3, "E130", GATHER_V),                  # across two devices
        (gather_v_kernel(devices(4), rdispls=True), 4, m4, "E160", GATHER_V),       # no recv_displs
        (to_all_v_kernel([list(range(8))]), 8, m3, "E130", TO_ALL_V),                # intra-node on trn2
        (to_all_v_kernel([list(range(8))], rdispls=True), 8, m4, "E135", TO_ALL_V),  # NeuronSwitch only
    ]
    for kernel, ranks, meta, code, marker in cases:
        with pytest.raises(nkicc.NkiccError) as e:
            nkicc.run_ranks(kernel, ranks, x[:ranks], meta[:ranks], init[:ranks])
        check_error(e, code, marker, "test_nki06_names.py")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    with pytest.raises(nkicc.NkiccError) as e:  # one device is not enough for all_to_all_v
        nkicc.run_ranks(to_all_v_kernel([[0, 1, 2, 3]]), 4, x[:4], m3[:4], init[:4])
    check_error(e, "E130", TO_ALL_V, "test_nki06_names.py")


@api("nki.collectives.all_gather_v", "nki.collectives.all_to_all_v")
def test_variable_collective_errors(rng):
    def make(meta_dtype=nl.uint32, rows=3, cols=4, hbm_out=True, fn=cc.all_gather_v):
        @nkicc.jit
        def k(x, meta):
            out = nl.ndarray((8,), dtype=nl.float32, buffer=nl.shared_hbm if hbm_out else nl.sbuf)
            m = nl.ndarray((rows, cols), dtype=meta_dtype, buffer=nl.shared_hbm)
            fn([x], [out], cc.ReplicaGroup([[0, 1, 2, 3]]), m)  # VARIABLE
            return x
        return k
    x = [np.zeros((8,), np.float32)] * 4
    meta = [np.zeros((3, 4), np.uint32)] * 4
    for kwargs, code in ((dict(meta_dtype=nl.int32), "E132"), (dict(rows=4), "E140"), (dict(cols=3), "E140"),
                         (dict(fn=cc.all_to_all_v, rows=2), "E140"), (dict(hbm_out=False), "E120")):
        with pytest.raises(nkicc.NkiccError) as e:
            nkicc.run_ranks(make(**kwargs), 4, x, meta)
        check_error(e, code, "# VARIABLE", "test_nki06_names.py")
    # a chunk larger than its slot is found at run time, at the call
    big = [np.array([[5] * 4, [0] * 4, [0] * 4], np.uint32)] * 4

    @nkicc.jit
    def k(x, meta):
        out = nl.ndarray((16,), dtype=nl.float32, buffer=nl.shared_hbm)
        m = nl.ndarray(meta.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(m, meta)
        cc.all_gather_v([x], [out], cc.ReplicaGroup([[0, 1, 2, 3]]), m)  # OVERFLOW
        return out
    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.run_ranks(k, 4, x, big)
    check_error(e, "E170", "# OVERFLOW", "test_nki06_names.py")


@api("nki.collectives.collective_permute_implicit_reduce",
     "nki.collectives.collective_permute_implicit_current_processing_rank_id")
@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_ring_reduce_and_processing_rank(rng, simulator):
    ranks, ring = 4, [2, 0, 3, 1]  # the ring follows the replica group's order
    a = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(ranks)]
    b = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(ranks)]

    @nkicc.jit
    def k(x, y):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        who = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        group = cc.ReplicaGroup([ring])
        cc.collective_permute_implicit_reduce([[x]], [[y]], [[out]], group, nl.maximum)
        t = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.sbuf)
        for i in range(3):
            reg = cc.collective_permute_implicit_current_processing_rank_id(i, group)
            nisa.register_store(t[:, i:i + 1], reg)
        nl.store(who, t)
        return out, who
    got = nkicc.run_ranks(k, ranks, a, b, simulator=simulator)
    for r in range(ranks):
        pred = ring[(ring.index(r) - 1) % ranks]
        np.testing.assert_array_equal(got[r][0], np.maximum(a[pred], b[pred]))
        assert list(got[r][1][0]) == [ring[(ring.index(r) - i) % ranks] for i in range(3)]


@api("nisa.NkiInstruction.depends_on")
def test_depends_on_a_rotating_dma_in_a_rolled_loop(rng, tmp_path):
    """A rolled loop's DMAs rotate over queues, and a wait on one is narrowed to
    the executions that touched the waiter's memory; an edge shares no memory, so
    it must still wait for the DMA itself."""
    a = rng.standard_normal((4, 128, 2048)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)

    @nkicc.jit
    def k(x, y):
        ys = nl.load(y)  # small, first: without the edge the consumers could start at once
        o = nl.ndarray((4, 128, 2048), nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((4, 128, 64), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            ld = nisa.dma_copy(dst=t, src=x[i])
            nisa.tensor_scalar(u, ys, nl.multiply, 2.0).depends_on(ld)
            nl.store(o[i], t)
            nl.store(o2[i], u)
        return o, o2

    c = nkicc.compile(k, a, b)
    path = tmp_path / "t.json"
    outs, _ = c.simulate(dict(zip(c.ir.args, (a, b))), trace=str(path))
    np.testing.assert_array_equal(outs[c.ir.outputs[0]], a)
    np.testing.assert_array_equal(outs[c.ir.outputs[1]], np.broadcast_to(2 * b, (4, 128, 64)))
    events = json.loads(path.read_text())["traceEvents"]
    big_loads = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X" and e.get("cat") != "loop"
                 and "dma_copy" in e["name"] and e["dur"] > 1.0]
    first_load_end = min(end for _, end in big_loads)
    assert min(s for s, _ in _spans(events, "tensor_scalar")) >= first_load_end - 1e-6
