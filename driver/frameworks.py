"""Framework tensors at a kernel's boundary: torch and JAX arrays come in as
numpy arrays (through __array__, on the CPU) and the result goes back as the
framework's own type, as the vendor's simulator does. Neither framework is
imported unless the caller passed one of its tensors."""
from __future__ import annotations

import numpy as np


def _kind(x) -> str | None:
    module = type(x).__module__ or ""
    if module.startswith("torch") and hasattr(x, "detach"):
        return "torch"
    if module.startswith(("jax", "jaxlib")) and hasattr(x, "__array__"):
        return "jax"
    return None


def detect(args: tuple, kwargs: dict) -> str | None:
    """The framework of the first framework tensor among the arguments."""
    for x in list(args) + list(kwargs.values()):
        kind = _kind(x)
        if kind is not None:
            return kind
    return None


def _numpy(x):
    kind = _kind(x)
    if kind == "torch":
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bf16: go through fp32, exactly
            import ml_dtypes
            return t.float().numpy().astype(ml_dtypes.bfloat16)
        return t.numpy()
    if kind == "jax":
        return np.asarray(x)
    return x


def to_numpy(values):
    if isinstance(values, dict):
        return {k: _numpy(v) for k, v in values.items()}
    return tuple(_numpy(v) for v in values)


def _back(a, kind: str):
    if not isinstance(a, np.ndarray):
        return a
    if kind == "jax":
        import jax.numpy as jnp
        return jnp.asarray(a)
    import torch
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def convert_result(result, kind: str):
    if isinstance(result, tuple):
        return tuple(_back(r, kind) for r in result)
    return _back(result, kind)
