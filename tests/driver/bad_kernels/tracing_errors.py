"""Mistakes in how the kernel uses loops, indices and results: sizes that
depend on a hardware loop's index (E102; a static loop's index may move a size: that loop is
traced concretely, as NKI's static loops are Python ranges), values of the wrong kind (E103), bad return
values (E104), Python decisions on a hardware loop's index (E150, E151)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def slice_size_grows_with_index(a: "float32[128,512]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.dynamic_range(4):
        t = nl.load(a[:, 0:(i + 1) * 128])  # EXPECT: E102
        nl.store(out[:, 0:(i + 1) * 128], value=t)
    return out


@nkicc.jit
def tile_shape_from_index(a: "float32[128,512]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.dynamic_range(1, 4):
        t = nl.ndarray((128, i * 128), dtype=nl.float32, buffer=nl.sbuf)  # EXPECT: E102
        nisa.memset(t, 0.0)
    return out


@nkicc.jit
def float_loop_bound(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] / 128):  # EXPECT: E103
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(a[i * 128:(i + 1) * 128, :]))
    return out


@nkicc.jit
def float_index(a: "float32[4,128,64]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[1.5])  # EXPECT: E103
    nl.store(out, value=t)
    return out


@nkicc.jit
def reduce_over_partitions(a: "float32[128,64]"):
    out = nl.ndarray((1, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.sum(nl.load(a), axis=0)  # EXPECT: E103
    nl.store(out, value=s)
    return out


@nkicc.jit
def returns_an_sbuf_tile(a: "float32[128,64]"):
    t = nl.load(a)
    return t  # EXPECT: E104


@nkicc.jit
def returns_a_number(a: "float32[128,64]"):
    return 1.0  # EXPECT: E104


@nkicc.jit
def branch_on_hardware_index(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.dynamic_range(4):
        if r == 0:  # EXPECT: E150
            nl.store(out[0:128, :], value=nl.load(a[0:128, :]))
    return out


@nkicc.jit
def hardware_index_after_its_loop(a: "float32[512,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.dynamic_range(4):
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.load(a[r * 128:(r + 1) * 128, :]))
    t = nl.load(a[r * 128:(r + 1) * 128, :])  # EXPECT: E151
    nl.store(out[0:128, :], value=t)
    return out


# arguments of the wrong kind: each of these was an internal error (a Python
# exception from inside nkicc) before nkicc checked them


@nkicc.jit
def iota_pattern_not_pairs(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, pattern=64)  # EXPECT: E103
    nl.store(out, value=t)
    return out


@nkicc.jit
def full_of_text(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.full((128, 64), "zero", dtype=nl.float32)  # EXPECT: E103
    nl.store(out, value=t)
    return out


@nkicc.jit
def sum_without_axis(a: "float32[128,64]"):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.sum(nl.load(a), axis=None)  # EXPECT: E103
    nl.store(out, value=s)
    return out


@nkicc.jit
def empty_tile_shape(a: "float32[128,64]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((), dtype=nl.float32, buffer=nl.sbuf)  # EXPECT: E103
    nl.store(out, value=t)
    return out


@nkicc.jit
def broadcast_to_a_text_shape(a: "float32[128,1]"):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.broadcast_to(nl.load(a), (128, "64"))  # EXPECT: E103
    nl.store(out, value=nl.copy(t))
    return out
