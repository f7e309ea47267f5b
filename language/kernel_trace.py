"""Trace a kernel into rolled IR, retrying with what each attempt learned.

An attempt runs the kernel's Python body with tracer tensors. When the body
asks a question that has no single answer over a loop's range, or needs a
Python int, the attempt stops with a `TraceRetry` naming the loop and what to
do with it (split at given iterations, or trace concretely); the next attempt
starts over with that decision. Attempts take milliseconds.
"""
from __future__ import annotations

import dis
import functools
import time
import types
from dataclasses import dataclass, field

from ..ir import Kernel, Loc, NkiccError
from ..ir.nodes import View
from ..ir.loopdeps import check_affine_loops
from . import ranges
from .argspec import TensorSpec
from .tensor import Tensor, row_major
from .tracing import GRID, Builder, LoopPlan, LoopSite, MeetsOtherCores, TraceRetry
from .dialect import dialect_of, rebind, setitem_of
from .grid_races import grid_races
from .loop_effects import EffectChecker
from .sources import function_node, source_file
from .usererrors import user_error
from .userframes import _innermost_is_nkicc, _user_frame

MAX_ATTEMPTS = 2000
_GET_ITER = dis.opmap["GET_ITER"]


@dataclass
class RetryPolicy:
    splits: dict = field(default_factory=dict)
    concrete: dict = field(default_factory=dict)  # key -> reason
    effects: EffectChecker = field(default_factory=EffectChecker)
    _sites: dict = field(default_factory=dict)
    unroll: bool = False  # trace every static loop concretely: NKI's own semantics, the oracle

    def site(self, frame) -> LoopSite | None:
        code, lasti = frame.f_code, frame.f_lasti
        cached = self._sites.get((code, lasti), 0)
        if cached == 0:
            cached = self._find_site(code, lasti)
            self._sites[(code, lasti)] = cached
        if cached is None:
            return None
        return LoopSite(cached[0], cached[1], cached[2], cached[3], frame.f_globals, frame.f_locals)

    def _find_site(self, code, lasti):
        if lasti < 0 or code.co_code[lasti] != _GET_ITER:
            return None  # list(...), star-unpacking, etc.: plain iteration
        if hasattr(code, "co_positions"):
            positions = list(code.co_positions())[lasti // 2]
            f = source_file(code.co_filename)
            node = None if f is None else f.loop_at(positions)
            line, col = positions[0], positions[2]
        else:  # Python 3.10 has no column positions: such loops are traced concretely
            line, col, node = 0, 0, None
        if node is False:
            return None  # a comprehension
        return (code.co_filename, line or 0, col or 0, node)

    def plan(self, key: tuple, trip: int, site: LoopSite) -> LoopPlan:
        if self.unroll:
            return LoopPlan(concrete=True, reason="unrolled trace")
        if key in self.concrete:
            return LoopPlan(concrete=True, reason=self.concrete[key])
        reason = self._body_reason(site)
        if reason:
            self.concrete[key] = reason
            return LoopPlan(concrete=True, reason=reason)
        return LoopPlan(splits=frozenset(self.splits.get(key, ())))

    def _body_reason(self, site: LoopSite) -> str | None:
        node = site.node
        if node is None:
            return "the loop's source is not available"
        if node is GRID:
            return None  # a launch grid: every program runs the kernel body afresh, no Python state crosses
        # the checker caches per node and per value of the compile-time switches it read
        return self.effects.loop_reason(node, site.frame_globals, site.frame_locals)

    def carried(self) -> "RetryPolicy":
        """A policy for another program of the same launch that starts from this one's
        decisions (a split or a concrete loop is valid in any program: at worst less rolled)
        and shares its caches."""
        return RetryPolicy({k: set(v) for k, v in self.splits.items()}, dict(self.concrete), self.effects,
                           self._sites, self.unroll)

    def learn(self, retry: TraceRetry) -> None:
        if retry.concrete:
            if retry.key in self.concrete:
                raise RuntimeError(f"trace retry did not progress: {retry.why}")
            self.concrete[retry.key] = retry.why
            return
        known = self.splits.setdefault(retry.key, set())
        if retry.split <= known:
            raise RuntimeError(f"trace retry did not progress: {retry.why}")
        known |= retry.split


@dataclass
class TraceResult:
    kernel: Kernel | None  # None after a source-level cache hit (nothing was traced)
    attempts: int
    seconds: float
    loops: dict
    decisions: dict
    warnings: list
    counts: list | None = None  # [rolled, unrolled, executed] of the traced kernel, kept by a cache hit
    static_loops: int | None = None  # the traced kernel's static loops, kept by a cache hit
    policy: RetryPolicy | None = field(default=None, repr=False, compare=False)  # what the attempts learned


def _traced_function(fn: types.FunctionType, dialect: str | None = None) -> types.FunctionType:
    """The kernel with the builtin `range` replaced by nkicc's rolling one, in
    the kernel's own module namespace only (and, for an explicit `dialect`,
    its nl and nisa modules by that dialect's: dialect.py)."""
    g = dict(fn.__globals__)
    g["range"] = ranges.range
    rebind(g, dialect)
    clone = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


def trace_kernel(fn, tensor_args: dict[str, TensorSpec], constants: dict, name: str | None = None,
                 unroll: bool = False, grid: tuple[int, ...] | None = None,
                 program: tuple[int, ...] | None = None, nc_version: int | None = None,
                 dialect: str | None = None, stop_if_meeting: bool = False,
                 learned: RetryPolicy | None = None) -> TraceResult:
    """Trace `fn` with HBM tensors for `tensor_args` and Python values for
    `constants` (both keyed by parameter name). With `unroll`, every static
    loop runs once per iteration, as NKI itself traces. With a launch `grid`
    the body runs once per program id, as rolled loops (language/spmd.py).
    stop_if_meeting: a grid's trace raises MeetsOtherCores at the first instruction that
    meets another core (its `policy` what the attempts learned). learned: start from
    another program's policy (RetryPolicy.carried) instead of from nothing."""
    start = time.perf_counter()
    fn = inspect_unwrap(fn)
    dialect = dialect or dialect_of(fn)
    traced = _traced_function(fn, dialect)
    policy = learned.carried() if learned is not None and learned.unroll == unroll else RetryPolicy(unroll=unroll)
    kernel_loc = Loc(fn.__code__.co_filename, _source_lines(fn)[0])
    for attempt in range(1, MAX_ATTEMPTS + 1):
        builder = Builder(name or fn.__name__, policy)
        if nc_version is not None:
            builder.nc_version = nc_version
        builder.setitem = setitem_of(dialect)
        builder.stop_if_meeting = stop_if_meeting
        with builder:
            kwargs = dict(constants)
            for pname, spec in tensor_args.items():
                kwargs[pname] = Tensor(builder, builder.new_tensor(spec.shape, spec.dtype, "hbm", pname, "arg"))
            try:
                result = builder.launch(grid, lambda: traced(**kwargs), program) if grid else traced(**kwargs)
            except TraceRetry as retry:
                policy.learn(retry)
                continue
            except MeetsOtherCores as stop:
                stop.policy = policy
                raise
            except NkiccError as err:
                if err.loc is None:  # raised below a layer that did not know the kernel's line
                    err.loc = _user_frame(err.__traceback__)
                raise
            except Exception as exc:  # the kernel's own Python failed (RecursionError included)
                if _innermost_is_nkicc(exc.__traceback__):
                    raise
                err = user_error(exc)
                if err is not None:
                    raise err from None
                raise NkiccError("E001", f"{type(exc).__name__}: {exc}", _user_frame(exc.__traceback__),
                                 "a Python error in the kernel body") from None
            try:
                outputs, views = _outputs(result, builder, kernel_loc)
            except NkiccError as err:
                if err.loc == kernel_loc:  # point at the kernel's return statement when it has one
                    err.loc = Loc(kernel_loc.file, _source_lines(fn)[1] or kernel_loc.line)
                raise
            if not outputs:
                _warn_no_return(builder, fn, kernel_loc)
            kernel = builder.finish(outputs, list(tensor_args), kernel_loc, views)
        for warning in check_affine_loops(kernel, builder.affine_vars) + grid_races(kernel):  # (E190 raises)
            builder.warnings.setdefault((warning.code, warning.loc), warning)
        seconds = time.perf_counter() - start
        return TraceResult(kernel, attempt, seconds, dict(builder.loop_stats),
                           {"splits": {str(k): sorted(v) for k, v in policy.splits.items()},
                            "concrete": {str(k): v for k, v in policy.concrete.items()}},
                           list(builder.warnings.values()), policy=policy)
    raise NkiccError("E180", f"tracing did not settle after {MAX_ATTEMPTS} attempts", kernel_loc,
                     "the kernel branches on loop indices in too many places; use smaller static loops")


def _warn_no_return(builder: Builder, fn, kernel_loc: Loc) -> None:
    """A kernel that returns nothing keeps nothing: every instruction is dead and
    dce removes it. A warning, not an error: the kernel traces and runs (NKI
    accepts it too), and a kernel being written is often in this state."""
    line = _source_lines(fn)[1]
    loc = Loc(kernel_loc.file, line) if line else kernel_loc
    what = "returns None" if line else "has no return statement"
    builder.warnings[("W104", loc)] = NkiccError(
        "W104", f"kernel {fn.__name__} {what}: nothing it computes is kept, and the passes remove its work", loc,
        "return the nl.shared_hbm tensor(s) it writes")


@functools.lru_cache(maxsize=256)
def _source_lines(fn) -> tuple[int, int | None]:
    """The line of the kernel's `def` (not its decorator) and of its one
    top-level `return` statement (None unless there is exactly one)."""
    import ast

    node = function_node(fn)
    if node is None:
        return fn.__code__.co_firstlineno, None
    returns = []
    stack = list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            returns.append(n.lineno)
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))
    return node.lineno, (returns[0] if len(returns) == 1 else None)


