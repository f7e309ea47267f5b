"""Index grids that are not affine, or do not fit their tensor."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def grid_floor_division(a: "float32[128,64]"):
    out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    t = nl.load(a[ix // 2, iy])  # EXPECT: E161
    nl.store(out, value=t)
    return out


@nki.jit
def grid_product(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    t = nl.load(a[ix, ix * iy])  # EXPECT: E161
    nl.store(out, value=t)
    return out


@nki.jit
def partition_index_along_a_free_axis(a: "float32[64,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:64]
    t = nl.load(a)
    u = nl.copy(t[i_f, i_p])  # EXPECT: E161
    nl.store(out, value=u)
    return out


@nki.jit
def arange_of_a_float(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(12.5)[:, None]  # EXPECT: E103
    nl.store(out, value=nl.load(a[ix, 0]))
    return out


@nki.jit
def python_decision_on_a_grid(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    if ix < 64:  # EXPECT: E161
        nl.store(out, value=nl.load(a))
    return out


@nki.jit
def grids_that_do_not_broadcast(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(64)[None, :] + nl.arange(32)[None, :]  # EXPECT: E140
    nl.store(out[ix, iy], value=nl.load(a[ix, iy]))
    return out


@nki.jit
def grid_past_the_end(a: "float32[128,64]"):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
    nl.store(out[ix, iy], value=nl.load(a[ix, iy + 1]))  # EXPECT: E101
    return out


@nki.jit
def grid_next_to_a_tile_index(a: "float32[4,128,64]", idx: "int32[1,1]"):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    b = nl.load(idx)
    nl.store(out, value=nl.load(a[b, i_p, i_f]))  # EXPECT: E161
    return out
