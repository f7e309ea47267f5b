"""nkicc: compile NKI kernels with loops kept rolled, and simulate them.

    import nkicc
    import nkicc.language as nl
    import nkicc.isa as nisa

    @nkicc.jit
    def add(a, b): ...
"""
from .ir import NkiccError  # noqa: F401  (re-exported)
from .api import CompiledKernel, JitKernel, compile, jit, simulate
from .specs import TensorSpec


def tune(kernel, sweeps, **options):
    """Sweep a kernel's constants on a Dask cluster; see nkicc.tune.tune (imported
    on first use: Dask is not loaded by `import nkicc`)."""
    from .tune import tune as _tune
    return _tune(kernel, sweeps, **options)


__version__ = "0.1.0"
__all__ = ["CompiledKernel", "JitKernel", "NkiccError", "TensorSpec", "compile", "jit", "simulate", "tune", "__version__"]
