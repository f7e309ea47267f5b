"""`import nki` served by nkicc (installed by `nkicc run` and the kernel
loader only when no real nki package exists)."""
import sys

import nkicc
import nkicc.isa as isa
import nkicc.language as language

jit = nkicc.jit
simulate = nkicc.simulate

sys.modules[__name__ + ".language"] = language
sys.modules[__name__ + ".isa"] = isa

__all__ = ["jit", "simulate", "language", "isa"]
