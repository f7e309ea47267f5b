"""One definition per instruction, read by everything that needs to know one.

An `OpDef` holds, for one opcode: its public signature and trace-time rules
(`trace`, the body of the `nisa.<name>` function), which engine runs it, what
it reads beyond its inputs (an accumulating destination), IR-level rules that
must still hold after the passes (`verify`), its numpy semantics (`compute`)
and its estimated cost (`cost`, `traffic`). The tracer (nkicc.isa), the
verify/alloc/schedule passes, both simulators and the timing model read the
definition; none of them keeps a table of its own, as MLIR's ODS defines an
op once.

Definitions are grouped by family module. Families are found through the
entry-point group `nkicc.instructions` (nkicc's own families are declared in
its pyproject.toml exactly as a third-party package declares its own).
"""
from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import Callable, Iterable, Mapping

import numpy as np

from ..errors import NkiccError
from ..nodes import Access, Op, TensorDecl
from ..target import TARGET_OF_GENERATION, CostTable, Target

ENTRY_POINT_GROUP = "nkicc.instructions"
# nkicc's own families, imported when the installed metadata does not list them
# (a source tree on sys.path that was never pip-installed)
BUILTIN_FAMILIES = ("dma", "matmul", "elementwise", "reduce", "activation", "select", "control", "collectives",
                    "debug", "stats", "sort", "gather", "rng", "mx")


class TensorOperand(abc.ABC):
    """What a trace rule may ask of a tensor argument: the tracer's tensor
    class derives from this, so the rules here never import the tracer."""
    __slots__ = ()

    shape: tuple[int, ...]
    decl: TensorDecl
    access: Access
    # the NeuronCore generation of the target the kernel is traced for
    generation: int

    @property
    def buffer(self) -> str:
        return self.decl.buffer

    @property
    def name(self) -> str:
        return self.decl.name


@dataclass(frozen=True)
class Emit:
    """What a trace rule asks the tracer to emit: output and input operands
    (tensor views or constants, in the order `compute` reads them) and attributes."""
    outs: list
    ins: list
    attrs: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineState:
    """Registers an engine keeps between instructions, one value per partition
    (the Scalar Engine's reduce registers, the Vector Engine's accumulators).
    An instruction that uses them names them as an operand, so that every
    analysis sees the dependence through them like any other."""
    name: str
    dtype: str = "float32"
    partitions: int = 128
    # values per partition (a random generator's state words)
    width: int = 1
    # what the registers hold when the kernel starts; None: undefined (poison,
    # so reading them before an instruction sets them is caught like any
    # never-written memory)
    init: int | None = None

    def rows(self, count: int) -> "StateRef":
        return StateRef(self, count)


@dataclass(frozen=True)
class StateRef:
    """An operand: the first `count` partitions of an engine's registers."""
    state: EngineState
    count: int


ACT_REGS = EngineState("act.reduce_regs")
DVE_ACC = EngineState("dve.accumulators")


@dataclass(frozen=True)
class CostContext:
    """Everything a cost rule may read: tensor declarations, the target
    (clocks), the cost table (the target's own, or an override the machine
    simulator was given) and the engine the op runs on."""
    decls: Mapping[str, TensorDecl]
    target: Target
    table: CostTable
    engine: str
    ranks: int = 1  # ranks of the simulation (collectives over "all ranks")

    def ghz(self) -> float:
        t = self.target
        return {"pe": t.pe_ghz, "dve": t.dve_ghz, "act": t.act_ghz, "pool": t.pool_ghz}.get(self.engine, t.dve_ghz)

    def fixed_cycles(self, op: Op) -> int:
        """Every compute instruction: a static overhead, plus the start of an on-chip access."""
        t = self.table
        onchip = any(self.decls[a.tensor].on_chip for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access)))
        return t.fixed_cycles + (t.onchip_access_cycles if onchip else 0)

    def background_cycles(self, op: Op, defn: "OpDef") -> float:
        """The cycles of the op's cost an engine can spend while the instruction before it executes:
        the static overhead (decoded meanwhile, ARCH1 "Cost Model") and the instruction's own
        background work (`OpDef.background`)."""
        own = defn.background(op, self) if defn.background is not None else 0
        return self.fixed_cycles(op) + own

    def ns(self, cycles: float) -> float:
        return cycles / self.ghz()


def free_size(a: Access) -> int:
    """Elements per partition of an on-chip access (the first pair is the partition dim)."""
    n = 1
    for _, num in a.pattern[1:]:
        n *= num
    return n


