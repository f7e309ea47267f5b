"""Out-of-bounds accesses that nkicc sees at compile time (E101)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def hbm_slice_past_end(a: "float32[128,64]"):
    out = nl.ndarray((128, 80), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[0:128, 0:80])  # EXPECT: E101
    nl.store(out, value=t)
    return out


@nkicc.jit
def loop_runs_past_end(a: "float32[256,64]"):
    out = nl.ndarray((384, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        t = nl.load(a[i * 128:(i + 1) * 128, :])  # EXPECT: E101
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out


@nkicc.jit
def loop_starts_below_zero(a: "float32[256,64]"):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.load(a[(i - 1) * 128:i * 128, :])  # EXPECT: E101
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out


@nkicc.jit
def integer_index_past_end(a: "float32[4,128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[4])  # EXPECT: E101
    nl.store(out, value=t)
    return out


@nkicc.jit
def store_past_output_end(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out[64:192, :], value=t)  # EXPECT: E101
    return out


@nkicc.jit
def write_past_tile_end(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nisa.memset(t[:, 60:70], 0.0)  # EXPECT: E101
    nl.store(out, value=t)
    return out


@nkicc.jit
def access_pattern_past_end(a: "float32[128,64]"):
    out = nl.ndarray((128, 65), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a.ap([[64, 128], [1, 65]]))  # EXPECT: E101
    nl.store(out, value=t)
    return out


@nkicc.jit
def access_pattern_negative_offset(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a.ap([[64, 128], [1, 64]], offset=-64))  # EXPECT: E101
    nl.store(out, value=t)
    return out


@nkicc.jit
def empty_slice(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[:, 5:5])  # EXPECT: E101
    nl.store(out, value=t)
    return out
