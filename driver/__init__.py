"""nkicc: compile NKI kernels with loops kept rolled, and simulate them.

    import nkicc
    import nkicc.language as nl
    import nkicc.isa as nisa

    @nkicc.jit
    def add(a, b): ...
"""
from .ir import NkiccError  # noqa: F401  (re-exported)
from .api import CompiledKernel, JitKernel, compile, jit, run_ranks, simulate
from .specs import TensorSpec
from .sweep import tune  # Dask itself is imported when a sweep starts


__version__ = "0.1.0"
__all__ = ["CompiledKernel", "JitKernel", "NkiccError", "TensorSpec", "compile", "jit", "run_ranks", "simulate", "tune",
           "__version__"]