def partitions(a: Access) -> int:
    return a.pattern[0][1] if a.pattern else 1


def _elementwise_cost(op: Op, ctx: CostContext) -> float:
    """Vector / Scalar / GpSimd streaming cost: max(elementwise_min, N) cycles, N elements per partition."""
    out = op.outs[0] if op.outs else None
    ins = [a for a in op.ins if isinstance(a, Access)]
    n = free_size(out) if out is not None else (free_size(ins[0]) if ins else 1)
    return ctx.ns(ctx.fixed_cycles(op) + max(ctx.table.elementwise_min, n))


def _never(op: Op) -> bool:
    return False


@dataclass(frozen=True)
class OpDef:
    """One instruction. `trace(*args, **kwargs) -> Emit` is the public
    function's body (its signature and docstring are the public API);
    `compute(op, read) -> [(output index, values)]` the numpy semantics;
    `cost(op, CostContext) -> ns`; `traffic(op, decls) -> bytes` for DMAs."""
    name: str
    family: str
    trace: Callable[..., Emit]
    compute: Callable
    engine: str | Callable[[Op, Mapping[str, TensorDecl]], str] = "dve"
    cost: Callable[[Op, CostContext], float] = _elementwise_cost
    # the part of `cost` (engine cycles) the engine can spend while the instruction before it still
    # executes, beyond every instruction's static overhead (TensorE's background LoadStationary)
    background: Callable[[Op, CostContext], float] | None = None
    # the op adds into its destination, so it reads it (matmul accumulation)
    accumulates: Callable[[Op], bool] = _never
    # rules on the lowered IR that passes must not break (buffers, partner operands)
    verify: Callable[[Op, Mapping[str, TensorDecl]], None] | None = None
    traffic: Callable[[Op, Mapping[str, TensorDecl]], int] | None = None
    # the free-size limit of compute engines applies (DMAs have none)
    free_limited: bool = True
    # exported as nisa.<name>; False for what the tracer emits itself (loop control)
    public: bool = True
    # steers execution (a runtime loop's head): never removed, moved or reordered
    control: bool = False
    # across ranks: collective(op, inputs by rank, me, group) -> [(output index, values)], run by the
    # simulators through their communicator instead of `compute`
    collective: Callable | None = None
    # the public module that exports it: "isa" (nisa) or "collectives" (nki.collectives)
    module: str = "isa"
    # start_exempt(op, access): this operand has a partition-start rule of its own (checked by the
    # trace rule), not the compute engines' 0/32/64/96 one (MX scales: rows 0/4/8/12 of a quadrant)
    start_exempt: Callable[[Op, Access], bool] | None = None
    # the first NeuronCore generation that has it (the reference's "available only on
    # NeuronCore-vN and newer"); the tracer refuses it for older targets (E135)
    since: int = 2
    # how the machine simulator runs many iterations of the op at once (simulator/batched.py);
    # None: only one at a time
    batched: "Batched | None" = None

    @property
    def doc(self) -> str:
        return (self.trace.__doc__ or "").strip()

    def engine_of(self, op: Op, decls: Mapping[str, TensorDecl]) -> str:
        return self.engine if isinstance(self.engine, str) else self.engine(op, decls)


def instruction(*, family: str, compute: Callable, engine="dve", cost: Callable | None = None,
                accumulates: Callable | None = None, verify: Callable | None = None,
                traffic: Callable | None = None, free_limited: bool = True,
                public: bool = True, control: bool = False, collective: Callable | None = None,
                module: str = "isa", start_exempt: Callable | None = None,
                since: int = 2, batched: "Batched | None" = None,
                background: Callable | None = None) -> Callable[[Callable], OpDef]:
    """Decorator: the decorated function is the trace rule, its name the opcode."""
    def make(trace: Callable) -> OpDef:
        return OpDef(trace.__name__, family, trace, compute, engine, cost or _elementwise_cost, background,
                     accumulates or _never, verify, traffic, free_limited, public, control, collective, module,
                     start_exempt, since, batched)
    return make


