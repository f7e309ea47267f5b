"""Constructs production NKI kernels use, in small kernels written here:
output tensors passed in as arguments (nt.mutable_tensor), written in place
and returned; `.ap(dtype=)` reinterpreting bytes; tile arithmetic operators;
str() of dtypes. Numpy on random data is the oracle."""
import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
import nkicc.language.typing as nt
from nkicc.ir import NkiccError
from tests.support.ops_helpers import check_error, close, rand


def _exp_into(a, out):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=out, src=t)


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_a_returned_mutable_argument_is_the_callers_array(rng, simulator):
    def exp_into(a, out: nt.mutable_tensor):
        _exp_into(a, out)
        return out

    a, out = rand(rng, (64, 48)), np.zeros((64, 48), np.float32)
    compiled = nkicc.compile(exp_into, a, out)
    compiled.simulator = simulator
    got = compiled.run(a, out)
    assert got is out  # the result is the caller's array, written in place
    close(out, np.exp(a))


def test_a_returned_argument_may_be_reshaped_whole(rng):
    """A squeeze and the unsqueeze back (the library's attention_block_tkg returns its K cache so)
    is the argument itself; a reshape to another shape hands back that shape; a part is E104."""
    def squeezed(a, cache: nt.mutable_tensor):
        flat = cache.reshape((cache.shape[0], cache.shape[2]))
        _exp_into(a, flat)
        return flat.reshape(cache.shape), cache.reshape((cache.shape[0] * cache.shape[2],))

    a, cache = rand(rng, (64, 48)), np.zeros((64, 1, 48), np.float32)
    same, flat = nkicc.compile(squeezed, a, cache).run(a, cache)
    assert same is cache and flat.shape == (64 * 48,)
    close(cache[:, 0, :], np.exp(a))
    close(flat, np.exp(a).reshape(-1))

    def part(a, cache: nt.mutable_tensor):
        _exp_into(a, cache.reshape((cache.shape[0], cache.shape[2])))
        return cache[0:32]  # MARK-part

    with pytest.raises(NkiccError) as e:
        nkicc.compile(part, a, cache)
    check_error(e, "E104", "MARK-part", "test_library_constructs.py")
    assert "a part of its argument cache" in e.value.message


def test_returning_two_arguments_and_a_new_tensor(rng):
    @nkicc.jit
    def two(a, b, a_out, b_out):
        _exp_into(a, a_out)
        _exp_into(b, b_out)
        s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        _exp_into(a, s)
        return a_out, b_out, s

    a, b = rand(rng, (32, 16)), rand(rng, (32, 16))
    a_out, b_out = np.zeros_like(a), np.zeros_like(b)
    ra, rb, s = two(a, b, a_out, b_out)
    assert ra is a_out and rb is b_out
    close(a_out, np.exp(a))
    close(b_out, np.exp(b))
    close(s, np.exp(a))


def test_an_unwritten_argument_returned_is_unchanged(rng):
    @nkicc.jit
    def passthrough(a, out):
        _exp_into(a, out)
        return out, a

    a, out = rand(rng, (16, 16)), np.zeros((16, 16), np.float32)
    r_out, r_a = passthrough(a.copy(), out)
    close(r_out, np.exp(a))
    close(r_a, a)


def test_a_multi_core_kernel_writes_its_argument_in_place(rng):
    """kernel[2]: each core writes its half of an output the caller passed in."""
    @nkicc.jit
    def halves(a, out):
        half = a.shape[0] // 2
        pid = nl.program_id(0)
        t = nl.ndarray((half, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[pid * half:(pid + 1) * half, :])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[pid * half:(pid + 1) * half, :], src=t)
        return out

    a, out = rand(rng, (64, 32)), np.zeros((64, 32), np.float32)
    got = halves[2](a, out)
    close(got, np.exp(a))
    close(out, np.exp(a))


def test_returning_part_of_an_argument_is_one_line(rng):
    @nkicc.jit
    def part(a, out):
        _exp_into(a, out)
        return out[0:8, :]  # PART

    with pytest.raises(nkicc.NkiccError) as e:
        part(rand(rng, (16, 16)), np.zeros((16, 16), np.float32))
    check_error(e, "E104", "# PART", "test_library_constructs.py")


