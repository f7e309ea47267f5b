"""nki.collectives (`import nki.collectives as cc`): communication between the
ranks of a multi-rank run (`nkicc.run_ranks`, `nkicc run --ranks N`).

The operations are made from their definitions in nkicc.ir.ops.collectives,
as nisa's are; rank_id() and the ring's processing rank are registers."""
from __future__ import annotations

from ..ir import NkiccError, ops
from ..ir.ops.collectives import groups_attr
from .control import VirtualRegister, _new_register
from .emit import emit_internal, function
from .tracing import user_loc


class ReplicaGroup:
    """Groups of ranks that take part in a collective together: a list of rank
    lists, no rank in two (ReplicaGroup([[0, 1], [2, 3]])); with no lists,
    every rank of the run is one group."""

    def __init__(self, rank_lists=None) -> None:
        self.rank_lists = None if rank_lists is None else [list(g) for g in rank_lists]
        try:
            groups_attr(self.rank_lists)
        except NkiccError as e:
            e.loc = e.loc or user_loc(2)
            raise

    def __iter__(self):
        return iter(self.rank_lists or [])

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.rank_lists})"


def rank_id(name=None) -> VirtualRegister:
    """This rank's id, in a register."""
    reg = _new_register("nki.collectives.rank_id")
    emit_internal("rank_register", reg, loc=user_loc(2))
    return reg


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0, name=None):
    """The rank whose data a ring step of collective_permute_implicit holds
    after `iteration_id` steps (this rank's own at 0), in a register."""
    reg = _new_register("nki.collectives.collective_permute_implicit_current_processing_rank_id")
    emit_internal("processing_rank_register", reg, iteration_id, replica_group, loc=user_loc(2))
    return reg


def _export() -> list[str]:
    names = []
    for d in ops.table().values():
        if d.public and d.module == "collectives":
            globals()[d.name] = function(d.name)
            names.append(d.name)
    return names


__all__ = sorted(_export() + ["ReplicaGroup", "rank_id", "collective_permute_implicit_current_processing_rank_id"])