@dataclass(frozen=True)
class Batched:
    """Many iterations of one op at once. `run(op, read, nlead, reduce)`: read(access) gives a view
    with `nlead` leading loop axes before the access's own shape; returns [(output index, values)]
    with the leading axes in `reduce` summed away (the destination does not move along them, and
    `reduces(op)` said the op may fold them). Results equal one `compute` per iteration, except
    that reduced sums are added in another order."""
    run: Callable
    reduces: Callable[[Op], bool] = _never
    # run can sum its results over loop axes whatever the op's own accumulate mode (a matmul: the
    # axes join the contraction), so a sum of its results can be computed inside it; such a run
    # takes products= (the simulator's GEMM batching, simulator/gemm.py: products(stationary views,
    # moving views, nlead, reduce, rows)), and the simulator may join instances that share operands
    # (ins[0], ins[1]) into one GEMM (simulator/matmul_groups.py)
    sums: bool = False
    # for an op that `reduces`: add its terms into the float32 destination view in place,
    # into(op, read, nlead, reduce, dst) (one pass over the destination instead of two)
    into: Callable | None = None


def _fold(x, nlead: int):
    """Leading loop axes folded into the partition axis (numbers pass through)."""
    if not isinstance(x, np.ndarray) or x.ndim <= nlead:
        return x
    return x.reshape((-1,) + x.shape[nlead + 1:])


def any_shape(compute: Callable) -> Batched:
    """For ops whose compute takes its input at any shape and returns it as it is, converted
    at most (the copies): the iterations' views as they are. Folding a strided view into
    partitions copies it, and the store then copies it again (mm2's store of E: 1.4 ms of two
    copies of 9 MB)."""
    def run(op: Op, read, nlead: int, reduce: tuple) -> list:
        assert not reduce
        return compute(op, read)
    return Batched(run)


def by_partition(compute: Callable) -> Batched:
    """For ops whose partitions are independent (every element-wise op): the
    iterations stacked along the partition axis are one bigger op."""
    def run(op: Op, read, nlead: int, reduce: tuple) -> list:
        assert not reduce
        return compute(op, lambda a: _fold(read(a), nlead))
    return Batched(run)


# --- NeuronCore generations --------------------------------------------------------------

def require_generation(have: int, need: int, what: str) -> None:
    """E135 unless the kernel's target (NeuronCore generation `have`) has `what`,
    which the reference documents as NeuronCore-v`need` and newer."""
    if have < need:
        raise NkiccError("E135", f"{what} needs NeuronCore-v{need} ({TARGET_OF_GENERATION[need]}) or newer; this "
                                 f"kernel is compiled for NeuronCore-v{have} ({TARGET_OF_GENERATION[have]})", None,
                         f"compile for --target {TARGET_OF_GENERATION[need]}, or branch on "
                         f"`nisa.get_nc_version() >= nisa.nc_version.gen{need}`")


# --- the table -----------------------------------------------------------------

_table: dict[str, OpDef] | None = None
_modules: list[object] = []  # the family modules the table came from


def _family_modules() -> Iterable[object]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    names = {ep.value for ep in eps}
    for fam in BUILTIN_FAMILIES:
        if f"{__package__}.{fam}" not in names:
            yield importlib.import_module(f"{__package__}.{fam}")
    for ep in eps:
        try:
            yield ep.load()
        except Exception as e:  # a broken third-party family must not hide the others
            raise NkiccError("E303", f"instruction family {ep.name} ({ep.value}) failed to import: {e}", None,
                             "fix or uninstall the package that provides it") from None


def table() -> dict[str, OpDef]:
    """opcode -> OpDef, loaded once per process."""
    global _table
    if _table is None:
        found: dict[str, OpDef] = {}
        for mod in _family_modules():
            _modules.append(mod)
            for d in vars(mod).values():
                if isinstance(d, OpDef):
                    other = found.get(d.name)
                    if other is not None and other is not d:
                        raise NkiccError("E303", f"instruction {d.name} is defined by both {other.family} "
                                                 f"and {d.family}", None, "uninstall one of the two packages")
                    found[d.name] = d
        _table = found
    return _table


def initial_state(name: str) -> int | None:
    """The value the engine registers `name` (a state tensor) hold at kernel
    start, from the EngineState a family module declares; None: undefined."""
    table()
    for mod in _modules:
        for v in vars(mod).values():
            if isinstance(v, EngineState) and v.name == name:
                return v.init
    return None


def family_files() -> list[tuple[str, str | None]]:
    """(module, source file) of every instruction family loaded: what a cache
    key must cover besides nkicc's own source."""
    table()
    return [(m.__name__, getattr(m, "__file__", None)) for m in _modules]


def get(opcode: str) -> OpDef:
    d = table().get(opcode)
    if d is None:
        raise NkiccError("E900", f"no definition for instruction {opcode!r}", None,
                         "install the package that defines it")
    return d


def of(op: Op) -> OpDef:
    return get(op.opcode)