# --- .ap(dtype=) and view(dtype): the same bytes as another dtype ---------------------------

fp8 = nl.float8_e4m3


def _bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint8)


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_ap_dtype_reads_sbuf_bytes_as_fp8(rng, simulator):
    """As rmsnorm_quant stores a float32 scale per row into an fp8 output: the
    row's 4 bytes read as 4 fp8 elements."""
    import ml_dtypes

    def scales_as_fp8(x):
        P = x.shape[0]
        t = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        out = nl.ndarray((P, 8), dtype=fp8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.ap(pattern=[[8, P], [1, 8]], dtype=fp8))
        return out

    x = rand(rng, (64, 2))
    ck = nkicc.compile(scales_as_fp8, x)
    ck.simulator = simulator
    got = ck.run(x)
    want = x.view(np.dtype(ml_dtypes.float8_e4m3))
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_view_dtype_in_both_directions(rng, simulator):
    """view(int32) of a float32 HBM tensor (same width), view(bfloat16) of an SBUF
    tile (narrower) written through, and view(float32) of that back (wider)."""
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)

    def views(x, y):
        bits = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=bits, src=x.view(nl.int32))          # HBM -> HBM, read as int32
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t.view(nl.bfloat16), src=y)           # write bf16 pairs into float32 storage
        back = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=back, src=t)
        halves = nl.ndarray((y.shape[0], 6), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=halves, src=t.view(nl.bfloat16)[:, 1:y.shape[1]:2])  # odd halves: strided
        return bits, back, halves

    x = rand(rng, (32, 6))
    y = rand(rng, (32, 12)).astype(bf16)
    ck = nkicc.compile(views, x, y)
    ck.simulator = simulator
    bits, back, halves = ck.run(x, y)
    np.testing.assert_array_equal(bits, x.view(np.int32))
    np.testing.assert_array_equal(_bits(back), _bits(np.ascontiguousarray(y).view(np.float32)))
    np.testing.assert_array_equal(_bits(halves), _bits(np.ascontiguousarray(y[:, 1::2])))


def test_reinterpreting_a_row_that_does_not_split_is_one_line(rng):
    def odd(x):
        t = nl.ndarray((16, 3), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        out = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.view(nl.float32))  # ODD
        return out

    import ml_dtypes
    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(odd, rand(rng, (16, 3)).astype(ml_dtypes.bfloat16))
    check_error(e, "E140", "# ODD", "test_library_constructs.py")


# --- tile arithmetic operators -----------------------------------------------------------------

