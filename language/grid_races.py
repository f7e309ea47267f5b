"""Programs of one launch that write the same elements of a shared tensor (W191).

The programs of a launch grid run at once, one per core, and share the
kernel's HBM: its arguments and its `nl.shared_hbm` tensors. A write whose
address does not depend on the program id is made by every program to the
same elements. Where the kernel also writes that tensor elsewhere (each
program fills the whole output, then stores its own rows: the NKI Library's
cascaded_max tests), what the tensor ends with depends on which program
writes last, which the hardware's timing decides: cores that start together
all fill before any of them stores. nkicc runs such a launch the same way, its
programs side by side, one top-level statement of each in turn
(driver/api.py, simulator/comm.py), and says so with W191.

Read from the traced kernel, where the grid is an outer static loop per axis
(language/spmd.py); a grid that was traced program by program (a kernel that
branches on its program id) is not checked."""
from __future__ import annotations

from ..ir import Kernel, Loop, NkiccError, Op
from .tracing import GRID


def _grid_body(kernel: Kernel) -> tuple[set[str], list]:
    """(the program-id variables, the statements inside the grid loops)."""
    grid_vars: set[str] = set()
    stmts = list(kernel.body.stmts)
    while True:
        loops = [s for s in stmts if isinstance(s, Loop) and s.loc is not None and s.loc.file == GRID]
        if len(loops) != 1:
            return (grid_vars, stmts) if grid_vars else (set(), [])
        grid_vars.add(loops[0].var)
        stmts = list(loops[0].body.stmts)


def grid_races(kernel: Kernel) -> list[NkiccError]:
    """W191 at each write every program makes to the same elements of a shared tensor that
    the kernel also writes elsewhere."""
    grid_vars, body = _grid_body(kernel)
    if not grid_vars:
        return []
    shared = {t.name for t in kernel.tensors if t.buffer == "shared_hbm" or t.role == "arg"}
    writes: dict[str, list[tuple[Op, bool]]] = {}
    for stmt in body:
        for op in ([stmt] if isinstance(stmt, Op) else stmt.body.walk() if isinstance(stmt, Loop) else ()):
            if not isinstance(op, Op):
                continue
            for a in op.outs:
                if a.tensor in shared:
                    same = a.scalar is None and a.vector is None and not {v for v, _ in a.offset.terms} & grid_vars
                    writes.setdefault(a.tensor, []).append((op, same))
    warnings = []
    for tensor, made in writes.items():
        if len(made) < 2:
            continue  # one write, the same for every program: the same values, whoever is last
        for op, same in made:
            if same:
                warnings.append(NkiccError(
                    "W191", f"every program of the launch writes the same elements of {tensor} here, and the "
                            f"kernel writes {tensor} elsewhere too: which program writes last is the cores' "
                            "timing; nkicc runs the programs side by side, a top-level statement of each in turn, "
                            "as cores that start together do", op.loc,
                    "give each program its own part (index it by nl.program_id), or have one program do it"))
                break
    return warnings
