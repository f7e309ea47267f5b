"""What exists only on some NeuronCore generations, as the API reference documents
it: on an older target it is one E135 line at the kernel's call, on a newer one it
runs (against numpy here where the other tests do not already check it). Also
FP8 double-row matmuls and the matmul dtypes each generation takes."""
import ml_dtypes
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import rand
from tests.support.sim_helpers import run_both_simulators

TARGETS = {2: "trn1", 3: "trn2", 4: "trn3"}


def tile_kernel(body):
    """A kernel whose body(x_tile, scratch) issues the instruction under test on one [16, 32] tile."""
    @nkicc.jit
    def k(a):
        x = nl.load(a)
        t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(t, 0.0)
        body(x, t)  # CALL
        out = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    return k


def _f32(shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)


def _u32(shape, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=nl.uint32, buffer=buffer)


# (name, first generation that has it, body); each body is valid on that generation
FEATURES = [
    ("nisa.exponential", 4, lambda x, t: nisa.exponential(dst=t, src=x)),
    ("nisa.activate2", 4, lambda x, t: nisa.activate2(dst=t, op=nl.relu, data=x, imm0=0.5, imm1=0.0,
                                                      op0=nl.multiply, op1=nl.add)),
    ("nisa.rand2", 4, lambda x, t: nisa.rand2(dst=t, min=0.0, max=1.0)),
    ("nl.abs_max", 4, lambda x, t: nisa.tensor_tensor(dst=t, data1=x, data2=x, op=nl.abs_max)),
    ("nisa.range_select", 3, lambda x, t: nisa.range_select(dst=t, on_true_tile=x, comp_op0=nl.greater_equal,
                                                            comp_op1=nl.less, bound0=x[:, 0:1], bound1=x[:, 1:2])),
    ("nisa.dma_transpose", 3, lambda x, t: nisa.dma_transpose(
        dst=nl.ndarray((32, 16), dtype=nl.bfloat16, buffer=nl.sbuf),
        src=nl.ndarray((16, 32), dtype=nl.bfloat16, buffer=nl.shared_hbm))),
    ("nisa.rand_get_state", 3, lambda x, t: nisa.rand_get_state(dst=_u32((16, 6)))),
    ("DMA priority", 4, lambda x, t: nisa.dma_copy(dst=t, src=x, priority=1)),
    ("hardware DGE", 3, lambda x, t: nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge)),
    ("tensor_copy on the Scalar Engine", 3, lambda x, t: nisa.tensor_copy(dst=t, src=x, engine=nisa.engine.scalar)),
    ("activation with a scalar bias", 3, lambda x, t: nisa.activation(dst=t, op=nl.exp, data=x, bias=0.5)),
    ("rng on the GpSimd engine", 3, lambda x, t: nisa.rng(dst=nl.ndarray((16, 32), nl.int32, nl.sbuf),
                                                          engine=nisa.engine.gpsimd)),
    ("rand_get_state on the Vector engine", 4, lambda x, t: nisa.rand_get_state(dst=_u32((16, 24)),
                                                                                engine=nisa.engine.vector)),
]


@pytest.mark.parametrize("name, since, body", FEATURES, ids=[f[0] for f in FEATURES])
def test_generation_gates(monkeypatch, name, since, body):
    a = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    for gen in (2, 3, 4):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", TARGETS[gen])
        if gen < since:
            with pytest.raises(nkicc.NkiccError) as e:
                nkicc.compile(tile_kernel(body), a)
            err = e.value
            assert err.code == "E135", err
            assert err.loc is not None and err.loc.file.endswith("test_generations.py"), err.loc
            assert f"compiled for NeuronCore-v{gen}" in err.message, err.message
        else:
            nkicc.compile(tile_kernel(body), a)


@pytest.mark.api("nisa.nc_version")
def test_get_nc_version_branch_picks_code_each_generation_has(rng, monkeypatch):
    """The E135 hint: branch on nisa.get_nc_version() so each target gets what it has."""
    @nkicc.jit
    def k(a):
        x = nl.load(a)
        t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        if nisa.get_nc_version() >= nisa.nc_version.gen4:
            nisa.tensor_scalar(dst=t, data=x, op0=nl.abs_max, operand0=0.0)  # the signed value: x itself
        else:
            nisa.tensor_copy(dst=t, src=x)
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    a = rand(rng, (16, 32))
    for target in ("trn2", "trn3"):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
        np.testing.assert_array_equal(k(a), a)