def _load(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _store(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_binary_operators_on_two_tiles_and_with_numbers(rng):
    def arith(a, b, row):
        x, y, r = _load(a), _load(b), _load(row)
        return tuple(_store(t) for t in (x + y, x - y, x * y, x / y, x + r, 2.5 - x, x * 3.0, 1.0 / y, -x,
                                         x - 0.5, 3 + x, abs(x)))

    a, b = rand(rng, (64, 32)), rand(rng, (64, 32), lo=0.5, hi=2.0)
    row = rand(rng, (64, 1))
    got = nkicc.compile(arith, a, b, row).run(a, b, row)
    want = (a + b, a - b, a * b, a / b, a + row, 2.5 - a, a * 3.0, 1.0 / b, -a, a - 0.5, 3 + a, np.abs(a))
    for g, w in zip(got, want):
        close(g, w)


def test_comparisons_give_0_1_tiles(rng):
    def cmp(a, b):
        x, y = _load(a), _load(b)
        return tuple(_store(t) for t in (x < y, x <= y, x > 0.0, x >= y, x == y, x != y, 0.25 < x))

    a = rng.integers(-3, 4, size=(32, 16)).astype(np.float32)
    b = rng.integers(-3, 4, size=(32, 16)).astype(np.float32)
    got = nkicc.compile(cmp, a, b).run(a, b)
    want = (a < b, a <= b, a > 0.0, a >= b, a == b, a != b, 0.25 < a)
    for g, w in zip(got, want):
        close(g, w.astype(np.float32))


def test_in_place_accumulation_in_a_rolled_loop(rng):
    """acc += x keeps acc's storage: the sum over a loop's iterations (a Python
    rebinding would keep only the last one in a rolled loop)."""
    def acc_rows(a):
        n = a.shape[0] // 32
        acc = nl.ndarray((32, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for i in nl.sequential_range(n):
            t = nl.ndarray((32, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[i * 32:(i + 1) * 32, :])
            acc += t
            acc *= 0.5
        acc -= 1.0
        return _store(acc)

    a = rand(rng, (128, 24))
    want = np.zeros((32, 24), np.float32)
    for i in range(4):
        want = (want + a[i * 32:(i + 1) * 32]) * 0.5
    close(nkicc.compile(acc_rows, a).run(a), want - 1.0)


def test_optional_argument_checks_keep_python_comparison(rng):
    """`t != None` / `t == None` stay Python booleans; tensors stay hashable."""
    def opt(a, b=None):
        assert a != None and not (a == None)  # noqa: E711 - as library kernels write it
        assert b == None  # noqa: E711
        x = _load(a)
        assert len({x, x}) == 1
        return _store(x + x)

    a = rand(rng, (8, 8))
    close(nkicc.compile(opt, a).run(a), a + a)


def test_operator_mistakes_are_one_line(rng):
    def hbm_acc(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        out += 1.0  # HBM_ACC
        return out

    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(hbm_acc, rand(rng, (8, 8)))
    check_error(e, "E120", "# HBM_ACC", "test_library_constructs.py")

    def bad_shape(a, b):
        x, y = _load(a), _load(b)
        x += y  # BAD_SHAPE
        return _store(x)

    with pytest.raises(nkicc.NkiccError) as e:
        nkicc.compile(bad_shape, rand(rng, (8, 1)), rand(rng, (8, 4)))
    check_error(e, "E140", "# BAD_SHAPE", "test_library_constructs.py")


# --- str() of dtypes -------------------------------------------------------------------------

def test_str_of_dtypes_is_the_plain_name(rng):
    """Kernels compare str(dtype): `str(t.dtype) == str(nl.bfloat16)`,
    `getattr(nl, str(t.dtype))`, `str(dtype) == "int32"`."""
    import ml_dtypes
    for d, name in [(nl.float32, "float32"), (nl.bfloat16, "bfloat16"), (nl.float8_e4m3, "float8_e4m3"),
                    (nl.float8_e5m2, "float8_e5m2"), (nl.int32, "int32"), (nl.uint8, "uint8"), (nl.bool_, "bool"),
                    (nl.float16, "float16"), (nl.float8_e4m3fn_x4, "float8_e4m3fn_x4")]:
        assert str(d) == name
        assert str(getattr(nl, name if name != "bool" else "bool_")) == name
    assert nl.float32 == np.float32 and nl.bfloat16 == ml_dtypes.bfloat16  # still equal to the scalar types
    assert {nl.float32: 1}[np.zeros(1, np.float32).dtype] == 1             # and hash like a numpy array's dtype

    def by_name(a, b):
        assert str(a.dtype) == str(nl.bfloat16) and str(b.dtype) == "float32"
        wide = getattr(nl, str(b.dtype))
        t = nl.ndarray(a.shape, dtype=wide, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        return _store(t)

    a = rand(rng, (16, 8)).astype(ml_dtypes.bfloat16)
    b = rand(rng, (16, 8))
    close(nkicc.compile(by_name, a, b).run(a, b), a.astype(np.float32))


# --- .ap(vector_offset=): gathers and scatters of HBM rows ------------------------------------

@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_vector_offset_gathers_and_scatters_rows(rng, simulator):
    """out[perm[i]] = 2 * table[idx[i]]: a gather of rows by an index tile, and
    a scatter through another (the MoE kernels' token gather / output store)."""
    def gather_scatter(table, idx, perm):
        T, H = table.shape
        n = idx.shape[0]
        it = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=it, src=idx)
        pt = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=pt, src=perm)
        rows = nl.ndarray((n, H), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap([[H, n], [1, H]], offset=0, vector_offset=it, indirect_dim=0))
        nisa.tensor_scalar(dst=rows, data=rows, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray((n, H), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap([[H, n], [1, H]], offset=0, vector_offset=pt, indirect_dim=0), src=rows)
        return out

    table = rand(rng, (50, 24))
    idx = rng.integers(0, 50, size=(32, 1)).astype(np.int32)
    perm = rng.permutation(32).astype(np.int32).reshape(32, 1)
    ck = nkicc.compile(gather_scatter, table, idx, perm)
    ck.simulator = simulator
    got = ck.run(table, idx, perm)
    want = np.empty((32, 24), np.float32)
    want[perm[:, 0]] = 2 * table[idx[:, 0]]
    close(got, want)


@pytest.mark.api("nisa.oob_mode", "nisa.oob_mode.skip", "nisa.oob_mode.error")
@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_vector_offset_out_of_range_rows(rng, simulator):
    """oob_mode.skip leaves the rows whose index is out of range as they were;
    with oob_mode.error (the default) an index out of range is E170 at the DMA's line."""
    def gather(table, idx, skip: bool):
        T, H = table.shape
        n = idx.shape[0]
        it = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=it, src=idx)
        rows = nl.ndarray((n, H), dtype=table.dtype, buffer=nl.sbuf)
        nisa.memset(dst=rows, value=-7.0)
        src = table.ap([[H, n], [1, H]], offset=0, vector_offset=it, indirect_dim=0)
        if skip:
            nisa.dma_copy(dst=rows, src=src, oob_mode=nisa.oob_mode.skip)
        else:
            nisa.dma_copy(dst=rows, src=src, oob_mode=nisa.oob_mode.error)  # OOB
        return _store(rows)

    table = rand(rng, (20, 8))
    idx = rng.integers(0, 20, size=(16, 1)).astype(np.int32)
    idx[3], idx[9] = 20, -1
    ck = nkicc.compile(gather, table, idx, skip=True)
    ck.simulator = simulator
    got = ck.run(table, idx)
    want = np.full((16, 8), -7.0, np.float32)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < 20)
    want[ok] = table[idx[ok, 0]]
    close(got, want)
    ck = nkicc.compile(gather, table, idx, skip=False)
    ck.simulator = simulator
    with pytest.raises(nkicc.NkiccError) as e:
        ck.run(table, idx)
    check_error(e, "E170", "# OOB", "test_library_constructs.py")


@pytest.mark.parametrize("simulator", ["machine", "reference"])
def test_vector_offset_gathers_in_a_loop(rng, simulator):
    """A gather whose index tile each iteration rewrites: the passes (licm,
    multi-buffering, alloc) must see the indices as the gather's input."""
    def gather_tiles(table, idx):
        T, H = table.shape
        n = idx.shape[0] // 32
        out = nl.ndarray((n * 32, H), dtype=table.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(n):
            it = nl.ndarray((32, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=it, src=idx[i * 32:(i + 1) * 32, :])
            rows = nl.ndarray((32, H), dtype=table.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=rows, src=table.ap([[H, 32], [1, H]], offset=0, vector_offset=it, indirect_dim=0))
            nisa.dma_copy(dst=out[i * 32:(i + 1) * 32, :], src=rows)
        return out

    table = rand(rng, (40, 16))
    idx = rng.integers(0, 40, size=(128, 1)).astype(np.int32)
    ck = nkicc.compile(gather_tiles, table, idx)
    ck.simulator = simulator
    close(ck.run(table, idx), table[idx[:, 0]])


@pytest.mark.parametrize("upper, lower", [(None, None), (0.5, None), (None, -0.25), (0.5, -0.25)])
def test_optional_clamps_pass_none_as_the_op(rng, upper, lower):
    """The NKI Library's MoE kernels clamp with `op0=nl.minimum if upper is not None else None`:
    a stage whose op is None is skipped, so no limits at all is a copy."""
    @nkicc.jit
    def clamp(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.minimum if upper is not None else None, operand0=upper,
                           op1=nl.maximum if lower is not None else None, operand1=lower)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = rand(rng, (128, 64))
    want = np.minimum(a, upper) if upper is not None else a
    want = np.maximum(want, lower) if lower is not None else want
    np.testing.assert_array_equal(clamp(a), want)
