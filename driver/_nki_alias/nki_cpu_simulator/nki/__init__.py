"""`nki_cpu_simulator.nki`: what the suite's simulation mode puts behind `nki`.

The suite replaces `sys.modules["nki"]` (and `nki.language`, `nki.isa`,
`nki.typing`, `nki.compiler`, `nki.dtype`, `nki.tensor`) with this package's
modules, sets `builtins.builtin` to its `builtin`, and calls
`nki.cpu_simulate(kernel)[lnc](**inputs)`. Here every one of them is nkicc's:
the `nki` alias's names, `cpu_simulate` (nkicc.suite: compile and simulate,
values only), and the modules the vendor's simulator has (`builtin`,
`compiler`, `tensor`, `language.dtypes`)."""
import sys

import nki as _nki
import nkicc.language.dtypes as _dtypes
from nkicc.suite import cpu_simulate

from . import builtin, compiler, tensor

language = _nki.language
isa = _nki.isa
typing = _nki.typing
collectives = _nki.collectives
jit = _nki.jit
simulate = _nki.simulate
simulate_kernel = _nki.simulate_kernel
dtype = _dtypes  # `nki.dtype.float8_e4m3` as the suite reaches it, and the annotation `x: nki.dtype`

for _sub, _module in (("language", language), ("language.dtypes", _dtypes), ("isa", isa),
                      ("isa.constants", isa.constants), ("typing", typing), ("collectives", collectives)):
    sys.modules[__name__ + "." + _sub] = _module

__all__ = ["cpu_simulate", "builtin", "compiler", "tensor", "language", "isa", "typing", "collectives", "jit",
           "simulate", "simulate_kernel", "dtype"]


def __getattr__(name: str):
    return getattr(_nki, name)  # every other name as `import nki` answers it (E160 for one nkicc lacks)