def double_row_kernel(dst_dtype=nl.float32):
    @nkicc.jit
    def k(s_in, m_in):
        s, m = nl.load(s_in), nl.load(m_in)
        acc = nl.ndarray((s_in.shape[2], m_in.shape[2]), dtype=dst_dtype, buffer=nl.psum)
        nisa.nc_matmul(acc, s, m, perf_mode=nisa.matmul_perf_mode.double_row)  # DOUBLE
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out
    return k


@pytest.mark.api("nisa.matmul_perf_mode", "nisa.matmul_perf_mode.double_row")
@pytest.mark.parametrize("k, m, n", [(128, 128, 512), (16, 3, 5)])
def test_double_row_matmul_contracts_partitions_and_the_pair(rng, k, m, n):
    """[K, 2, M] x [K, 2, N]: the contraction runs over K and the pair of rows."""
    fp8 = ml_dtypes.float8_e4m3
    st = rng.standard_normal((k, 2, m)).astype(fp8)
    mv = rng.standard_normal((k, 2, n)).astype(fp8)
    got = run_both_simulators(double_row_kernel(), st, mv)
    want = st.astype(np.float32).reshape(2 * k, m).T @ mv.astype(np.float32).reshape(2 * k, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_double_row_is_twice_the_rate_of_two_single_row_matmuls(rng):
    fp8 = ml_dtypes.float8_e4m3
    st, mv = rng.standard_normal((128, 2, 128)).astype(fp8), rng.standard_normal((128, 2, 512)).astype(fp8)

    @nkicc.jit
    def single(s_in, m_in):
        s, m = nl.load(s_in), nl.load(m_in)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for j in range(2):
            nisa.nc_matmul(acc, s[:, j, :], m[:, j, :])
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out

    def pe_ns(kernel):
        c = nkicc.compile(kernel, st, mv)
        outs, report = c.simulate(dict(zip(c.ir.args, (st, mv))))
        return outs[c.ir.outputs[0]], report.engines["pe"].busy_ns

    (one, t_single), (two, t_double) = pe_ns(single), pe_ns(double_row_kernel())
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-4)
    assert 0.45 * t_single < t_double < 0.6 * t_single  # half the streaming, plus an exposed overhead


def test_matmul_dtypes_by_generation(rng, monkeypatch):
    st = rng.standard_normal((128, 2, 64)).astype(np.float32)
    mv = rng.standard_normal((128, 2, 32)).astype(np.float32)
    cases = [  # (target, stationary dtype, dst dtype, error code or None)
        ("trn1", ml_dtypes.float8_e4m3, nl.float32, "E135"),      # double_row needs v3
        ("trn2", np.float32, nl.float32, "E132"),                 # double_row multiplies fp8 only
        ("trn2", ml_dtypes.float8_e4m3fn, nl.float32, "E135"),    # OCP fp8 is v4
        ("trn2", ml_dtypes.float8_e4m3, nl.bfloat16, "E135"),     # a bf16 PSUM result is v4
        ("trn3", ml_dtypes.float8_e4m3fn, nl.bfloat16, None),
    ]
    for target, dt, dst, code in cases:
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
        mdt = ml_dtypes.float8_e5m2 if dt is not np.float32 else np.float32
        s, m = st.astype(dt), mv.astype(mdt)
        if code is None:
            got = double_row_kernel(dst)(s, m)
            want = s.astype(np.float32).reshape(256, 64).T @ m.astype(np.float32).reshape(256, 32)
            np.testing.assert_allclose(got, want.astype(ml_dtypes.bfloat16).astype(np.float32), rtol=1e-2, atol=1e-2)
            continue
        with pytest.raises(nkicc.NkiccError) as e:
            nkicc.compile(double_row_kernel(dst), s, m)
        assert e.value.code == code, (target, dt, dst, e.value)
        assert e.value.loc.file.endswith("test_generations.py")


