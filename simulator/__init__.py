"""nkicc.simulator: runs compiled kernels in numpy.

- MachineSimulator (machine.py): the lowered program on a NeuronCore model:
  physical SBUF/PSUM at the allocator's addresses, engines and DMA queues with
  the schedule's semaphores, estimated timing (timing.py), hazard checks,
  SimReport (report.py), Perfetto traces (trace.py).
- ReferenceMachine / run_reference (reference.py): the IR interpreter, one flat
  array per tensor; the oracle the machine is tested against.
"""
from .machine import MachineSimulator, simulate_machine
from .reference import ReferenceMachine, run_reference
from .report import SimReport

__all__ = ["MachineSimulator", "ReferenceMachine", "SimReport", "run_reference", "simulate_machine"]
