"""nki.isa's enumerations and engine constants as kernels pass them: `engine=` runs an
instruction on that engine (the simulation's per-engine counts show it, the result is the
same) or is refused in one line where the instruction cannot run there; reduce_cmd.reset,
the DMA modes, matmul_perf_mode.none, nc_version and sendrecv's dma_engine against numpy or
the behaviour the reference describes."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from nkicc.ir import NkiccError
from tests.support.ops_helpers import close, rand

# the reference names these tests check (bench/api_coverage.py counts them)
pytestmark = pytest.mark.api(
    "nisa.engine", "nisa.engine.vector", "nisa.engine.scalar", "nisa.engine.gpsimd", "nisa.engine.tensor",
    "nisa.engine.unknown", "nisa.engine.dma", "nisa.engine.sync",
    "nisa.vector_engine", "nisa.scalar_engine", "nisa.gpsimd_engine", "nisa.tensor_engine", "nisa.unknown_engine",
    "nisa.reduce_cmd.reset",
    "nisa.dge_mode", "nisa.dge_mode.unknown", "nisa.dge_mode.swdge", "nisa.dge_mode.hwdge", "nisa.dge_mode.none",
    "nisa.matmul_perf_mode.none",
    "nisa.nc_version.gen2", "nisa.nc_version.gen3", "nisa.nc_version.gen4",
    "nisa.dma_engine", "nisa.dma_engine.dma", "nisa.dma_engine.gpsimd_dma")

UNITS = {"vector": "dve", "scalar": "act", "gpsimd": "pool", "tensor": "pe"}


def _out(shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)


def placed_kernel(instruction, engine):
    """One instruction of `instruction`'s kind on `engine` (None: the argument left out), between
    a load and a store."""
    kw = {} if engine is None else {"engine": engine}

    @nkicc.jit
    def k(a, b):
        x, y = nl.load(a), nl.load(b)
        t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        if instruction == "tensor_copy":
            nisa.tensor_copy(dst=t, src=x, **kw)
        elif instruction == "memset":
            nisa.memset(dst=t, value=2.5, **kw)
        elif instruction == "tensor_tensor":
            nisa.tensor_tensor(dst=t, data1=x, data2=y, op=nl.multiply, **kw)
        else:
            nisa.tensor_scalar(dst=t, data=x, op0=nl.add, operand0=1.5, op1=nl.multiply, operand1=y[:, 0:1], **kw)
        out = _out(a.shape)
        nl.store(out, value=t)
        return out
    return k


WANT = {"tensor_copy": lambda a, b: a, "memset": lambda a, b: np.full_like(a, 2.5),
        "tensor_tensor": lambda a, b: a * b, "tensor_scalar": lambda a, b: (a + 1.5) * b[:, :1]}
PLACES = [("tensor_copy", "vector"), ("tensor_copy", "scalar"), ("tensor_copy", "gpsimd"),
          ("memset", "vector"), ("memset", "gpsimd"), ("tensor_tensor", "vector"), ("tensor_tensor", "gpsimd"),
          ("tensor_scalar", "vector"), ("tensor_scalar", "scalar")]


@pytest.mark.parametrize("instruction, engine", PLACES)
def test_engine_runs_the_instruction_there(rng, instruction, engine):
    a, b = rand(rng, (64, 48)), rand(rng, (64, 48))
    for given in (getattr(nisa.engine, engine), engine):  # a member or its name
        k = placed_kernel(instruction, given)
        close(k(a, b), WANT[instruction](a, b))
        counts = {e: s.instructions for e, s in k.compiled[0].sim.engines.items() if s.instructions}
        assert counts.get(UNITS[engine]) == 1, counts  # the one compute instruction, on that engine
    # unknown, or the argument left out: nkicc's own placement, the same result
    default = placed_kernel(instruction, None)
    unknown = placed_kernel(instruction, nisa.engine.unknown)
    close(unknown(a, b), default(a, b))
    counts = lambda k: {e: s.instructions for e, s in k.compiled[0].sim.engines.items()}  # noqa: E731
    assert counts(unknown) == counts(default)


def test_the_deprecated_engine_constants_are_the_members(rng):
    assert nisa.vector_engine is nisa.engine.vector and nisa.scalar_engine is nisa.engine.scalar
    assert nisa.gpsimd_engine is nisa.engine.gpsimd and nisa.tensor_engine is nisa.engine.tensor
    assert nisa.unknown_engine is nisa.engine.unknown
    a, b = rand(rng, (32, 16)), rand(rng, (32, 16))
    k = placed_kernel("memset", nisa.gpsimd_engine)
    close(k(a, b), np.full_like(a, 2.5))
    assert k.compiled[0].sim.engines["pool"].instructions == 1


@nkicc.jit
def wrong_engine(a, CASE=0):
    x = nl.load(a)
    t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    if CASE == 0:
        nisa.memset(dst=t, value=0.0, engine=nisa.engine.tensor)  # MARK
    elif CASE == 1:
        nisa.tensor_scalar(dst=t, data=x, op0=nl.add, operand0=1.0, engine=nisa.engine.gpsimd)  # MARK
    elif CASE == 2:
        nisa.tensor_copy(dst=t, src=x, engine=nisa.engine.dma)  # MARK
    elif CASE == 3:
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=t, src=p, engine=nisa.engine.gpsimd)  # MARK
    elif CASE == 4:
        p = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=p, data=x, engine=nisa.engine.vector)  # MARK
    else:
        nisa.memset(dst=t, value=0.0, engine="hardware")  # MARK
    out = _out(a.shape)
    nl.store(out, value=t)
    return out


@pytest.mark.parametrize("case, code, words", [
    (0, "E103", "memset runs on the vector or gpsimd engine, not tensor"),
    (1, "E103", "tensor_scalar runs on the vector or scalar engine, not gpsimd"),
    (2, "E103", "tensor_copy runs on the vector or scalar or gpsimd engine, not dma"),
    (3, "E120", "GpSimd Engine cannot access psum"),
    (4, "E103", "nc_transpose on the vector engine writes SBUF"),
    (5, "E103", "memset engine must be one of nisa.engine.unknown"),
])
def test_an_engine_the_instruction_cannot_use_is_one_line_at_its_call(case, code, words):
    a = np.zeros((32, 32), np.float32)
    with pytest.raises(NkiccError) as ei:
        wrong_engine(a, CASE=case)
    err = ei.value
    assert err.code == code and words in err.one_line(), err.one_line()
    assert err.loc is not None and err.loc.file == __file__
    assert "MARK" in open(__file__).read().splitlines()[err.loc.line - 1]


@pytest.mark.parametrize("engine", ["tensor", "vector"])
def test_nc_transpose_engine_matches_its_destination(rng, engine):
    a = rand(rng, (32, 24))

    @nkicc.jit
    def k(a):
        x = nl.load(a)
        t = nl.ndarray((24, 32), dtype=nl.float32, buffer=nl.psum if engine == "tensor" else nl.sbuf)
        nisa.nc_transpose(dst=t, data=x, engine=getattr(nisa.engine, engine))
        s = nl.ndarray((24, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=t)
        out = _out((24, 32))
        nl.store(out, value=s)
        return out
    np.testing.assert_array_equal(k(a), a.T)
    assert k.compiled[0].sim.engines[UNITS[engine]].instructions >= 1


def test_reduce_cmd_reset_clears_the_registers(rng):
    """reset_reduce sums a's exp into the registers; reset sets them back to the sum's identity
    (its own result still goes to dst, not into the registers); reduce then sums c alone."""
    a, b, c = rand(rng, (16, 40)), rand(rng, (16, 40)), rand(rng, (16, 40))

    @nkicc.jit
    def k(a, b, c):
        o1, o2 = _out((16, 40)), _out((16, 1))
        y = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.sbuf)
        z = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=nl.load(a), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=z, op=nl.tanh, data=nl.load(b), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset)
        nisa.activation(dst=y, op=nl.square, data=nl.load(c), reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(o1, value=z)
        nl.store(o2, value=r)
        return o1, o2

    z, r = k(a, b, c)
    close(z, np.tanh(b))
    close(r, np.square(c).sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["unknown", "swdge", "hwdge", "none"])
def test_dge_mode_is_how_descriptors_are_made_not_what_moves(rng, mode):
    """Every descriptor-generation mode moves the same bytes (nkicc times DMAs by their bytes and
    queues, whichever engine makes the descriptors); hwdge takes engine=sync or scalar."""
    a = rand(rng, (64, 40))
    kw = {"engine": nisa.engine.sync} if mode == "hwdge" else {}

    @nkicc.jit
    def k(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a, dge_mode=getattr(nisa.dge_mode, mode), **kw)
        out = _out(a.shape)
        nisa.dma_copy(dst=out, src=t, dge_mode=getattr(nisa.dge_mode, mode))
        return out
    np.testing.assert_array_equal(k(a), a)


def test_matmul_perf_mode_none_is_the_plain_matmul(rng):
    s, m = rand(rng, (128, 64)), rand(rng, (128, 96))

    @nkicc.jit
    def k(s_in, m_in):
        acc = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, nl.load(s_in), nl.load(m_in), perf_mode=nisa.matmul_perf_mode.none)
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = _out(acc.shape)
        nl.store(out, value=res)
        return out
    close(k(s, m), s.astype(np.float64).T @ m, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target, member", [("trn1", "gen2"), ("trn2", "gen3"), ("trn3", "gen4")])
def test_get_nc_version_is_the_target_generation(rng, monkeypatch, target, member):
    a = rand(rng, (16, 8))
    seen = []

    @nkicc.jit
    def k(a):
        version = nisa.get_nc_version()
        seen.append(version)
        out = _out(a.shape)
        nl.store(out, value=nl.multiply(nl.load(a), float(int(version))))
        return out
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    got = k(a)
    assert seen[-1] == getattr(nisa.nc_version, member)
    close(got, a * int(getattr(nisa.nc_version, member)))


@nkicc.jit
def swap_halves(x, DMA="dma"):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    mine = nl.load(x[pid * 64:(pid + 1) * 64, :])
    theirs = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0,
                  dma_engine=getattr(nisa.dma_engine, DMA) if DMA in ("dma", "gpsimd_dma") else DMA)
    nl.store(out[pid * 64:(pid + 1) * 64, :], value=theirs)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out


@pytest.mark.parametrize("dma", ["dma", "gpsimd_dma"])
def test_sendrecv_dma_engine_moves_the_same_tile(rng, dma):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    got = swap_halves[2](x, DMA=dma)
    np.testing.assert_array_equal(got[:64], x[64:])
    np.testing.assert_array_equal(got[64:], x[:64])
    with pytest.raises(NkiccError) as ei:
        swap_halves[2](x, DMA="sdma")
    assert ei.value.code == "E103" and "dma_engine" in ei.value.one_line()
