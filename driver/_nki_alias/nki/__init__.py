"""`import nki` served by nkicc (installed by `nkicc run` and the kernel
loader only when no real nki package exists)."""
import sys

import nkicc
import nkicc.isa as isa
import nkicc.language as language
import nkicc.language.collectives as collectives
import nkicc.language.typing as typing

# options of the vendor's nki.jit that mean nothing to nkicc (it always compiles
# and simulates); platform_target picks the target like NEURON_PLATFORM_TARGET_OVERRIDE
_VENDOR_OPTIONS = ("mode", "show_compiler_tool_output", "additional_compile_opt", "debug_kernel",
                   "experimental_flags", "save_neff_name", "save_trace_name", "artifacts_dir")


def jit(func=None, **options):
    """`@nki.jit` / `@nki.jit(mode="simulation", platform_target="trn2", ...)`."""
    for name in _VENDOR_OPTIONS:
        options.pop(name, None)
    if "platform_target" in options:
        options["target"] = options.pop("platform_target")
    return nkicc.jit(func, **options)


simulate = nkicc.simulate


def simulate_kernel(kernel, *args, **kwargs):
    """The older spelling: `nki.simulate_kernel(kernel, *arrays)`."""
    return nkicc.simulate(kernel)(*args, **kwargs)


sys.modules[__name__ + ".language"] = language
sys.modules[__name__ + ".isa"] = isa
sys.modules[__name__ + ".typing"] = typing
sys.modules[__name__ + ".collectives"] = collectives

__all__ = ["jit", "simulate", "simulate_kernel", "language", "isa", "typing", "collectives"]
