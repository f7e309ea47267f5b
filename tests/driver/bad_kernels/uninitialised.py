"""Never-written memory that reaches an output: found when the kernel runs
(E173: a read of never-written memory; E174: output elements never written)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def accumulator_never_zeroed(a: "float32[256,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)  # EXPECT: E173 simulate
    nl.store(out, value=acc)
    return out


@nkicc.jit
def half_written_tile(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t[:, 0:32], src=nl.load(a[:, 0:32]))
    nl.store(out, value=t)  # EXPECT: E173 simulate
    return out


@nkicc.jit
def psum_read_before_any_matmul(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    r = nl.add(nl.load(a), ps)  # EXPECT: E173 simulate
    nl.store(out, value=r)
    return out


@nkicc.jit
def matmul_accumulates_onto_nothing(s: "float32[128,128]", m: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s), moving=nl.load(m), accumulate=True)  # EXPECT: E173 simulate
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def output_half_stored(a: "float32[128,64]"):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)  # EXPECT: E174 simulate
    nl.store(out[0:128, :], value=nl.load(a))
    return out
