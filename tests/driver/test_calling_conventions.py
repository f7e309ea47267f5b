"""How a kernel is called, as the vendor's simulator defines it: numpy arrays
or framework tensors in, the same kind out; inputs the kernel writes updated
in place; the quick start of nki.simulate unchanged."""
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import nkicc
from nkicc._nki_alias import nki
import nkicc.isa as nisa
import nkicc.language as nl


@nki.jit
def add_kernel(a_ptr, b_ptr):
    # the vendor's quick-start kernel, written the same way
    a = nl.load(a_ptr)
    b = nl.load(b_ptr)
    result = nl.add(a, b)
    out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=result)
    return out


def test_simulate_quick_start_with_numpy(rng):
    a = rng.random((128, 512)).astype(np.float32)
    b = rng.random((128, 512)).astype(np.float32)
    result = nki.simulate(add_kernel)(a, b)
    assert isinstance(result, np.ndarray)
    np.testing.assert_allclose(result, a + b, rtol=1e-5)


def test_simulate_quick_start_with_jax_arrays(rng):
    jnp = pytest.importorskip("jax.numpy")
    a = rng.random((128, 512)).astype(np.float32)
    b = rng.random((128, 512)).astype(np.float32)
    result = nki.simulate(add_kernel)(jnp.asarray(a), jnp.asarray(b))
    assert type(result).__module__.startswith(("jax", "jaxlib"))  # the caller's framework back
    np.testing.assert_allclose(np.asarray(result), a + b, rtol=1e-5)


def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    a = rng.random((64, 32)).astype(np.float32)
    b = rng.random((64, 32)).astype(np.float32)
    result = add_kernel(torch.from_numpy(a), torch.from_numpy(b))
    assert isinstance(result, torch.Tensor)
    np.testing.assert_allclose(result.numpy(), a + b, rtol=1e-5)


def test_an_input_the_kernel_writes_is_updated_in_place(rng):
    @nkicc.jit
    def scale_in_place(x):
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nl.store(x, value=t)                     # writes its own input
        nl.store(out, value=t[0:1, 0:1])
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    before = x.copy()
    out = scale_in_place(x)
    np.testing.assert_allclose(x, 3 * before, rtol=1e-6)
    np.testing.assert_allclose(out, 3 * before[0:1, 0:1], rtol=1e-6)


@nkicc.jit
def update_row(cache, row, idx):
    """A KV-cache update: one row of a large argument written, the rest untouched."""
    t = nl.ndarray((1, cache.shape[1]), dtype=cache.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=row)
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=cache[idx:idx + 1, :], src=t)
    return row


def _peak_traced_bytes(call) -> int:
    import tracemalloc
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("cores", [1, 2])
def test_a_written_argument_is_updated_without_a_copy_of_it(rng, cores):
    """The simulation writes the caller's own array when it can (contiguous, writeable, in
    the storage dtype): memory does not grow by a second KV cache, and the result is the same.
    (Oracle for the memory: the same call on a cache 8x smaller; a run's own arrays, SBUF and
    PSUM, are the same for both.)"""
    kernel = update_row if cores == 1 else update_row[cores]
    peaks = []
    for rows in (1024, 8192):
        cache = rng.standard_normal((rows, 512)).astype(np.float32)  # 2 and 16 MiB
        row = rng.standard_normal((1, 512)).astype(np.float32)
        expect = cache.copy()
        expect[37] = np.exp(row[0])
        kernel(cache.copy(), row, 37)  # compiled and warmed: the measured call allocates only what a run needs
        peaks.append(_peak_traced_bytes(lambda: kernel(cache, row, 37)))
        np.testing.assert_allclose(cache, expect, rtol=1e-6)
    grew, cache_grew = peaks[1] - peaks[0], 7 * 1024 * 512 * 4
    assert grew < cache_grew // 2, (peaks, cache_grew)