@pytest.mark.parametrize("n, dst", [(2048, nl.float32), (8192, nl.bfloat16)])
def test_v4_matmul_writes_several_psum_banks(rng, trn3, n, dst):
    """NeuronCore-v4: a moving tile up to 4096 (fp32 dst) or 8192 (bf16 dst) wide, beside a one-bank tile."""
    st, mv = rand(rng, (64, 32)), rand(rng, (64, n))

    @nkicc.jit
    def k(s_in, m_in):
        s, m = nl.load(s_in), nl.load(m_in)
        small = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(small, s, m[:, 0:16])
        part = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=part, src=small)
        acc = nl.ndarray((32, n), dtype=dst, buffer=nl.psum)  # 8192 bf16: the whole PSUM, once small is read
        nisa.nc_matmul(acc, s, m)
        res = nl.ndarray((32, n), dtype=nl.float32, buffer=nl.sbuf)
        for j in range(0, n, 4096):  # one instruction reads at most 4 Ki PSUM elements
            w = min(4096, n - j)
            nisa.tensor_copy(dst=res[:, j:j + w], src=acc[:, j:j + w])
        out, out2 = nl.ndarray((32, n), nl.float32, nl.shared_hbm), nl.ndarray((32, 16), nl.float32, nl.shared_hbm)
        nl.store(out, value=res)
        nl.store(out2, value=part)
        return out, out2

    got, got2 = run_both_simulators(k, st, mv)
    want = st.T @ mv
    if dst == nl.bfloat16:
        want = want.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-2 if dst == nl.bfloat16 else 1e-5, atol=1e-2)
    np.testing.assert_allclose(got2, st.T @ mv[:, 0:16], rtol=1e-5, atol=1e-5)


def test_psum_tile_of_several_banks_is_v4_only(rng, monkeypatch):
    @nkicc.jit
    def k(a):
        acc = nl.ndarray((32, 1024), dtype=nl.float32, buffer=nl.psum)  # WIDE
        nisa.memset(acc, 0.0)
        return a
    with pytest.raises(nkicc.NkiccError) as e:
        k(np.zeros((4, 4), np.float32))
    assert e.value.code == "E133"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    k(np.zeros((4, 4), np.float32))


def test_double_row_matmuls_accumulated_over_a_loop(rng):
    """Accumulating double-row matmuls in a rolled loop (the machine simulator may run the
    loop as one GEMM): against numpy and the reference simulator."""
    fp8 = ml_dtypes.float8_e5m2
    st = rng.standard_normal((4, 128, 2, 32)).astype(fp8)
    mv = rng.standard_normal((4, 128, 2, 96)).astype(fp8)

    @nkicc.jit
    def k(s_in, m_in):
        acc = nl.ndarray((32, 96), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(4):
            s, m = nl.load(s_in[i]), nl.load(m_in[i])
            nisa.nc_matmul(acc, s, m, perf_mode=nisa.matmul_perf_mode.double_row)
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out

    c = nkicc.compile(k, st, mv)
    got, report = c.simulate({"s_in": st, "m_in": mv})
    assert report.batched_loops, report.unbatched_loops  # the fast path ran it
    got = next(iter(got.values()))
    ref = c.simulate({"s_in": st, "m_in": mv}, simulator="reference")[0]
    want = sum(st[i].astype(np.float32).reshape(256, 32).T @ mv[i].astype(np.float32).reshape(256, 96)
               for i in range(4))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(next(iter(ref.values())), want, rtol=1e-5, atol=1e-3)


def transpose_mode_kernel(psum_dtype):
    """data[K, M] transposed by the Tensor Engine (an identity moving tile) into a PSUM tile of
    `psum_dtype`, as the NKI Library's MoE kernels do with bfloat16 activations."""
    @nkicc.jit
    def k(x_in):
        x = nl.load(x_in)
        ident = nl.shared_identity_matrix(x_in.shape[0], dtype=x_in.dtype)
        acc = nl.ndarray((x_in.shape[1], x_in.shape[0]), dtype=psum_dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=x, moving=ident, is_transpose=True)  # TRANSPOSE
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out
    return k


def test_transpose_mode_writes_a_16_bit_input_to_psum_from_v3(rng, monkeypatch):
    """Transpose mode (NeuronCore-v3 and newer) writes BF16/FP16 data to PSUM in its own dtype;
    on NeuronCore-v2, and outside transpose mode before v4, a bf16 PSUM result is E135."""
    x = rng.standard_normal((64, 96)).astype(ml_dtypes.bfloat16)
    for target in ("trn2", "trn3"):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
        got = run_both_simulators(transpose_mode_kernel(nl.bfloat16), x)
        np.testing.assert_array_equal(got, x.astype(np.float32).T)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    h = rng.standard_normal((32, 16)).astype(np.float16)
    np.testing.assert_array_equal(run_both_simulators(transpose_mode_kernel(nl.float16), h), h.astype(np.float32).T)
    with pytest.raises(nkicc.NkiccError) as e:  # fp16 data into a bf16 tile is no pass-through
        nkicc.compile(transpose_mode_kernel(nl.bfloat16), h)
    assert e.value.code == "E135", e.value
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(transpose_mode_kernel(nl.bfloat16), x)
    assert e.value.code == "E135" and e.value.loc.file.endswith("test_generations.py"), e.value
