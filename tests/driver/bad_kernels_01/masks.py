"""mask= predicates nkicc cannot take, or that do not fit the statement."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def mask_over_two_axes(a: "float32[64,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:64]
    t = nl.load(a[i_p, i_f], mask=(i_p < i_f))  # EXPECT: E161
    nl.store(out, value=t)
    return out


@nki.jit
def mask_not_a_comparison(a: "float32[64,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:64]
    t = nl.load(a[i_p, i_f], mask=True)  # EXPECT: E103
    nl.store(out, value=t)
    return out


@nki.jit
def mask_of_another_extent(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    t = nl.load(a[ix, iy], mask=(nl.arange(64)[:, None] < 10))  # EXPECT: E140
    nl.store(out, value=t)
    return out


@nki.jit
def ragged_rows_without_a_mask(a: "float32[200,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128 + ix, iy])  # EXPECT: E101
        nl.store(out[i * 128 + ix, iy], value=t, mask=(i * 128 + ix < 200))
    return out


@nki.jit
def store_of_another_grid(a: "float32[200,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy, iz = nl.arange(128)[:, None], nl.arange(64)[None, :], nl.arange(32)[None, :]
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128 + ix, iz], mask=(i * 128 + ix < 200))
        nl.store(out[i * 128 + ix, iy], value=t, mask=(i * 128 + ix < 200))  # EXPECT: E140
    return out
