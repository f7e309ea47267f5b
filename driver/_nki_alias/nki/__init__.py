"""`import nki` served by nkicc (installed by `nkicc run` and the kernel
loader only when no real nki package exists)."""
import sys

import nkicc
import nkicc.isa as isa
import nkicc.language as language
import nkicc.language.collectives as collectives
import nkicc.language.typing as typing
from nkicc.language.tensor import unsupported_name as _unsupported_name
from nkicc.language.userframes import caller_loc as _caller_loc

# options of the vendor's nki.jit that mean nothing to nkicc (it always compiles
# and simulates); platform_target picks the target like NEURON_PLATFORM_TARGET_OVERRIDE
_VENDOR_OPTIONS = ("mode", "show_compiler_tool_output", "show_compiler_tb", "additional_compile_opt",
                   "debug_kernel", "experimental_flags", "save_neff_name", "save_trace_name", "artifacts_dir")
# nkicc's own jit options, also accepted under `import nki`
_NKICC_OPTIONS = ("enable_passes", "disable_passes", "opt_level", "target", "passes", "unroll", "cache", "dialect")


def jit(fn=None, **options):
    """`@nki.jit` / `@nki.jit(mode="simulation", platform_target="trn2", ...)`."""
    for name in _VENDOR_OPTIONS:
        options.pop(name, None)
    if "platform_target" in options:
        options["target"] = options.pop("platform_target")
    unknown = [k for k in options if k not in _NKICC_OPTIONS]
    if unknown:
        raise nkicc.NkiccError("E160", f"nki.jit option {unknown[0]}= is not supported by nkicc", _caller_loc(),
                         f"nkicc takes {', '.join(_NKICC_OPTIONS + _VENDOR_OPTIONS)}")
    return nkicc.jit(fn, **options)


simulate = nkicc.simulate


class dtype:
    """`nki.dtype`: what kernels annotate dtype parameters with
    (`index_dtype: nki.dtype = nl.int32`). For annotations only: nkicc's
    dtypes (`nl.float32`, ...) are numpy and ml_dtypes types, not instances of it."""


def simulate_kernel(kernel, *args, **kwargs):
    """The older spelling: `nki.simulate_kernel(kernel, *arrays)`."""
    return nkicc.simulate(kernel)(*args, **kwargs)


sys.modules[__name__ + ".language"] = language
sys.modules[__name__ + ".isa"] = isa
sys.modules[__name__ + ".isa.constants"] = isa.constants
sys.modules[__name__ + ".typing"] = typing
sys.modules[__name__ + ".collectives"] = collectives

__all__ = ["jit", "simulate", "simulate_kernel", "language", "isa", "typing", "collectives", "dtype"]


def __getattr__(name: str):
    # `nki.NAME` nkicc lacks: E160 at the kernel's line (and an AttributeError for hasattr, an
    # ImportError for `from nki import NAME`), as for nl.NAME and nisa.NAME
    if name.startswith("_"):
        raise AttributeError(f"module 'nki' has no attribute {name!r}")
    raise _unsupported_name("nki", name)
