"""`import neuronxcc.nki...`, the package path NKI had inside the Neuron
compiler before it became `nki`, served by the same alias as `import nki`
(only on the alias path, so a real neuronxcc is never shadowed)."""
import sys

import nki

for _sub in ("", ".language", ".isa", ".isa.constants", ".typing", ".collectives"):
    sys.modules[__name__ + ".nki" + _sub] = sys.modules["nki" + _sub]

__all__ = ["nki"]
