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