def test_a_strided_written_argument_is_still_updated_in_place(rng):
    backing = rng.standard_normal((64, 512)).astype(np.float32)
    cache = backing[:, ::2]  # not contiguous: simulated on a copy, the copy written back
    row = rng.standard_normal((1, 256)).astype(np.float32)
    expect = cache.copy()
    expect[5] = np.exp(row[0])
    update_row(cache, row, 5)
    np.testing.assert_allclose(cache, expect, rtol=1e-6)
    np.testing.assert_array_equal(backing[:, 1::2], backing[:, 1::2].copy())


def test_an_argument_that_aliases_the_written_one_reads_the_values_from_before(rng):
    """The same array passed twice: the argument read must not see the kernel's writes to the
    other (numpy's semantics of a copy in, as every simulator gave before in-place runs)."""
    @nkicc.jit
    def shift_rows(src, dst):
        t = nl.ndarray((src.shape[0] - 1, src.shape[1]), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[0:src.shape[0] - 1, :])
        nisa.dma_copy(dst=dst[1:dst.shape[0], :], src=t)
        return src

    a = rng.standard_normal((32, 16)).astype(np.float32)
    expect = a.copy()
    expect[1:] = a[:-1]
    shift_rows(a, a)
    np.testing.assert_array_equal(a, expect)


def test_simulations_in_threads_restore_numpys_page_setting():
    """small_pages(): off while any simulation runs, the setting from outside after the last."""
    import threading
    from nkicc.simulator import scratch
    if scratch._set_huge_pages is None:
        pytest.skip("this numpy has no huge-page switch")

    def current() -> bool:
        was = scratch._set_huge_pages(True)
        scratch._set_huge_pages(was)
        return was

    outside = current()
    inside, first_in, second_out = [], threading.Event(), threading.Event()

    def first():
        with scratch.small_pages():
            first_in.set()
            second_out.wait(5)
            inside.append(current())  # the second left first: still off for this one

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(5)
    with scratch.small_pages():
        inside.append(current())
    second_out.set()
    t.join()
    assert inside == [False, False]
    assert current() == outside


def test_never_written_memory_is_nan_for_floats_and_4_for_integers():
    from nkicc.simulator.semantics import poison_value
    assert np.isnan(poison_value(np.dtype(np.float32)))
    assert poison_value(np.dtype(np.int32)) == 4 and poison_value(np.dtype(np.uint8)) == 4


@pytest.mark.parametrize("gen,target", [("gen2", "trn1"), ("gen3", "trn2"), ("gen4", "trn3")])
def test_platform_override_takes_generation_names(monkeypatch, gen, target):
    from nkicc.api import resolve_target
    from nkicc.passes import registry
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", gen)
    assert resolve_target(None, registry()).name == target


_FAULTS = '''
import resource

import numpy as np
from nkicc.simulator import scratch

def faults():
    # a simulation's temporaries: several 8 MiB arrays made and freed together, again and again
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):
        a, b, c = (np.full(1 << 20, k, dtype=np.float64) for k in range(3))
        del a, b, c
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(faults(), scratch.keep_freed_memory(), faults())
'''


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's allocator settings")
def test_freed_temporaries_are_reused_not_faulted_in_again():
    """keep_freed_memory(): after it, arrays made and freed again and again reuse the same
    pages; before it, glibc gave them back to the kernel and each new one faulted its pages
    in (the oracle is the kernel's own count of the process's page faults). With
    NKICC_KEEP_FREED_MEMORY=0 the allocator is left as it is."""
    def run(**env):
        out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, check=True,
                             env={**os.environ, "NKICC_CACHE": "0", **env}).stdout.split()
        return int(out[0]), out[1] == "True", int(out[2])

    before, kept, after = run()
    assert kept and before > 20 * 2048 and after < before / 10, (before, after)
    # a Dask worker's process (and what it starts) has MALLOC_TRIM_THRESHOLD_=65536 from the nanny
    before, kept, after = run(MALLOC_TRIM_THRESHOLD_="65536")
    assert kept and before > 20 * 2048 and after < before / 10, (before, after)
    before, kept, after = run(NKICC_KEEP_FREED_MEMORY="0")
    assert not kept and after > before / 2, (before, after)
