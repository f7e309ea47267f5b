"""nkicc.simulator: runs compiled kernels in numpy."""
from .reference import ReferenceMachine, run_reference

__all__ = ["ReferenceMachine", "run_reference"]
