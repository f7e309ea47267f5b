"""The meeting point of the ranks of one multi-rank simulation.

Every rank runs its own simulator (its own SBUF and PSUM) in its own thread.
A collective instruction calls `exchange`: the rank leaves its inputs and the
time it is ready, and waits until every rank of its group has arrived at the
same call (the n-th collective this group makes); each then gets every
rank's inputs and the time the last one was ready. A rank that arrives at a
different instruction, or finishes while the others wait for it, is a
one-line error (E191) naming both calls.

A multi-core launch run on several ranks has ranks x cores parties: party
g is core g % cores of rank g // cores. The cores of one rank share its HBM
and meet at the core-level instructions (sendrecv, core_barrier), whose
groups name cores; every other collective's replica group names ranks, and
each core meets the same core of the other ranks (the cores of a logical
NeuronCore run one program, each its own share of the collective's work).

In lockstep (the programs of a launch that write the same HBM elements
without meeting: language/grid_races.py) the ranks also take turns, one
top-level statement each, in rank order: the order of cores that start
together, made deterministic."""
from __future__ import annotations

import contextlib
import threading

from ..ir import NkiccError, Op
from ..ir.ops.collectives import CORE_LEVEL, group_of


class Communicator:
    """Shared by the parties of one run; `for_rank(g)` is what party g's simulator holds."""

    def __init__(self, size: int, timeout_s: float = 120.0, lockstep: bool = False, cores: int = 1) -> None:
        if size % cores:
            raise ValueError(f"{size} parties are not whole ranks of {cores} cores")
        self.size = size  # parties: ranks x cores
        self.cores = cores
        self.timeout_s = timeout_s
        self.lockstep = lockstep and size > 1
        self._turn = 0  # in lockstep: the rank whose statement runs now
        self._cv = threading.Condition()
        self._calls: dict[tuple, dict[int, tuple]] = {}   # (group, n) -> rank -> (op, payload, ready)
        self._count: dict[tuple, int] = {}                 # (rank, group) -> calls so far
        self._taken: dict[tuple, int] = {}                 # (group, n) -> ranks that took its inputs
        self._done: dict[int, str] = {}                    # rank -> why it stopped
        self.error: NkiccError | None = None

    def for_rank(self, rank: int) -> "RankComm":
        return RankComm(self, rank)

    def stop(self, rank: int, why: str = "finished") -> None:
        with self._cv:
            self._done[rank] = why
            if self._turn == rank:
                self._turn = self._next(rank)
            self._cv.notify_all()

    def _next(self, rank: int) -> int:
        """The rank after `rank` that has not stopped (itself when all have)."""
        for k in range(1, self.size + 1):
            if (rank + k) % self.size not in self._done:
                return (rank + k) % self.size
        return rank

    @contextlib.contextmanager
    def turn(self, rank: int):
        """In lockstep: wait for `rank`'s turn, run one statement, pass the turn on."""
        with self._cv:
            while self._turn != rank:
                if self.error is not None:
                    raise self.error
                self._cv.wait()
        try:
            yield
        finally:
            with self._cv:
                self._turn = self._next(rank)
                self._cv.notify_all()

    def fail(self, error: NkiccError) -> None:
        with self._cv:
            if self.error is None:
                self.error = error
            self._cv.notify_all()

    def exchange(self, rank: int, group: tuple[int, ...], op: Op, payload, ready: float):
        if len(group) == 1:
            return {rank: payload}, ready
        with self._cv:
            n = self._count.get((rank, group), 0)
            self._count[(rank, group)] = n + 1
            key = (group, n)
            arrived = self._calls.setdefault(key, {})
            for other, (their, _, _) in arrived.items():
                if their.opcode != op.opcode:
                    err = _mismatch(op, rank, their, other)
                    self.error = self.error or err
                    self._cv.notify_all()
                    raise err
            arrived[rank] = (op, payload, ready)
            self._cv.notify_all()
            while len(arrived) < len(group):
                if self.error is not None:
                    raise self.error
                gone = [r for r in group if r in self._done and r not in arrived]
                if gone:
                    err = NkiccError("E191", f"{op.opcode}: rank {gone[0]} {self._done[gone[0]]} without joining "
                                             f"the call rank {rank} waits in (its call {n + 1} in group "
                                             f"{list(group)})", op.loc,
                                     "every rank of a group must make the same collective calls in the same order")
                    self.error = self.error or err
                    raise err
                if not self._cv.wait(self.timeout_s):
                    raise NkiccError("E191", f"{op.opcode}: ranks {[r for r in group if r not in arrived]} never "
                                             f"joined (waited {self.timeout_s:.0f} s)", op.loc,
                                     "every rank of a group must make the same collective calls")
            inputs = {r: p for r, (_, p, _) in arrived.items()}
            start = max(t for _, _, t in arrived.values())
            # the last rank of the group to take the call's inputs lets them go (a run makes a call per
            # layer and block: kept, every payload of the run stayed in memory, 5 GB in the library's MoE)
            taken = self._taken[key] = self._taken.get(key, 0) + 1
            if taken == len(group):
                del self._calls[key], self._taken[key]
            return inputs, start


def _mismatch(op: Op, rank: int, their: Op, other: int) -> NkiccError:
    return NkiccError("E191", f"rank {rank} calls {op.opcode} (line {op.loc.line if op.loc else '?'}) where rank "
                              f"{other} calls {their.opcode} (line {their.loc.line if their.loc else '?'})", op.loc,
                      "every rank of a group must make the same collective calls in the same order")


class RankComm:
    """One party's handle on the communicator: core `core` of rank `rank`."""

    def __init__(self, comm: Communicator, party: int) -> None:
        self.comm = comm
        self.party = party
        self.rank, self.core = divmod(party, comm.cores)
        self.size = comm.size // comm.cores  # ranks
        self.cores = comm.cores

    def group(self, op: Op) -> tuple[int, tuple[int, ...]]:
        """(this party's index, the group it meets) in the space the op's groups name: its core
        among the rank's cores for the core-level instructions, else its rank among the ranks."""
        me, size = (self.core, self.cores) if op.opcode in CORE_LEVEL else (self.rank, self.size)
        return me, group_of(op, me, size)

    def exchange(self, group, op: Op, payload, ready: float):
        """Meet `group` (indices as `group` gives them); the inputs come back by those indices."""
        if op.opcode in CORE_LEVEL:
            parties = tuple(self.rank * self.cores + c for c in group)
        else:
            parties = tuple(r * self.cores + self.core for r in group)
        inputs, start = self.comm.exchange(self.party, parties, op, payload, ready)
        index = dict(zip(parties, group))
        return {index[p]: v for p, v in inputs.items()}, start

    def check(self) -> None:
        """Raise the run's error, if a party or the caller (stopping the run) reported one: a
        party between meetings stops here (each iteration of a top-level loop) instead of
        running to its end."""
        if self.comm.error is not None:
            raise self.comm.error

    def step(self):
        """The context one top-level statement runs in: this party's turn in lockstep."""
        return self.comm.turn(self.party) if self.comm.lockstep else contextlib.nullcontext()

    @property
    def lockstep(self) -> bool:
        return self.comm.lockstep


def single() -> RankComm:
    """The communicator of an ordinary, one-rank simulation."""
    return Communicator(1).for_rank(0)
