"""How a kernel is called, as the vendor's simulator defines it: numpy arrays
or framework tensors in, the same kind out; inputs the kernel writes updated
in place; the quick start of nki.simulate unchanged."""
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