def inspect_unwrap(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    if not isinstance(fn, types.FunctionType):
        raise NkiccError("E200", f"{fn!r} is not a Python function", None, "pass the kernel function itself")
    return fn


def _outputs(result, builder: Builder, loc: Loc) -> tuple[list[str], list[View | None]]:
    """The returned tensors' names, and the view each is returned through (None: the whole tensor)."""
    if result is None:
        return [], []
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    names, views = [], []
    for item in items:
        if not isinstance(item, Tensor):
            raise NkiccError("E104", f"the kernel returns a {type(item).__name__}; kernels return HBM tensors", loc,
                             "return tensors made with nl.ndarray(..., buffer=nl.shared_hbm)")
        if item.decl.on_chip:
            raise NkiccError("E104", f"the kernel returns {item.shown}, which lives in {item.buffer}", loc,
                             "store the tile into an nl.shared_hbm tensor and return that")
        if item.decl.role == "arg":  # an output tensor the caller passed in (nt.mutable_tensor): NKI returns it
            a = item.access
            # the whole argument in its order, perhaps reshaped (a squeeze and the unsqueeze back, as
            # the library's attention_block_tkg returns its K cache)
            if not (a.offset.is_const and a.offset.const == 0 and a.scalar is None and a.vector is None
                    and a.dtype is None and _merged(a.pattern) == _merged(row_major(item.decl.shape))):
                raise NkiccError("E104", f"the kernel returns a part of its argument {item.shown}", loc,
                                 "return the whole argument tensor")
            names.append(item.name)
            views.append(None if tuple(item.shape) == tuple(item.decl.shape) else _returned_view(item, loc))
            continue
        if builder.grid and item.buffer != "shared_hbm":
            raise NkiccError("E104", f"the kernel launched on a grid returns {item.shown}, which lives in "
                                     f"{item.buffer}; each program would have its own", loc,
                             "return tensors made with nl.ndarray(..., buffer=nl.shared_hbm)")
        names.append(item.name)
        views.append(_returned_view(item, loc))
    return names, views


def _merged(pattern) -> tuple:
    """An access pattern's [step, num] pairs with size-1 dimensions dropped (their step is moot)
    and dimensions that continue each other merged: one form for every reshape of one layout."""
    out: list[tuple[int, int]] = []
    for step, num in reversed([tuple(p) for p in pattern if p[1] != 1]):
        if out and step == out[-1][0] * out[-1][1]:
            out[-1] = (out[-1][0], out[-1][1] * num)
        else:
            out.append((step, num))
    return tuple(reversed(out))


def _returned_view(item: Tensor, loc: Loc) -> View | None:
    """The view of its tensor that a returned `item` is (a reshape, an .ap pattern,
    a slice), None when it is the whole tensor as declared: the caller gets what
    the `return` names, not the tensor behind it."""
    a = item.access
    if a.scalar is not None or a.vector is not None or not a.offset.is_const:
        raise NkiccError("E104", f"the kernel returns a view of {item.shown} whose position is known only at "
                                 "run time (a loop index or runtime offset)", loc,
                         "return the whole tensor, or a view at a fixed offset")
    if a.offset.const == 0 and a.dtype is None and tuple(a.pattern) == row_major(item.decl.shape):
        return None
    return View(a.offset.const, tuple(a.pattern), a.dtype)
