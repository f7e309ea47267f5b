"""The machine simulator: runs a lowered program on a model of one NeuronCore.

Memory is physical. SBUF and PSUM are byte arrays of the target's size
(partitions x bytes per partition); an on-chip tensor lives at the byte
`address` the allocator gave it, in partitions [0, shape[0]) - so two live
tensors that the allocator let overlap clobber each other, and the result is
wrong. HBM tensors are flat numpy arrays. New memory is poisoned (NaN; ints: a
sentinel) at its Alloc; PSUM keeps a written-mask per element (its first byte)
for the nc_matmul accumulate=None rule. Loops run rolled (static and dynamic
alike; a dynamic loop's index is its register). The arithmetic is
simulator/semantics.py, shared with the reference interpreter.

Functional execution is sequential in program order. Timing is computed
alongside (timing=True): the walk has the timing model (timing.py: engines,
DMA queues, costs, the clock state) time each instruction as it runs, and
checks its hazards (hazards.py). A read that starts before the write it reads
has finished (and, with hazards="all", a write that starts before an earlier
read or write of the same bytes has finished) is error E171 naming both
instructions: a missing semaphore.
A loop nest that ran batched is timed afterwards without data, and a loop
whose timing repeats skips whole periods in closed form (periodic.py).

    outputs, report = MachineSimulator(kernel, target, timing=True, trace="t.json").run(inputs)
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..ir import Access, Alloc, Const, Kernel, Loop, NkiccError, Op, TensorDecl
from ..ir import dtypes
from ..ir import ops
from ..ir.ops import debug
from ..ir.analysis import engine_of, injective, reads, runtime_guard, tensors_touched, writes, written_args
from ..ir import numerics
from . import batched, oob_skip, periodic, semantics
from .cpushare import CpuShare
from ._blas import single_threaded_blas
from .reference import ReferenceMachine, gather_index
from .hazards import HazardChecks
from .scratch import Scratch
from .report import DMA_DIRECTIONS, EngineStats, SimReport
from .timing import CHAINED_ENGINES
from ..ir.ops.collectives import payload as collective_payload
from ..ir.ops.dma import engine_share
from .comm import RankComm, single
from .program import Acc, Plan, Tensor
from .timing import COMPUTE_ENGINES, CostTable, cost_ns, traffic_bytes
from .timing import ClockState, TimingModel
from .trace import DEFAULT_MAX_EVENTS, TraceRecorder, loop_label

_accumulate = ReferenceMachine._accumulate  # the accumulate=None rule, one implementation
_INF = float("inf")
_VIEW_CACHE = 512         # cached views per access (distinct start offsets)


def _background_ns(op: Op, engine: str, m) -> float:
    """The part of a compute instruction's cost its engine can spend while the instruction before
    it executes (CostContext.background_cycles)."""
    if engine not in COMPUTE_ENGINES:
        return 0.0
    ctx = ops.CostContext(m.decls, m.target, m.costs, engine, m.comm.size)
    return ctx.ns(ctx.background_cycles(op, ops.of(op)))


def _static_ns(engine: str, m) -> float:
    """A compute instruction's static overhead (the cost table's fixed_cycles) on its engine."""
    return ops.CostContext(m.decls, m.target, m.costs, engine, m.comm.size).ns(m.costs.fixed_cycles)


class MachineSimulator(HazardChecks):
    """Simulate a lowered kernel. `target` is a nkicc Target (clocks, buffer
    sizes, DMA bandwidth). timing=False runs the functional model only (no
    times, no hazard checks: fastest). trace: a path for a Perfetto / Chrome
    trace JSON file, or True to keep the events (`self.tracer`) without writing
    them. hazards: "all" (read-after-write, write-after-read and
    write-after-write), "raw" (reads only) or "off"; programs without op ids
    (not scheduled) are never hazard-checked. costs: a CostTable overriding
    the target's (timing.py). precise: NKI_PRECISE_FP (None reads the
    environment now); off holds every float tensor as float32, so on-chip
    memory is modelled `scale` times larger (every device byte is `scale`
    bytes, enough for a float32 in each bf16/fp8 element): addresses, overlaps
    and hazards keep their device layout. closed_form: time the iterations of
    a batched loop whose timing repeats in closed form, whole periods at once
    (periodic.py; the same estimate up to float rounding); False walks every
    instruction. reuse_timing: a program that reads no register (no runtime
    offset or loop) times the same on any data, so only its first successful
    timed run is timed and later runs reuse that timing; False times every run."""

    def __init__(self, kernel: Kernel, target, timing: bool = True, trace=False, hazards: str = "all",
                 costs: CostTable | None = None, max_trace_events: int = DEFAULT_MAX_EVENTS,
                 comm: RankComm | None = None, precise: bool | None = None, batch: bool = True,
                 verdicts: dict | None = None, closed_form: bool = True, reuse_timing: bool = True) -> None:
        if isinstance(target, str):
            raise TypeError("MachineSimulator needs a Target object (nkicc.plugins.targets.TRN2, or the "
                            "driver's resolve_target(name)), not a name")
        if hazards not in ("all", "raw", "off"):
            raise ValueError("hazards must be 'all', 'raw' or 'off'")
        self.kernel = kernel
        self.target = target
        self.comm = comm or single()  # this rank's view of the other ranks (collectives)
        self.timing = bool(timing)
        self.trace_path = trace if isinstance(trace, str) else None
        self.tracing = bool(trace) and self.timing
        self.costs = costs or target.costs
        self.decls = kernel.tensor_map()
        self.precise = numerics.precise_from_env() if precise is None else bool(precise)
        self.scale = 1 if self.precise else max(
            [-(-dtypes.storage(d.dtype, False).itemsize // dtypes.itemsize(d.dtype))
             for d in self.decls.values() if d.on_chip] + [1])
        self.tensors = {name: Tensor(d, self.precise, self.scale) for name, d in self.decls.items()}
        self._retypes: dict[tuple[str, str], Tensor] = {}  # (name, dtype): a tensor read as another dtype
        self._cur_op: Op | None = None  # the op being executed (messages of gathers)
        self._rows = None  # its gathered rows in range, when a gather skipped some (oob_mode.skip)
        self.env: dict[str, int] = {}
        self.executed = 0
        self.plans: list[Plan] = []
        self.engines: list[str] = []      # engine / queue track names, index = ekey
        self._ekeys: dict[str, int] = {}
        self._rot_keys: list[int] = []
        self.scheduled = False
        self._all_accs: list[Acc] = []
        # loop nests run as whole-array operations where the IR allows (batched.py). With other ranks
        # or cores too: a nest holds no collective (batched.plan), so nothing meets another party
        # inside it, and the order of its writes is nobody else's to see, except where the parties
        # take turns a statement at a time (lockstep: the programs of a launch that race)
        self.batch = bool(batch) and not self.comm.lockstep
        self._plan_of: dict[int, Plan] = {}
        self.nests: list[batched.Nest] = []
        self.unbatched: dict[str, str] = {}  # loop label -> why it can never run batched
        # the batched nests' legality verdicts by loop (they depend on the kernel alone: simulators of one
        # kernel may share them, as a CompiledKernel's do; batched.legal)
        self.verdicts = {} if verdicts is None else verdicts
        self.cpu = CpuShare()  # whether the batched path's second thread has a core (cpushare.py)
        self.helper = ThreadPoolExecutor(1)  # the second core's half of large batched passes (no thread until used)
        self.scratch = Scratch()  # the batched path's arrays, reused between nests and runs (page faults)
        self.sbuf = self.psum = self.psum_mask = None  # on-chip memory: made at the first run, kept
        self._allocated = {s.tensor for s in kernel.body.walk() if isinstance(s, Alloc)}
        self._touched: dict = {}  # id(a block's statements) -> (them, the tensors each touches): _first_use
        self._check_layout()
        self.neighbours = self._neighbours()
        self.around = batched.loops_around(kernel.body) if self.batch else {}  # (Nest.escapes)
        self.read_only = set(kernel.args) - set(written_args(kernel))  # inputs no instruction writes
        self._program = self._compile_block(kernel.body.stmts, ())
        self._touched = {}  # (only the plans needed it)
        self.hazards = hazards if (self.timing and self.scheduled) else "off"
        # loops whose timing repeats skip whole periods (periodic.py); not while tracing (every
        # instruction is an event), nor with hazards="raw" (its record cleanup can hide a hazard
        # depending on when it runs, which a skipped period would change)
        self.closed_form = bool(closed_form) and self.timing and not self.tracing and self.hazards != "raw"
        self._facts: dict[int, periodic.LoopFacts] = {}
        self._overlaps: dict[tuple, bool] = {}  # _overlap's exact answers
        self._timed = self.timing
        self.clock = TimingModel(self.engines, self._rot_keys, self.plans, self.costs, self._boxes,
                                 set(self.neighbours.values()))
        # accesses to memory that no op ever writes cannot take part in a hazard
        written = {self.neighbours[a.tensor] for p in self.plans for a in writes(p.op)}
        touched = {n for n in self.tensors if self.neighbours[n] in written}
        for p in self.plans:
            p.hz_reads = [acc for acc in p.hz_reads if acc.t.name in touched]
        self.tracer = TraceRecorder(kernel.name, getattr(target, "name", "?"), max_trace_events, self.decls) \
            if self.tracing else None
        # A program that reads no register (no runtime offset, no runtime loop: its loop_guard is a
        # plan too) and meets no other rank times the same on any data: times, busy spans and hazard
        # checks follow from the program and the cost table alone. Its first timed run's timing is
        # kept (a snapshot of its clock) and later runs of this simulator run only the data, every
        # check on it included.
        self._timing_static = (reuse_timing and self.timing and not self.tracing
                               and not any(a.scalar is not None or a.reg is not None for a in self._all_accs)
                               and not any(p.collective is not None or p.op.opcode == "loop_guard"
                                           for p in self.plans))
        self._timing_memo: ClockState | None = None

    # --- setup ---------------------------------------------------------------------------

    def _check_layout(self) -> None:
        tg = self.target
        limits = {"sbuf": tg.sbuf_partition_bytes, "psum": tg.psum_partition_bytes}
        for t in self.tensors.values():
            if not t.onchip:
                continue
            d = t.decl
            if d.address is None:
                raise NkiccError("E172", f"on-chip tensor {d.described()} has no address: the kernel is not lowered",
                                 d.loc, "compile it with the alloc pass (nkicc.compile does) before the machine "
                                        "simulator, or use the reference simulator")
            end = d.address + t.F * dtypes.itemsize(d.dtype)  # device bytes
            if d.address < 0 or end > limits[d.buffer] or t.P > tg.partitions:
                raise NkiccError("E172", f"{d.buffer} tensor {d.described()} [{t.P} partitions, bytes {d.address}.."
                                         f"{end}) does not fit the {d.buffer} of {tg.name} ({tg.partitions} x "
                                         f"{limits[d.buffer]} bytes)", d.loc, "an allocator bug")

    def _neighbours(self) -> dict[str, str]:
        """For each tensor, the group of tensors whose memory overlaps its own,
        directly or through others (on chip by byte range: every tile starts
        at partition 0); hazard records are kept per group."""
        out = {}
        for buffer in ("sbuf", "psum"):
            group, group_end = None, -1
            for t in sorted((t for t in self.tensors.values() if t.onchip and t.decl.buffer == buffer),
                            key=lambda t: t.address):
                end = t.address + t.F * t.item
                if group is None or t.address >= group_end:
                    group, group_end = t.name, end
                group_end = max(group_end, end)
                out[t.name] = group
        for t in self.tensors.values():
            out.setdefault(t.name, t.name)
        return out

    def _ekey(self, name: str) -> int:
        k = self._ekeys.get(name)
        if k is None:
            k = self._ekeys[name] = len(self.engines)
            self.engines.append(name)
        return k

    def _compile_block(self, stmts, loop_vars: tuple[str, ...]) -> list:
        items = []
        for i, s in enumerate(stmts):
            if isinstance(s, Op):
                items.append((0, self._compile_op(s, loop_vars)))
            elif isinstance(s, Alloc):
                first = self._first_use(stmts, i + 1, s.tensor)
                if not (isinstance(first, Op) and self._overwrites(first, s.tensor)):
                    items.append((1, self.tensors[s.tensor]))
            elif isinstance(s, Loop):
                guard = runtime_guard(s)
                stmts_in = s.body.stmts[1:] if guard is not None else s.body.stmts
                body = self._compile_block(stmts_in, loop_vars + (s.var,))
                if guard is not None:
                    items.append((3, (s.var, self._compile_op(guard, loop_vars + (s.var,)), body, len(loop_vars))))
                else:
                    spec = (s.var, s.trip, body, len(loop_vars), loop_label(s), s.start, s.step)
                    nest = batched.plan(self, s, loop_vars, f"{spec[4][1]} {spec[4][0]} ({s.var})") if self.batch else None
                    if nest is not None:
                        self.nests.append(nest)
                        items.append((4, (spec, nest)))
                    else:
                        items.append((2, spec))
        return items

    def _first_use(self, stmts, start: int, name: str):
        """The first statement of stmts[start:] that touches tensor `name` (an Op, or a Loop
        holding one). What each statement touches is worked out once per block (_touched)."""
        touched = self._touched.get(id(stmts))
        if touched is None or touched[0] is not stmts:
            sets = [tensors_touched(s) if isinstance(s, Op) else
                    set().union(*(tensors_touched(x) for x in s.body.walk() if isinstance(x, Op)))
                    if isinstance(s, Loop) else () for s in stmts]
            touched = self._touched[id(stmts)] = (stmts, sets)
        for s, names in zip(stmts[start:], touched[1][start:]):
            if name in names:
                return s
        return None

    def _overwrites(self, op: Op, name: str) -> bool:
        """Whether `op` writes every element of tensor `name` without reading
        it: then poisoning it at its Alloc, just before, can be skipped. Not an op
        that may skip elements at run time (oob_mode.skip: the rows of an
        out-of-range gather stay as they were, which must be poison, not whatever
        the memory held)."""
        if op.attr("oob") == "skip" or any(a.tensor == name for a in reads(op)):
            return False
        size = self.decls[name].size
        for a in writes(op):
            if (a.tensor == name and a.scalar is None and a.dtype is None and a.vector is None and a.offset.is_const
                    and a.count == size
                    and injective(a.pattern)  # count distinct elements from 0 to size - 1: all of them
                    and a.offset.const + sum(s * (n - 1) for s, n in a.pattern if s < 0) == 0
                    and a.offset.const + sum(s * (n - 1) for s, n in a.pattern if s > 0) == size - 1):
                return True
        return False

    def _retyped(self, t: Tensor, dtype: str, op: Op | None) -> Tensor:
        """Tensor `t` seen as `dtype` (a reinterpreting view): the same bytes, its
        last dimension holding as many elements of `dtype` as they make."""
        v = self._retypes.get((t.name, dtype))
        if v is None:
            if not self.precise:
                raise NkiccError("E160", f"{t.decl.described()} is read as {dtype}: reinterpreting bytes needs each "
                                         "dtype held as itself", op.loc if op else None,
                                 "run with NKI_PRECISE_FP=1 (the default)")
            d = t.decl
            shape = d.shape[:-1] + (d.shape[-1] * dtypes.itemsize(d.dtype) // dtypes.itemsize(dtype),)
            v = self._retypes[(t.name, dtype)] = Tensor(TensorDecl(d.name, shape, dtype, d.buffer, d.role, d.loc,
                                                                    d.address), True, self.scale)
        return v

    def _acc(self, a: Access, op: Op | None = None) -> Acc:
        t = self.tensors[a.tensor]
        if a.dtype is not None:
            t = self._retyped(t, a.dtype, op)
        acc = Acc(a, t, self._pb(t))
        self._all_accs.append(acc)
        if self.timing:  # hazard checks need to know whether the access is a dense box
            acc.dense = acc.is_dense()
        if a.scalar is not None and a.scalar.tensor:
            acc.scalar = self._acc(Access(a.scalar.tensor, a.scalar.offset, ((1, 1),)))
        if a.vector is not None:
            acc.vector = self._acc(a.vector, op)
        return acc

    def _pb(self, t: Tensor) -> int:
        return (self.target.psum_partition_bytes if t.is_psum else self.target.sbuf_partition_bytes) * self.scale

    def _compile_op(self, op: Op, loop_vars) -> Plan:
        p = Plan(op)
        self.plans.append(p)
        self._plan_of[id(op)] = p
        oid = op.attr("id")
        if oid is not None:
            self.scheduled = True
        p.id = oid if oid is not None else -len(self.plans)
        p.engine = engine_of(op, self.decls)
        p.queue = int(op.attr("queue", 0) or 0) if p.engine == "dma" else None
        p.ekey = self._ekey(f"dma.q{p.queue}" if p.engine == "dma" else p.engine)
        p.tid = self._tid(self.engines[p.ekey])
        # schedule's `rotate`: executions take the queues in turn, round robin over all rotating DMAs
        p.rotate = bool(op.attr("rotate")) and p.engine == "dma"
        if p.rotate and not self._rot_keys:
            self._rot_keys = [self._ekey(f"dma.q{q}") for q in range(self.target.dma_queues)]
        p.waits = tuple(op.attr("wait", ()) or ())
        p.loop_vars = loop_vars
        by_id: dict[int, Acc] = {}
        accs: list[Acc] = []

        def get(a: Access) -> Acc:
            acc = by_id.get(id(a))
            if acc is None:
                acc = by_id[id(a)] = self._acc(a, op)
                accs.append(acc)
            return acc

        p.outs = [get(a) for a in op.outs]
        for a in op.ins:
            if isinstance(a, Access):
                get(a)
        p.by_id = by_id
        accs[:0] = [acc.vector for acc in accs if acc.vector is not None]  # gather indices: read first
        p.accs = accs
        p.dyn_accs = [acc for acc in accs if not acc.static]  # starts that depend on loop indices / registers
        p.is_matmul = ops.of(op).accumulates(op)
        p.is_print = op.opcode == "device_print"
        p.scalars = [acc.scalar for acc in accs if acc.scalar is not None]
        # depends_on edges order by tokens, not memory: such an op waits for a rotating DMA's latest execution
        p.tokens = bool(op.attr("dep_reads"))
        # hazard regions: what the op reads (inputs, accumulating dst, scalar offsets) and writes
        p.hz_reads = [self._hz_acc(p, a) for a in reads(op)]
        p.hz_writes = [get(a) for a in writes(op)]  # outputs, and dependency tokens
        p.cost = cost_ns(op, p.engine, self.decls, self.target, self.costs, self.comm.size) if self.timing else 0.0
        p.hidden = min(p.cost, _background_ns(op, p.engine, self)) if self.timing else 0.0
        # the tensors whose writing by the engine's previous instruction keeps this one from
        # hiding its static overhead behind it (timing.py), those it writes, and what it hides then
        # (the on-chip access start, which ARCH1 says engines partly hide through parallelism)
        p.chain_reads = frozenset(a.tensor for a in op.ins if isinstance(a, Access)) \
            if p.engine in CHAINED_ENGINES else frozenset()
        p.chain_writes = frozenset(a.tensor for a in op.outs)
        p.chain_hidden = max(0.0, p.hidden - _static_ns(p.engine, self)) if p.chain_reads else p.hidden
        p.collective = ops.of(op).collective
        p.dma_dir, p.dma_bytes, p.spill, p.fabric_ns = None, 0, False, 0.0
        if p.engine == "dma":
            src, dst = self.decls[op.ins[0].tensor], self.decls[op.outs[0].tensor]
            cat = {"hbm": "hbm", "shared_hbm": "hbm"}
            direction = f"{cat.get(src.buffer, src.buffer)}->{cat.get(dst.buffer, dst.buffer)}"
            p.dma_dir = direction if direction in DMA_DIRECTIONS else "other"
            p.dma_bytes = traffic_bytes(op, self.decls)
            p.spill = "spill" in (src.role, dst.role)
            if p.collective is None and self.timing:
                # while its bytes move (after the fixed latency) it holds its share of the core's DMA
                # engines, which every queue shares (fabric.py)
                p.fabric_ns = max(0.0, p.cost - self.costs.dma_fixed_ns) * engine_share(op, self.decls, self.costs)
        return p

    def _hz_acc(self, p: Plan, a: Access) -> Acc:
        acc = p.by_id.get(id(a))
        if acc is not None:
            return acc
        for acc in p.accs:  # an out read by an accumulating matmul, or a scalar offset
            if acc.access == a:
                return acc
            if acc.scalar is not None and acc.scalar.access == a:
                return acc.scalar
        acc = self._acc(a)
        return acc

    def release_memory(self) -> None:
        """Drop what a run left in memory (on-chip arrays, HBM arrays, the scratch pool, hazard
        records), keeping the compiled program: a simulator kept between runs of one kernel
        (CompiledKernel.simulate) then holds only its plans."""
        self.sbuf = self.psum = self.psum_mask = None
        self._mv, self._mask_mv, self.hbm = {}, None, {}
        for t in list(self.tensors.values()) + list(self._retypes.values()):
            t.footprint = None
            if t.is_psum:
                t.mask_footprint = None
        for acc in self._all_accs:
            acc.wrecs = acc.rrecs = None
            acc.vcache = {}  # (views of the run's arrays)
        self.clock.release()
        self._rows = self._cur_op = None
        self.scratch = Scratch()

    def close(self) -> None:
        """Done with this simulator: release_memory(), and drop the timing model, whose hold on
        this simulator (a bound method) is the one reference cycle release_memory leaves. A
        simulator made for one run is then freed by reference counting when its caller lets go,
        not by a cyclic collection later: 400 k objects, 0.3 s after each launch of the library's
        attention block on 2 cores."""
        self.release_memory()
        self.clock = None

    # --- memory --------------------------------------------------------------------------

    def _init_memory(self, inputs: dict[str, np.ndarray]) -> None:
        tg = self.target
        k = self.scale
        again = self.sbuf is not None  # a run after the first keeps the arrays (fresh pages fault, scratch.py)
        if not again:
            self.sbuf = np.zeros(tg.partitions * tg.sbuf_partition_bytes * k, dtype=np.uint8)
            self.psum = np.zeros(tg.partitions * tg.psum_partition_bytes * k, dtype=np.uint8)
            self.psum_mask = np.zeros(tg.partitions * tg.psum_partition_bytes * k, dtype=np.bool_)
        self._mv = {"sbuf": memoryview(self.sbuf), "psum": memoryview(self.psum)}
        self._mask_mv = memoryview(self.psum_mask)
        self.hbm: dict[str, np.ndarray] = {}
        written = set(written_args(self.kernel))
        for t in self.tensors.values():
            if t.onchip:
                PB = self._pb(t)
                t.footprint = np.ndarray((t.P, t.F), t.dtype, self._mv[t.decl.buffer], t.address, (PB, t.item))
                if t.is_psum:
                    t.mask_footprint = np.ndarray((t.P, t.F * t.item), np.bool_, self._mask_mv, t.address, (PB, 1))
                if again and t.name not in self._allocated:  # as a first run finds it; an Alloc fills the others
                    t.footprint[...] = 0  # (zeroing all of SBUF again was 3 ms a run: 30% of a small kernel's)
                    if t.is_psum:
                        t.mask_footprint[...] = False
                continue
            if t.name in self._shared:
                arr = self._shared[t.name].reshape(-1)
            elif t.name in self.kernel.args:
                if t.name not in inputs:
                    raise NkiccError("E002", f"kernel {self.kernel.name} needs an array for {t.name}", None)
                arr = np.asarray(inputs[t.name])
                if t.name in self._donated and arr.dtype == t.dtype and arr.flags.c_contiguous:
                    pass  # the caller's array: run() updates it in place
                elif t.name in written or arr.dtype != t.dtype or not arr.flags.c_contiguous:
                    arr = np.array(arr, dtype=t.dtype, copy=True)  # the kernel writes it: the caller's stays
                else:  # read in place, so memory holds one copy of the inputs; read-only: a write would raise
                    arr = arr.view()
                    arr.flags.writeable = False
                arr = arr.reshape(-1)
                if arr.size != t.size:
                    raise NkiccError("E002", f"argument {t.name} has {arr.size} elements, the kernel was "
                                             f"compiled for shape {list(t.decl.shape)}", None)
            else:
                init = ops.initial_state(t.name) if t.decl.role == "state" else None
                if init is None and t.name in self._allocated:  # its Alloc poisons it before any use
                    arr = np.empty(t.size, dtype=t.dtype)
                else:
                    arr = np.full(t.size, t.fill if init is None else init, dtype=t.dtype)
            self.hbm[t.name] = arr
            t.footprint = arr
            self._mv["hbm:" + t.name] = memoryview(arr.view(np.uint8))  # bytes: ml_dtypes export no buffer
        for v in self._retypes.values():  # the same bytes as another dtype
            base = self.tensors[v.name]
            if v.onchip:
                v.footprint = np.ndarray((v.P, v.F), v.dtype, self._mv[v.decl.buffer], v.address, (self._pb(v), v.item))
                v.mask_footprint = base.mask_footprint  # (bytes: the same for every dtype)
            else:
                v.footprint = base.footprint.view(v.dtype)

    def _alloc(self, t: Tensor) -> None:
        if t.name in self._shared:
            return  # HBM the cores of a multi-core launch share: the others' writes stay
        t.footprint[...] = t.fill
        if t.is_psum:
            t.mask_footprint[...] = False

    def _start(self, acc: Acc, op: Op, write: bool, check: bool = True) -> int:
        env = self.env
        e = acc.const
        for v, c in acc.terms:
            e += c * env[v]
        if acc.scale:
            if acc.reg is not None:
                e += env[acc.reg] * acc.scale
            elif acc.scalar is not None:
                value = self._scalar(acc.scalar, op)
                if value != value:  # NaN: a float scalar offset that nothing wrote
                    raise NkiccError("E170", f"{op.opcode}: the scalar offset {acc.access.scalar} was never "
                                             f"written", op.loc, "initialise the offset tile before using it")
                e += int(value) * acc.scale
        t = acc.t
        if check and (e + acc.lo_span < 0 or (e + acc.hi_span >= t.size and (write or not t.onchip))):
            raise NkiccError("E170", f"{op.opcode} accesses elements [{e + acc.lo_span}, {e + acc.hi_span}] of "
                                     f"{t.decl.described()} (size {t.size}) at run time", op.loc,
                             "the runtime scalar offset is out of range: check how it is updated")
        return e

    def _scalar(self, sc: Acc, op: Op):
        """The value a runtime scalar offset reads now (the element its access sc reads; NaN when
        nothing wrote it)."""
        sc.cur = self._start(sc, op, False)
        return self._read_view(sc).reshape(-1)[0]

    def _flat_index(self, acc: Acc, e: int) -> np.ndarray:
        if acc.rel is None:
            rel = np.zeros(acc.shape, dtype=np.int64)
            for axis, (s, n) in enumerate(acc.access.pattern):
                shape = [1] * len(acc.shape)
                shape[axis] = n
                rel = rel + (np.arange(n, dtype=np.int64) * s).reshape(shape)
            acc.rel = rel
        return acc.rel + e

    def _views(self, acc: Acc, e: int):
        """(data view, PSUM written-mask view or None) of an access that maps onto
        a strided window of memory, or None when it wraps rows / runs off the tile.
        Views alias the machine's memory, so they are cached per start."""
        v = acc.vcache.get(e)
        if v is not None:
            return v
        if acc.vector is not None:
            return None  # a gather / scatter: no strided window (see _gather)
        t = acc.t
        if not t.onchip:
            v = (np.ndarray(acc.shape, t.dtype, self._mv[t.key], e * t.item, acc.strides), None)
        else:
            p0, f0 = divmod(e, t.F)
            if p0 + acc.part_lo < 0 or p0 + acc.part_hi >= t.P or f0 + acc.free_lo < 0 or f0 + acc.free_hi >= t.F:
                return None
            off = t.address + p0 * self._pb(t) + f0 * t.item
            v = (np.ndarray(acc.shape, t.dtype, self._mv[t.key], off, acc.strides),
                 np.ndarray(acc.shape, np.bool_, self._mask_mv, off, acc.strides) if t.is_psum else None)
        if len(acc.vcache) < _VIEW_CACHE:
            acc.vcache[e] = v
        return v

    def _gather_index(self, acc: Acc, op: Op):
        return gather_index(acc.access, acc.cur, self._read_view(acc.vector), acc.t.size, op, acc.t.decl)

    @staticmethod
    def _at(t: "Tensor", flat: np.ndarray) -> np.ndarray:
        """Elements of a tensor at flat element indices (on chip: partition-major rows)."""
        return t.footprint[flat // t.F, flat % t.F] if t.onchip else t.footprint[flat]

    def _read_view(self, acc: Acc) -> np.ndarray:
        v = acc.vcache.get(acc.cur) or self._views(acc, acc.cur)
        if v is not None:
            return v[0]
        if acc.vector is not None:  # a gather from HBM: rows at the index tile's offsets
            idx, inside = self._gather_index(acc, self._cur_op)
            out = np.full(idx.shape, acc.t.fill, dtype=acc.t.dtype)
            out[inside] = self._at(acc.t, idx[inside])
            if not inside.all():
                self._rows = inside  # the op writes only the rows it read (oob_mode.skip)
            return out
        # rows wrap or the read runs past the tile (W101): flat semantics, past the end is poison
        t = acc.t
        idx = self._flat_index(acc, acc.cur)
        valid = idx < t.size
        out = np.full(acc.shape, t.fill, dtype=t.dtype)
        vi = idx[valid]
        out[valid] = t.footprint[vi // t.F, vi % t.F]
        return out

    def _write(self, acc: Acc, values, is_matmul: bool, mode) -> None:
        t = acc.t
        if acc.vector is not None:  # a scatter into HBM
            idx, inside = self._gather_index(acc, self._cur_op)
            tmp = np.empty(idx.shape, dtype=t.dtype)
            self._store(tmp, np.broadcast_to(values, idx.shape) if np.ndim(values) == 0 else values)
            at = idx[inside]
            if t.onchip:
                t.footprint[at // t.F, at % t.F] = tmp[inside]
            else:
                t.footprint[at] = tmp[inside]
            return
        if self._rows is not None:  # a gather skipped rows out of range: those stay as they were
            old = np.array(self._read_view(acc))
            values = np.asarray(values).reshape(old.shape)
            values = np.where(self._rows.reshape((-1,) + (1,) * (old.ndim - 1)), values, old.astype(values.dtype))
        v = acc.vcache.get(acc.cur) or self._views(acc, acc.cur)
        if v is not None:
            dst, wmask = v
            if wmask is not None:
                if is_matmul:
                    values = _accumulate(mode, dst, wmask, values)
                wmask[...] = True
            self._store(dst, values)
            return
        idx = self._flat_index(acc, acc.cur)
        p, f = idx // t.F, idx % t.F
        dst = t.footprint[p, f]
        if t.is_psum:
            wmask = t.mask_footprint[p, f * t.item]
            if is_matmul:
                values = _accumulate(mode, dst, wmask, values)
            t.mask_footprint[p, f * t.item] = True
        self._store(dst, values)
        t.footprint[p, f] = dst

    @staticmethod
    def _store(dst: np.ndarray, values) -> None:
        if np.ndim(values) == 0:
            semantics.store(dst, np.full(dst.shape, values))
        else:
            semantics.store(dst, values)

    # --- execution -----------------------------------------------------------------------

    def run(self, inputs: dict[str, np.ndarray], shared: dict[str, np.ndarray] | None = None,
            donated: frozenset = frozenset()):
        """Run the kernel; returns (outputs: name -> array, SimReport). `shared`:
        HBM tensors by name that live in the given arrays, which other cores
        of a multi-core launch read and write at the same time (an output among
        them comes back as a view of that array, not a copy). `donated`: written
        arguments the run updates in their arrays in `inputs` (contiguous, in the
        tensor's storage dtype), which come back as views of them."""
        t0 = time.perf_counter()
        self._shared = shared or {}
        self._donated = donated
        self._init_memory(inputs)
        self.env.clear()  # (loop indices and registers a run that raised left behind)
        self.executed = 0
        self.prints: list[str] = []
        for p in self.plans:
            p.count = 0
        self.reordered = 0
        for nest in self.nests:
            nest.batched = nest.fallbacks = 0
        clock = self.clock
        clock.reset()
        for facts in self._facts.values():
            facts.misses = facts.hits = 0
        for acc in self._all_accs:
            acc.vcache = {}
            acc.rcache = {}
            g = self.neighbours[acc.t.name]
            acc.wrecs, acc.rrecs = clock.writes[g], clock.reads[g]
        self._spans: list[list[float]] = []
        if self.tracing:
            self.tracer = TraceRecorder(self.kernel.name, getattr(self.target, "name", "?"),
                                        self.tracer.max_events, self.decls)
        static = self._timing_static and not self._shared
        memo = self._timing_memo if static else None
        # timed unless the first run's timing is reused (and off while a skipped period's iterations
        # run for their data alone: _replay)
        self._timed = self.timing and memo is None
        with single_threaded_blas(), np.errstate(all="ignore"):  # semantics.compute's contract
            if self.comm.lockstep:  # (a launch's programs that race: simulator/comm.py)
                for item in self._program:
                    with self.comm.step():
                        self._block((item,))
            else:
                self._block(self._program)
        if memo is not None:
            clock.restore(memo)
        elif static:
            self._timing_memo = clock.snapshot()
        # and the inputs the kernel updated (once: a kernel may return an argument it wrote)
        names = list(dict.fromkeys(self.kernel.outputs + written_args(self.kernel)))
        # handed over, not copied: the next run() starts from new arrays (peak memory: one copy of E);
        # a shared tensor is the caller's own array (a KV cache of every core: copies cost seconds)
        outputs = {name: (self.hbm[name] if name in self._shared else self.hbm.pop(name))
                   .reshape(self.decls[name].shape) for name in names}
        report = self._report(time.perf_counter() - t0)
        if self.tracing and self.trace_path:
            self.write_trace(self.trace_path)
            report.trace_file = self.trace_path
        return outputs, report

    def _block(self, items) -> None:
        for kind, x in items:
            if kind == 0:
                self._op(x)
            elif kind == 1:
                self._alloc(x)
            elif kind == 2:
                self._loop(x)
            elif kind == 4:
                if not batched.run(self, x[1]):
                    self._loop(x[0])
                elif self._timed:  # times and hazards per iteration, without the data
                    self._loop(x[0], self._walk_timing)
            else:
                self._runtime_loop(x)

    def _walk_timing(self, items) -> None:
        for kind, x in items:
            if kind == 0:
                for acc in x.dyn_accs:
                    acc.cur = self._start(acc, x.op, False)
                self._time(x)
            elif kind == 2:
                self._loop(x, self._walk_timing)
            elif kind == 4:
                self._loop(x[0], self._walk_timing)

    def _guard_input(self, p: Plan, i: int) -> int:
        x = p.op.ins[i]
        if isinstance(x, Const):
            return int(x.value)
        acc = p.by_id[id(x)]
        return int(self._read_view(acc).reshape(-1)[0])

    def _runtime_loop(self, spec) -> None:
        """A loop whose trip count the registers decide (ir.ops.control): fori
        reads its bounds at entry, while its condition before each iteration;
        the guard writes the value the body reads."""
        var, guard, body, depth = spec
        env = self.env
        mode, step = guard.op.attr("mode"), guard.op.attr("step")
        env[var] = 0
        for acc in guard.dyn_accs:
            acc.cur = self._start(acc, guard.op, False)
        if mode == "fori":
            value, upper = self._guard_input(guard, 0), self._guard_input(guard, 1)
        t = 0
        while True:
            env[var] = t
            for acc in guard.dyn_accs:
                acc.cur = self._start(acc, guard.op, False)
            if self._timed:
                self._time(guard)
            if mode == "while":
                value = self._guard_input(guard, 0)
                if value == 0:
                    break
            elif value >= upper:
                break
            self.executed += 1
            guard.count += 1
            self._write(guard.outs[0], np.array([[value]]), False, None)
            self._block(body)
            if mode == "fori":
                value += step
            t += 1
        env.pop(var, None)

    def _loop(self, spec, block=None) -> None:
        var, trip, body, depth, label, start, step = spec
        env = self.env
        block = block or self._block
        walk = getattr(block, "__func__", None) is MachineSimulator._walk_timing
        if self.closed_form and (walk or (block == self._block and self._timed)):
            facts = self._facts.get(id(body))
            if facts is None:
                facts = self._facts[id(body)] = periodic.loop_facts(self, spec)
            if facts.ok:
                skipped = periodic.run_loop(self, spec, facts, block, None if walk else self._replay)
                if skipped:
                    name = f"{label[1]} {label[0]} ({var})"
                    closed = self.clock.closed_loops
                    closed[name] = closed.get(name, 0) + skipped
                return
        if self.tracing:
            spans, tracer = self._spans, self.tracer
            for t in range(trip):
                env[var] = t
                spans.append([_INF, -_INF])
                block(body)
                lo, hi = spans.pop()
                if lo <= hi:
                    tracer.loop(label, t, lo, hi, depth, start, step)
                    if spans:
                        outer = spans[-1]
                        if lo < outer[0]:
                            outer[0] = lo
                        if hi > outer[1]:
                            outer[1] = hi
        elif depth == 0:
            check = self.comm.check
            for t in range(trip):
                check()
                env[var] = t
                block(body)
        else:
            for t in range(trip):
                env[var] = t
                block(body)
        env.pop(var, None)

    def _replay(self, body, var: str, iterations, plans) -> None:
        """Iterations whose timing a skipped period gave (periodic.py), run for their data alone:
        their instruction counts are in the period's already."""
        counts, executed = [p.count for p in plans], self.executed
        self._timed = False
        try:
            for t in iterations:
                self.env[var] = t
                self._block(body)
        finally:
            self._timed = True
        for p, n in zip(plans, counts):
            p.count = n
        self.executed = executed

    def _skip_out_of_range(self, p: Plan) -> bool:
        """oob_mode.skip with a runtime scalar offset (oob_skip.py): move the elements whose
        indices are in range; False (nothing done) when all are."""
        op = p.op
        src, dst = p.by_id[id(op.ins[0])], p.outs[0]
        si = oob_skip.flat_index(src.access, self._start(src, op, False, check=False))
        di = oob_skip.flat_index(dst.access, self._start(dst, op, True, check=False))
        ok = oob_skip.moved(si, src.t.size, di, dst.t.size)
        if ok is None:
            return False
        if self._timed:
            self._time(p)
        values = np.full(si.size, src.t.fill, dtype=src.t.dtype)
        values[ok] = self._at(src.t, si.reshape(-1)[ok])
        ((_, result),) = semantics.compute(op, lambda a: values.reshape(si.shape))
        tmp = np.empty(di.shape, dtype=dst.t.dtype)
        self._store(tmp, np.broadcast_to(result, di.shape) if np.ndim(result) == 0 else
                    np.asarray(result).reshape(di.shape))
        at, t = di.reshape(-1)[ok], dst.t
        if t.onchip:
            t.footprint[at // t.F, at % t.F] = tmp.reshape(-1)[ok]
        else:
            t.footprint[at] = tmp.reshape(-1)[ok]
        return True

    def _op(self, p: Plan) -> None:
        self.executed += 1
        p.count += 1
        op = p.op
        self._cur_op, self._rows = op, None
        if p.oob_skip and self._skip_out_of_range(p):
            return
        for acc in p.dyn_accs:
            acc.cur = self._start(acc, op, False)
        by_id = p.by_id
        view = self._read_view
        if p.collective is not None:
            results = self._collective(p)
        else:
            if self._timed:
                self._time(p)
            results = semantics.compute(op, lambda a: view(by_id[id(a)]))
        if p.is_print:  # nl.device_print: to stdout now, as the vendor's simulator, and into the report
            text = debug.print_text(op, lambda a: view(by_id[id(a)]))
            self.prints.append(text)
            print(text)
        for index, values in results:
            acc = p.outs[index]
            if not acc.static and (acc.t.size <= acc.cur + acc.hi_span or acc.cur + acc.lo_span < 0):
                self._start(acc, op, True)  # raises E170
            self._write(acc, values, p.is_matmul, p.mode)

    def _collective(self, p: Plan) -> list:
        """Meet the other ranks of the op's group: they start together, when the
        last is ready; the outputs come from everyone's inputs."""
        op, comm = p.op, self.comm
        me, group = comm.group(op)
        payload = collective_payload(op, lambda a: self._read_view(p.by_id[id(a)]))
        got = {}

        def meet(ready: float) -> float:
            got["inputs"], start = comm.exchange(group, op, payload, ready)
            return start

        if self.timing:
            self._time(p, meet)
        else:
            meet(0.0)
        return p.collective(op, got["inputs"], me, group)

    # --- timing (timing.py) and hazards (hazards.py) --------------------------------------

    def _time(self, p: Plan, meet=None) -> None:
        start, finish = self.clock.time(p, meet)
        if self.hazards != "off":
            self._hazards(p, start, finish)
        if self.tracing:
            iters = tuple(self.env[v] for v in p.loop_vars) if p.loop_vars else ()
            self.tracer.op(p, start, finish, iters, self._tid(self.engines[p.ekey]) if p.rotate else p.tid)
            spans = self._spans
            if spans:
                sp = spans[-1]
                if start < sp[0]:
                    sp[0] = start
                if finish > sp[1]:
                    sp[1] = finish

    # --- results -------------------------------------------------------------------------

    def _report(self, wall: float) -> SimReport:
        r = SimReport(kernel=self.kernel.name, target=getattr(self.target, "name", "?"), timing=self.timing,
                      executed=self.executed, wall_s=wall, prints=list(self.prints))
        clock = self.clock
        total = clock.end_ns if self.timing else None
        r.total_ns = total
        engines = {e: EngineStats() for e in COMPUTE_ENGINES + ("dma",)}
        queues: dict[str, EngineStats] = {}
        for p in self.plans:
            if not p.count:
                continue
            s = engines.setdefault(p.engine, EngineStats())
            s.instructions += p.count
            if p.engine not in COMPUTE_ENGINES:  # a compute engine's busy time is its executed spans (below)
                s.busy_ns += p.cost * p.count
            if p.engine == "dma" and not self.timing:
                q = queues.setdefault(f"q{p.queue}", EngineStats())
                q.instructions += p.count
            if p.dma_dir is not None:
                r.dma_bytes[p.dma_dir] += p.dma_bytes * p.count
                r.dma_transfers += p.count
                if p.spill:
                    r.spill_bytes += p.dma_bytes * p.count
        if self.timing:  # busy times and counts as executed, active time (timing.py)
            clock.fill(engines, queues, total)
            r.critical_path = clock.critical_path()
        else:
            for s in list(engines.values()) + list(queues.values()):
                s.busy_ns = 0.0
        r.engines = engines
        r.dma_queues = dict(sorted(queues.items(), key=lambda kv: int(kv[0][1:])))
        if self.tracer is not None:
            r.trace_events = self.tracer.count
            r.trace_capped = self.tracer.capped
            r.timeline = self.tracer.timeline(self.track_names())
        r.batched_loops = {n.label: n.batched for n in self.nests if n.batched}
        r.closed_form_loops = dict(clock.closed_loops) if self.timing else {}
        r.reordered_sums = self.reordered
        r.unbatched_loops = {**self.unbatched, **{n.label: n.why for n in self.nests if n.fallbacks}}
        if clock.forgotten:
            r.note += f"; hazard tracking forgot {clock.forgotten} old records (very long-lived regions)"
        return r

    def track_names(self) -> dict[int, str]:
        names = {"pe": "Tensor Engine (pe)", "dve": "Vector Engine (dve)", "act": "Scalar Engine (act)",
                 "pool": "GpSimd (pool)"}
        return {self._tid(name): names.get(name, f"DMA queue {name[5:]}" if name.startswith("dma.q") else name)
                for name in self.engines}

    def _tid(self, name: str) -> int:
        """Trace track of an engine: pe, dve, act, pool first, then the DMA queues in order."""
        fixed = {"pe": 1, "dve": 2, "act": 3, "pool": 4}
        if name in fixed:
            return fixed[name]
        if name.startswith("dma.q"):
            return 10 + int(name[5:])
        return 500 + self._ekeys[name]  # an engine nkicc does not know (from a plugin's schedule)

    def write_trace(self, path: str) -> None:
        if self.tracer is None:
            raise ValueError("tracing is off (trace=..., timing=True)")
        self.tracer.write(path, self.track_names())

    def trace_dict(self) -> dict:
        return self.tracer.to_dict(self.track_names())


def simulate_machine(kernel: Kernel, inputs: dict[str, np.ndarray], target, **kw):
    """(outputs, SimReport) of one machine simulation."""
    return MachineSimulator(kernel, target, **kw).run(inputs)


__all__ = ["MachineSimulator", "simulate_machine"]
