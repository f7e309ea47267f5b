"""What a kernel body touches while it is traced: the IR builder, symbolic
loop indices and the loop iterators.

The retry policy (which loops to split, which to trace concretely, whether a
body is free of Python side effects) is the driver's; it is handed in as a
`LoopPolicy`, so this layer decides nothing about it.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
import math
import operator
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from ..ir import Access, Affine, Alloc, Block, Kernel, Loc, Loop, NkiccError, Op, Stmt, TensorDecl
from ..ir import ops
from ..ir.ops.collectives import meets_others
from ..ir.origin import is_nkicc
from ..ir.rewrite import map_stmts

_active: contextvars.ContextVar["Builder | None"] = contextvars.ContextVar("nkicc_builder", default=None)


def current_builder() -> "Builder | None":
    return _active.get()


def user_frame(depth: int = 2):
    """The innermost frame outside nkicc (None: there is none)."""
    f = sys._getframe(depth)
    while f is not None:
        if not is_nkicc(f.f_code.co_filename):
            return f
        f = f.f_back
    return None


def user_loc(depth: int = 2) -> Loc | None:
    """File and line of the innermost frame outside nkicc."""
    f = user_frame(depth + 1)
    if f is None:
        return None
    loc = _locs(f.f_code, f.f_code.co_filename).get(f.f_lasti)
    return loc if loc is not None else Loc(f.f_code.co_filename, f.f_lineno)


@functools.lru_cache(maxsize=4096)
def _locs(code, filename: str) -> dict[int, Loc]:
    """Instruction offset -> Loc, for every instruction of `code` that has a line. Every op
    the tracer emits asks where it came from: a frame's f_lineno decodes the code's line
    table from its start each time (a library kernel's functions run to hundreds of lines),
    and each answer was a new Loc. (The file is part of the key: code objects compare equal
    across files, a notebook cell's run again in a new cell file among them.)"""
    table = {}
    for start, end, line in code.co_lines():
        if line is not None:
            loc = Loc(filename, line)
            for offset in range(start, end, 2):
                table[offset] = loc
    return table


# --- retries -----------------------------------------------------------------

class TraceRetry(BaseException):
    """Raised mid-trace when a loop must be split or traced concretely.
    A BaseException so that a kernel's own `except Exception` cannot swallow it."""

    def __init__(self, key: tuple, split: frozenset[int] = frozenset(), concrete: bool = False, why: str = ""):
        super().__init__(why)
        self.key = key
        self.split = split
        self.concrete = concrete
        self.why = why


class MeetsOtherCores(BaseException):
    """Raised mid-trace of a whole launch grid (Builder.stop_if_meeting) at the first
    instruction that meets another core or rank: such programs run at once, one core
    each, and are traced one program at a time; the grid's own trace is not needed.
    `policy` (set by trace_kernel): what the stopped attempts learned."""
    policy = None


@dataclass(frozen=True)
class LoopPlan:
    concrete: bool = False
    splits: frozenset[int] = frozenset()
    reason: str = ""


@dataclass(frozen=True)
class LoopSite:
    """Where a loop iterator is being iterated by a `for` statement."""
    file: str
    line: int
    col: int
    node: object = None  # the ast.For, for the policy's effect analysis
    frame_globals: dict | None = None
    frame_locals: dict | None = None


# the NeuronCore generation a trace assumes when its caller names no target (trn2, the default target)
DEFAULT_GENERATION = 3
GRID = "<launch grid>"  # LoopSite.file and .node of the loops of an SPMD launch grid


class LoopPolicy(Protocol):
    def site(self, frame) -> LoopSite | None: ...
    def plan(self, key: tuple, trip: int, site: LoopSite) -> LoopPlan: ...


# --- the builder ---------------------------------------------------------------

@dataclass
class _Frame:
    """One traced loop piece, or the kernel itself (key == ())."""
    key: tuple
    var: str | None
    trip: int
    kind: str  # static | dynamic | root
    first: int = 0  # iteration of the whole loop at which this piece starts
    depth: int = 0
    ended: bool = False
    children: dict = field(default_factory=dict)  # site -> occurrences this iteration


class Builder:
    def __init__(self, name: str, policy: LoopPolicy) -> None:
        self.name = name
        self.policy = policy
        self.decls: dict[str, TensorDecl] = {}
        self.tensor_frame: dict[str, _Frame] = {}
        self.var_frame: dict[str, _Frame] = {}
        self._blocks: list[list[Stmt]] = [[]]
        self._frames: list[_Frame] = [_Frame((), None, 1, "root")]
        self._names = itertools.count()
        self._vars = itertools.count()
        self.loop_stats = {"rolled": 0, "split": 0, "concrete": 0, "dynamic": 0}
        self.affine_vars: set[str] = set()  # rolled loops from affine_range: iterations must be independent
        self.compared: set[str] = set()  # tiles holding comparison results: `if t > 0:` is a mistake (__bool__)
        self.truth_tests: dict[str, int] = {}  # per tensor: `while t:` never ends at trace time (__bool__)
        self.emitted = itertools.count()  # instruction handles' order (depends_on)
        # id(op) -> (op, its replacement) for ops edited after their loop ended (depends_on)
        self.late_edits: dict[int, tuple[Op, Op]] = {}
        self.warnings: dict[tuple, NkiccError] = {}
        self._token = None
        # SPMD launch grid (language/spmd.py): sizes, the program id per axis, shared_hbm tensors by order
        self.grid: tuple[int, ...] = ()
        self.program_ids: list = []
        self._shared: list[TensorDecl] = []
        self._shared_next = 0
        # the target's NeuronCore generation (nisa.get_nc_version); trn2's when the caller names none
        self.nc_version: int = DEFAULT_GENERATION
        # `t[key] = value` of an NKI 0.1 kernel (language/legacy.py assign); None in 0.2 and later
        self.setitem = None
        self.stop_if_meeting = False  # raise MeetsOtherCores at a collective, sendrecv or core_barrier

    # context management
    def __enter__(self) -> "Builder":
        self._token = _active.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _active.reset(self._token)

    # tensors
    def new_tensor(self, shape, dtype: str, buffer: str, name: str = "", role: str = "local",
                   loc: Loc | None = None) -> TensorDecl:
        if self.grid and buffer == "shared_hbm" and role == "local":
            return self._grid_shared(shape, dtype, name, loc)
        return self._declare(shape, dtype, buffer, name, role, loc, self._frames[-1], self._blocks[-1])

    def _declare(self, shape, dtype: str, buffer: str, name: str, role: str, loc: Loc | None,
                 frame: "_Frame", block: list) -> TensorDecl:
        base = name if name else "t"
        unique = base if base not in self.decls else f"{base}.{next(self._names)}"
        while unique in self.decls:
            unique = f"{base}.{next(self._names)}"
        decl = TensorDecl(unique, tuple(int(d) for d in shape), dtype, buffer, role, loc, label=name)
        self.decls[unique] = decl
        self.tensor_frame[unique] = frame
        if role == "local":
            block.append(Alloc(unique))
        return decl

    def state_tensor(self, name: str, shape, dtype: str) -> TensorDecl:
        """An engine's registers: one kernel-level tensor per register file,
        declared on first use (no allocation: they are not in SBUF or PSUM)."""
        decl = self.decls.get(name)
        if decl is None:
            decl = self._declare(shape, dtype, "reg", name, "state", None, self._frames[0], self._blocks[0])
        return decl

    def new_register(self, loc: Loc | None) -> TensorDecl:
        """A virtual register: a one-element int32 tensor in the `reg` buffer,
        live for the whole kernel (an engine sequencer's register)."""
        return self._declare((1, 1), "int32", "reg", "reg", "state", loc, self._frames[0], self._blocks[0])

    def runtime_loop(self, loc: Loc, head: Callable[[], None]) -> Iterator[None]:
        """A loop whose trip count only the hardware knows (nl.fori_loop,
        nl.while_loop): traced once; `head` emits its loop_guard as the first
        statement of the body. Analyses see a dynamic loop of unknown trip
        count, taken as 2 so that every cross-iteration dependence counts."""
        self.loop_stats["dynamic"] += 1
        var = f"r{next(self._vars)}"
        frame = _Frame(self._frames[-1].key + (("dyn", loc.line, var),), var, 2, "dynamic")
        inner = self._in_loop(frame, None, lambda body: Loop(var, 2, 0, 1, "dynamic", body, loc))
        next(inner)
        head()
        yield
        next(inner, None)

    def _grid_shared(self, shape, dtype: str, name: str, loc: Loc | None) -> TensorDecl:
        """Under a launch grid every program sees the same shared_hbm tensors: the
        n-th one a program allocates is allocated once, before the grid loops."""
        n = self._shared_next
        self._shared_next += 1
        if n < len(self._shared):
            decl = self._shared[n]
            if decl.shape != tuple(int(d) for d in shape) or decl.dtype != dtype:
                raise NkiccError("E104", f"programs of the launch grid allocate different shared_hbm tensors: "
                                         f"{decl.dtype}{list(decl.shape)} and {dtype}{list(shape)}", loc,
                                 "allocate the same nl.shared_hbm outputs in every program")
            return decl
        decl = self._declare(shape, dtype, "shared_hbm", name, "local", loc, self._frames[0], self._blocks[0])
        self._shared.append(decl)
        return decl

    def launch(self, grid: tuple[int, ...], call: Callable[[], object], program: tuple[int, ...] | None = None):
        """Run `call` (the kernel body) once per program id of a launch grid: one
        static loop per grid axis, axis 0 outermost, whose index is the program
        id. The loops roll, split and go concrete like any other static loop.
        With `program`, only that program: the trace of one core of a
        multi-core launch, whose programs run at once and meet at sendrecv,
        core_barrier and collectives."""
        self.grid = tuple(grid)
        self.program_ids = [0] * len(grid)
        if program is not None:
            self.program_ids = list(program)
            self._shared_next = 0
            return call()

        def level(axis: int):
            if axis == len(self.grid):
                self._shared_next = 0
                return call()
            result = None
            for pid in self.static_loop(0, 1, self.grid[axis], LoopSite(GRID, axis, 0, GRID)):
                self.program_ids[axis] = pid
                result = level(axis + 1)
            return result

        return level(0)

    def set_role(self, name: str, role: str) -> None:
        self.decls[name] = dataclasses.replace(self.decls[name], role=role)

    def warn(self, code: str, message: str, loc: Loc | None) -> None:
        self.warnings.setdefault((code, loc), NkiccError(code, message, loc))

    # statements
    def emit(self, opcode: str, outs, ins, attrs: dict | None = None, loc: Loc | None = None) -> Op:
        for a in list(outs) + [x for x in ins if isinstance(x, Access)]:
            self.check_live(a, loc)
        if self.stop_if_meeting and meets_others(opcode, (attrs or {}).get("groups")):
            raise MeetsOtherCores()
        op = Op(opcode, tuple(outs), tuple(ins), tuple((attrs or {}).items()), loc or user_loc(3))
        self._blocks[-1].append(op)
        return op

    def retarget_last(self, tensor: str, access: Access) -> bool:
        """Make the last instruction write `access` instead of `tensor`, a tile made
        in this block that no other statement since its Alloc touches (NKI 0.1's
        `t[k] = op(...)` is op writing t[k]; language/legacy.py). Whether it did."""
        block = self._blocks[-1]
        start = next((i for i in range(len(block) - 1, -1, -1)
                      if isinstance(block[i], Alloc) and block[i].tensor == tensor), None)
        at = next((i for i in range(len(block) - 1, -1, -1) if not isinstance(block[i], Alloc)), None)
        # (allocations may follow it: the tile it is to write now)
        if start is None or at is None or at < start or not isinstance(block[at], Op) \
                or tuple(a.tensor for a in block[at].outs) != (tensor,):
            return False
        for stmt in block[start + 1:at]:
            if not isinstance(stmt, (Op, Alloc)) or _mentions(stmt, tensor):
                return False
        last = block[at]
        if any(_mentions_access(i, tensor) for i in last.ins):
            return False
        decl = self.decls[access.tensor]
        if decl.on_chip and ops.get(last.opcode).engine != "dma":  # compute engines start at partition 0
            lo, hi = access.offset.bounds(self.trips())
            if not (0 <= lo and hi < math.prod(decl.shape[1:])):
                return False
        self.check_live(access, last.loc)
        block[at] = Op(last.opcode, (access,), last.ins, last.attrs, last.loc)
        later = [i for i in range(at + 1, len(block)) if block[i].tensor == access.tensor]
        if later:  # the tile it now writes was allocated after it: allocate it before
            block.insert(at, block.pop(later[0]))
        return True

    def zero_if_unwritten(self, whole: Access, loc: Loc | None = None) -> bool:
        """Zero the tile `whole` right after its Alloc if nothing has written it yet: NKI 0.1's
        `psum[...] += nc_matmul(...)` into a fresh PSUM tile starts an accumulation group,
        which the hardware begins from zero (language/legacy.py). Whether it did."""
        tensor = whole.tensor
        for depth, block in enumerate(self._blocks):
            at = next((i for i, s in enumerate(block) if isinstance(s, Alloc) and s.tensor == tensor), None)
            if at is None:
                continue
            later = Block(tuple(block[at + 1:]) + tuple(s for b in self._blocks[depth + 1:] for s in b))
            if any(isinstance(s, Op) and any(a.tensor == tensor for a in s.outs) for s in later.walk()):
                return False
            block.insert(at + 1, Op("memset", (whole,), (), (("value", 0.0),), loc or user_loc(3)))
            return True
        return False

    def check_live(self, access: Access, loc: Loc | None = None) -> None:
        """A tensor or index that outlives the rolled loop piece it was made in
        would behave differently rolled and unrolled: trace that loop concretely."""
        frame = self.tensor_frame.get(access.tensor)
        if frame is not None and frame.ended and frame.kind == "static":
            raise TraceRetry(frame.key, concrete=True, why=f"tensor {access.tensor} is used after its loop")
        self.check_vars(access.offset, loc)
        if access.scalar is not None:
            if access.scalar.register:
                self.check_vars(Affine.var(access.scalar.register), loc)
            if access.scalar.tensor:
                self.check_live(Access(access.scalar.tensor, access.scalar.offset, ((1, 1),)), loc)
        if access.vector is not None:
            self.check_live(access.vector, loc)

    def check_vars(self, expr: Affine, loc: Loc | None = None) -> None:
        for v in expr.vars:
            frame = self.var_frame[v]
            if frame.ended:
                if frame.kind == "dynamic":
                    raise NkiccError("E151", f"the dynamic_range index {v} is used after its loop", loc or user_loc(3),
                                     "copy it into a tensor inside the loop")
                raise TraceRetry(frame.key, concrete=True, why=f"index {v} is used after its loop")

    def trips(self) -> dict[str, int]:
        # Ended loops stay in: an index used after its loop is caught (and the
        # loop traced concretely) where the access is emitted, not by a KeyError here.
        return {v: f.trip for v, f in self.var_frame.items()}

    def finish(self, outputs: list[str], args: list[str], loc: Loc | None, views: tuple = ()) -> "Kernel":
        """The traced kernel; `views`: empty, or one View (None: the whole tensor) per output."""
        assert len(self._blocks) == 1
        for name in outputs:
            if self.decls[name].role != "arg":  # a returned argument stays an argument (the caller's array)
                self.set_role(name, "output")
        body = Block(tuple(self._blocks[0]))
        if self.late_edits:
            edits = {k: new for k, (_, new) in self.late_edits.items()}
            body = map_stmts(body, lambda s: [edits.get(id(s), s)])
        views = tuple(views) if any(v is not None for v in views) else ()
        return Kernel(self.name, tuple(self.decls.values()), tuple(args), tuple(outputs), body, loc, views)

    # loops
    def _child_key(self, site: LoopSite) -> tuple:
        parent = self._frames[-1]
        where = (site.file, site.line, site.col)
        n = parent.children.get(where, 0)
        parent.children[where] = n + 1
        return parent.key + ((where, n),)

    def static_loop(self, start: int, step: int, trip: int, site: LoopSite,
                    independent: bool = False) -> Iterator[object]:
        key = self._child_key(site)
        plan = self.policy.plan(key, trip, site)
        loc = Loc(site.file, site.line)
        if plan.concrete:
            self.loop_stats["concrete"] += 1
            return self._concrete(start, step, trip)
        bounds = sorted({0, trip, *(p for p in plan.splits if 0 < p < trip)})
        pieces = list(zip(bounds, bounds[1:]))
        if len(pieces) > 1:
            self.loop_stats["split"] += 1
        return self._pieces(key, start, step, pieces, loc, independent)

    def _concrete(self, start: int, step: int, trip: int) -> Iterator[int]:
        parent = self._frames[-1]
        for t in range(trip):
            parent.children.clear()
            yield start + step * t

    def _pieces(self, key: tuple, start: int, step: int, pieces, loc: Loc,
                independent: bool = False) -> Iterator[object]:
        parent = self._frames[-1]
        for lo, hi in pieces:
            parent.children.clear()
            if hi - lo == 1:
                yield start + step * lo
                continue
            self.loop_stats["rolled"] += 1
            var = f"i{next(self._vars)}"
            if independent:
                self.affine_vars.add(var)
            frame = _Frame(key, var, hi - lo, "static", lo)
            index = SymInt(Affine.var(var, step, start + step * lo), self)
            yield from self._in_loop(frame, index, lambda body: Loop(var, hi - lo, start + step * lo, step, "static", body, loc))

    def dynamic_loop(self, start: int, step: int, trip: int, loc: Loc) -> Iterator[object]:
        self.loop_stats["dynamic"] += 1
        var = f"r{next(self._vars)}"
        frame = _Frame(self._frames[-1].key + (("dyn", loc.line, var),), var, trip, "dynamic")
        index = SymInt(Affine.var(var, step, start), self)
        yield from self._in_loop(frame, index, lambda body: Loop(var, trip, start, step, "dynamic", body, loc))

    def _in_loop(self, frame: _Frame, index: "SymInt", make: Callable[[Block], Loop]) -> Iterator[object]:
        frame.depth = len(self._frames)
        self._frames.append(frame)
        self.var_frame[frame.var] = frame
        self._blocks.append([])
        yield index
        # Reached only when the body completed normally; an exception abandons the trace.
        body = self._blocks.pop()
        self._frames.pop()
        frame.ended = True
        if body:
            self._blocks[-1].append(make(Block(tuple(body))))

    # questions about symbolic indices
    def decide(self, expr: Affine, rel: str, describe: str) -> bool:
        """Answer `expr <rel> 0` if it has one answer over the loop ranges;
        else ask the driver to split a loop where the answer changes, or, when
        no single loop can separate the answers, to trace one concretely."""
        loc = user_loc(3)
        self.check_vars(expr, loc)
        trips = self.trips()
        answer = _uniform(*expr.bounds(trips), rel)
        if answer is not None:
            return answer
        dyn = [v for v in expr.vars if self.var_frame[v].kind == "dynamic"]
        if dyn:
            raise NkiccError("E150", f"`{describe}` depends on the dynamic_range index {dyn[0]}, "
                                     "which is only known at run time", loc,
                             "use a static loop, or move the decision into the data (nl.where / a mask)")
        constant = None
        for var in sorted(expr.vars, key=lambda v: self.var_frame[v].depth):
            c = expr.coeff(var)
            rest_lo, rest_hi = Affine(tuple(t for t in expr.terms if t[0] != var), expr.const).bounds(trips)
            status = [_uniform(c * t + rest_lo, c * t + rest_hi, rel) for t in range(trips[var])]
            points = [t for t in range(1, len(status)) if status[t] != status[t - 1]]
            if points:
                frame = self.var_frame[var]
                raise TraceRetry(frame.key, split=frozenset(p + frame.first for p in points),
                                 why=f"`{describe}` changes inside the loop")
            constant = status[0]
        if constant is not None and len(expr.vars) == 1:
            return constant
        var = min(expr.vars, key=lambda v: trips[v])
        raise TraceRetry(self.var_frame[var].key, concrete=True,
                         why=f"`{describe}` depends on several loop indices")

    def constant_size(self, expr: Affine, what: str, hint: str) -> int:
        """A size that must be one number (a slice's, an nl.ds's, a tensor
        dimension): NKI's static loops are Python ranges, so where a size moves
        with a static loop's index that loop is traced concretely; a hardware
        loop (dynamic_range) has one instruction stream, so there it is E102."""
        if expr.is_const:
            return expr.const
        loc = user_loc(3)
        self.check_vars(expr, loc)
        dyn = [v for v in expr.vars if self.var_frame[v].kind == "dynamic"]
        if dyn:
            raise NkiccError("E102", f"{what} depends on the dynamic_range index {dyn[0]} ({expr})", loc, hint)
        self.need_concrete(expr, f"{what} moves with the loop index")

    def need_concrete(self, expr: Affine, why: str) -> None:
        loc = user_loc(3)
        self.check_vars(expr, loc)
        for v in expr.vars:
            frame = self.var_frame[v]
            if frame.kind == "dynamic":
                raise NkiccError("E150", f"{why} needs the value of the dynamic_range index {v}, "
                                         "which is only known at run time", loc,
                                 "use a static loop for indices that select Python objects")
        frame = max((self.var_frame[v] for v in expr.vars), key=lambda f: f.depth)
        raise TraceRetry(frame.key, concrete=True, why=why)


def _uniform(lo: int, hi: int, rel: str) -> bool | None:
    """`x <rel> 0` for every x in [lo, hi], if it has one answer; else None."""
    if rel in ("==", "!="):
        if lo == hi:
            hit = lo == 0
        elif lo > 0 or hi < 0:
            hit = False
        else:
            return None
        return hit if rel == "==" else not hit
    test = _RELATIONS[rel]
    a, b = test(lo), test(hi)
    return a if a == b else None


_RELATIONS = {"<": lambda v: v < 0, "<=": lambda v: v <= 0, ">": lambda v: v > 0, ">=": lambda v: v >= 0}


class SymInt:
    """A loop index, or an affine expression of loop indices, while tracing."""
    __slots__ = ("expr", "builder")

    def __init__(self, expr: Affine, builder: Builder) -> None:
        self.expr = expr
        self.builder = builder

    @staticmethod
    def wrap(expr: Affine, builder: Builder) -> "SymInt | int":
        return expr.const if expr.is_const else SymInt(expr, builder)

    # arithmetic that stays affine
    def __add__(self, other):
        o = _affine(other)
        if o is None:
            return self._float_or_concrete(other, "+")
        return SymInt.wrap(self.expr + o, self.builder)

    __radd__ = __add__

    def __sub__(self, other):
        o = _affine(other)
        if o is None:
            return self._float_or_concrete(other, "-")
        return SymInt.wrap(self.expr - o, self.builder)

    def __rsub__(self, other):
        o = _affine(other)
        if o is None:
            return self._float_or_concrete(other, "-")
        return SymInt.wrap(o - self.expr, self.builder)

    def __mul__(self, other):
        if isinstance(other, bool) or not isinstance(other, int):
            if isinstance(other, SymInt):
                self.builder.need_concrete(other.expr, "a product of two loop indices")
            return self._float_or_concrete(other, "*")
        return SymInt.wrap(self.expr.scale(other), self.builder)

    __rmul__ = __mul__

    def __neg__(self):
        return SymInt.wrap(-self.expr, self.builder)

    def __pos__(self):
        return self

    def __floordiv__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other > 0:
            exact = self.expr.floordiv_exact(other)
            if exact is not None:
                return SymInt.wrap(exact, self.builder)
            lo, hi = self.expr.bounds(self.builder.trips())
            if lo // other == hi // other:
                return lo // other
        self.builder.need_concrete(self.expr, f"`{self} // {other}`")

    def __mod__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other > 0:
            q = self.__floordiv__(other)
            return self - q * other
        self.builder.need_concrete(self.expr, f"`{self} % {other}`")

    def __divmod__(self, other):
        return self // other, self % other

    def __invert__(self):
        return -self - 1

    def __lshift__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            return self * (1 << other)
        self.builder.need_concrete(self.expr, f"`{self} << {other!r}`")

    def __rshift__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            return self // (1 << other)
        self.builder.need_concrete(self.expr, f"`{self} >> {other!r}`")

    def __pow__(self, other, mod=None):
        if mod is None and isinstance(other, int) and not isinstance(other, bool) and other in (0, 1):
            return 1 if other == 0 else self
        self.builder.need_concrete(self.expr, f"`{self} ** {other!r}`")

    # int results that are not affine in the index (or float ones): the loop is traced concretely
    def _not_affine(self, other, sym):
        self.builder.need_concrete(self.expr, f"`{self} {sym} {other!r}`")

    def __truediv__(self, other):
        return self._not_affine(other, "/")

    def __rtruediv__(self, other):
        return self._not_affine(other, "/ (reflected)")

    def __rfloordiv__(self, other):
        return self._not_affine(other, "// (reflected)")

    def __rmod__(self, other):
        return self._not_affine(other, "% (reflected)")

    def __rdivmod__(self, other):
        return self._not_affine(other, "divmod (reflected)")

    def __rpow__(self, other, mod=None):
        return self._not_affine(other, "** (reflected)")

    def __rlshift__(self, other):
        return self._not_affine(other, "<< (reflected)")

    def __rrshift__(self, other):
        return self._not_affine(other, ">> (reflected)")

    def __and__(self, other):
        return self._not_affine(other, "&")

    def __or__(self, other):
        return self._not_affine(other, "|")

    def __xor__(self, other):
        return self._not_affine(other, "^")

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    # int rounding is the identity
    def __round__(self, ndigits=None):
        if ndigits is None or (isinstance(ndigits, int) and ndigits >= 0):
            return self
        self.builder.need_concrete(self.expr, f"`round({self}, {ndigits!r})`")

    def __trunc__(self):
        return self

    __floor__ = __ceil__ = __trunc__

    def _float_or_concrete(self, other, sym):
        if getattr(other, "_is_index_grid", False):  # `i * 128 + nl.arange(128)`: an index grid (grid.py)
            return NotImplemented
        self.builder.need_concrete(self.expr, f"`{self} {sym} {other!r}`")

    # comparisons: answered over the whole range, or the loop is split
    def _cmp(self, other, sym):
        o = _affine(other)
        if o is None:
            if isinstance(other, float):
                self.builder.need_concrete(self.expr, f"comparing {self} with a float")
            return NotImplemented
        return self.builder.decide(self.expr - o, sym, f"{self} {sym} {other}")

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __eq__(self, other):
        return self._cmp(other, "==")

    def __ne__(self, other):
        return self._cmp(other, "!=")

    def __bool__(self):
        return self.builder.decide(self.expr, "!=", f"bool({self})")

    def __abs__(self):
        return self if self >= 0 else -self

    # anything that needs a Python int traces the loop concretely
    def __index__(self):
        self.builder.need_concrete(self.expr, f"using {self} as a Python int")

    __int__ = __index__

    def __float__(self):
        self.builder.need_concrete(self.expr, f"using {self} as a float")

    def __hash__(self):
        self.builder.need_concrete(self.expr, f"hashing {self}")

    # labels only: f"name_{i}" gives a readable name, never a value
    def __format__(self, spec):
        return str(self.expr).replace(" ", "")

    def __str__(self):
        return str(self.expr).replace(" ", "")

    def __repr__(self):
        return f"SymInt({self.expr})"


def _mentions_access(x, tensor: str) -> bool:
    if not isinstance(x, Access):
        return False
    return (x.tensor == tensor or (x.scalar is not None and x.scalar.tensor == tensor)
            or (x.vector is not None and _mentions_access(x.vector, tensor)))


def _mentions(stmt, tensor: str) -> bool:
    if isinstance(stmt, Alloc):
        return stmt.tensor == tensor
    return any(_mentions_access(a, tensor) for a in stmt.outs + stmt.ins)


def _affine(value) -> Affine | None:
    if isinstance(value, SymInt):
        return value.expr
    if isinstance(value, int) and not isinstance(value, bool):
        return Affine.of(value)
    if isinstance(value, bool):
        return Affine.of(int(value))
    return None


def as_affine(value, what: str = "index") -> Affine:
    """An int or SymInt as an Affine; numpy integers accepted."""
    a = _affine(value)
    if a is not None:
        if isinstance(value, SymInt):
            value.builder.check_vars(a, user_loc(3))  # an index used after its loop
        return a
    try:
        return Affine.of(operator.index(value))
    except TypeError:
        raise NkiccError("E103", f"{what} must be an integer or a loop index, got {type(value).__name__}",
                         user_loc(3)) from None
