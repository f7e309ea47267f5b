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
from ops_helpers import check_error, close, rand


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
