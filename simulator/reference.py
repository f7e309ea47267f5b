"""The reference simulator: executes rolled IR directly in numpy.

Every tensor is a flat numpy array of its own dtype, so a view is a strided
window onto it; loops are interpreted rolled (static and dynamic alike, the
index being the register value). New on-chip tensors are poisoned (NaN for
floats, 4 for ints, as in the vendor's simulator) so that reads of never-written
memory show. PSUM keeps a written-mask per element for the matmul
accumulate=None rule: the first write to a location overwrites, later ones add.

`check_defined(kernel, inputs, outputs)` turns poison that reached an output
into an error (E173: read of never-written memory; E174: output elements never
written); a kernel call skips it under undefined="poison" (driver/api.py). It
costs nothing unless an output holds poison-like values (NaN or the int
sentinel); then it runs the kernel again with a different poison and a
written-mask per tensor, and reports only outputs that change with the poison.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..ir import Access, Alloc, Block, Const, Kernel, Loop, NkiccError, Op, TensorDecl
from ..ir.analysis import pattern_span, runtime_guard, written_args
from ..ir.ops.collectives import payload as collective_payload
from .comm import RankComm, single
from ..ir import dtypes, ops
from ..ir.ops import debug
from ..ir import numerics
from . import oob_skip, semantics
from .returned import returned
from ._blas import single_threaded_blas


def poison(dt: np.dtype, n: int, fill=None) -> np.ndarray:
    """n elements of the value that marks never-written memory."""
    if fill is not None:
        return np.full(n, fill(dt) if callable(fill) else fill, dtype=dt)
    return np.full(n, semantics.poison_value(dt), dtype=dt)


def strided(flat: np.ndarray, start: int, pattern) -> np.ndarray:
    item = flat.itemsize
    base = flat[start:]
    if flat.dtype.kind in "fV" and flat.dtype.type.__module__.startswith("ml_dtypes"):
        # as_strided goes through __array_interface__, which cannot name some
        # ml_dtypes (float8_e5m2 is '<f1'): stride raw bytes, then view back
        raw = as_strided(base.view(np.dtype(f"u{item}")), shape=tuple(n for _, n in pattern),
                         strides=tuple(s * item for s, _ in pattern), writeable=True)
        return raw.view(flat.dtype)
    return as_strided(base, shape=tuple(n for _, n in pattern),
                      strides=tuple(s * item for s, _ in pattern), writeable=True)


def gather_index(a: Access, start: int, indices, size: int, op: Op, decl: TensorDecl
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(flat element indices shaped like the access, which rows are in range)
    of a vector_offset access whose offset is `start` now, given its index
    tile's values; a row out of range is E170 unless the op skips it
    (oob_mode.skip). Both simulators use it."""
    if a.vector_group:
        return _indirect_index(a, start, indices, size, op, decl)
    rows = _index_values(np.asarray(indices).reshape(-1))
    first = start + rows * a.scalar_scale  # each row's first element
    idx = first.reshape((-1,) + (1,) * (len(a.pattern) - 1))
    for axis, (s, n) in enumerate(a.pattern[1:], 1):
        shape = [1] * len(a.pattern)
        shape[axis] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    inside = rows_inside(first, a.pattern[1:], size)
    if not inside.all() and op.attr("oob") != "skip":
        bad = int(np.flatnonzero(~inside)[0])
        raise NkiccError("E170", f"{op.opcode}: row {bad} of the vector_offset view of {decl.described()} (index "
                                 f"{int(rows[bad])}) falls outside it", op.loc,
                         "keep the indices in range, or pass oob_mode=nisa.oob_mode.skip")
    return idx, inside


def rows_inside(first: np.ndarray, pattern, size: int) -> np.ndarray:
    """Which gathered rows lie inside [0, size): a row from `first` over the (step, num) pairs
    reaches first + the negative spans at its lowest and first + the positive ones at its
    highest (one comparison per row, not per element: a gather's rows are thousands of elements)."""
    if any(n == 0 for _, n in pattern):  # (no element at all: nothing to be outside)
        return np.ones(len(first), dtype=bool)
    lo, hi = pattern_span(pattern)
    return (first + lo >= 0) & (first + hi < size)


def _index_values(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind not in "iu":
        values = np.nan_to_num(values.astype(np.float64), nan=-1)
    return values.astype(np.int64)


def _indirect_index(a: Access, start: int, indices, size: int, op: Op, decl: TensorDecl
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The flat element indices of a tensor-indirection view ([P, n]): column i
    at index[i % G, i // G] steps of the free dimension, G = a.vector_group."""
    g = a.vector_group
    (pstep, parts), (_, n) = a.pattern
    table = np.asarray(indices)
    table = table.reshape(table.shape[0], -1)
    if table.shape[0] < g or n > g * table.shape[1]:
        raise NkiccError("E130", f"{op.opcode}: the indirect view of {decl.described()} takes {n} offsets in groups "
                                 f"of {g} partitions; its index tile is {list(table.shape)}", op.loc,
                         f"give the index at least {g} partitions and ceil({n}/{g}) columns")
    cols = _index_values(table[:g].T.reshape(-1)[:n])
    idx = start + np.arange(parts, dtype=np.int64)[:, None] * pstep + cols[None, :] * a.scalar_scale
    row = size // decl.shape[0]  # elements per partition: an offset may not run into the next one
    free_at = start % row + cols * a.scalar_scale
    inside = (idx >= 0) & (idx < size) & ((free_at >= 0) & (free_at < row))[None, :]
    if not inside.all():
        bad = int(np.flatnonzero(~inside.all(axis=0))[0])
        raise NkiccError("E170", f"{op.opcode}: offset {int(cols[bad])} (number {bad}) of the indirect view of "
                                 f"{decl.described()} falls outside it", op.loc, "keep the offsets in range")
    return idx, np.ones(parts, dtype=bool)


class ReferenceMachine:
    def __init__(self, kernel: Kernel, fill=None, track_undefined: bool = False, comm: RankComm | None = None,
                 precise: bool | None = None, echo: bool = True) -> None:
        self.kernel = kernel
        self.comm = comm or single()
        self._shared: dict[str, np.ndarray] = {}
        # NKI_PRECISE_FP, read here (not at import): off holds every float tensor as float32
        self.precise = numerics.precise_from_env() if precise is None else bool(precise)
        self.decls = kernel.tensor_map()
        self.memory: dict[str, np.ndarray] = {}
        self.written: dict[str, np.ndarray] = {}
        self.env: dict[str, int] = {}
        self.executed = 0
        self.fill = fill  # poison override (check_defined's second run)
        # with track_undefined: a written-mask per allocated tensor, and the reads of never-written elements
        self.defined: dict[str, np.ndarray] | None = {} if track_undefined else None
        self.undefined_reads: list[tuple[Op, str, bool]] = []  # (op, tensor, past the end of a tile)
        self._rows = None  # an op's gathered rows in range, when a gather skipped some (oob_mode.skip)
        self.echo = echo  # print nl.device_print output (not in check_defined's extra runs)
        self.prints: list[str] = []

    def run(self, inputs: dict[str, np.ndarray], shared: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """`shared`: HBM tensors by name that live in the given arrays (the other
        cores of a multi-core launch use them at the same time)."""
        self._shared = shared or {}
        for name in self.kernel.args:
            decl = self.decls[name]
            if name in self._shared:
                self.memory[name] = self._shared[name].reshape(-1)
                continue
            arr = np.ascontiguousarray(inputs[name], dtype=dtypes.storage(decl.dtype, self.precise))
            self.memory[name] = arr.reshape(-1).copy()
        for decl in self.decls.values():
            if decl.role == "state":  # engine registers: there from the start, never allocated
                self._allocate(decl)
                init = ops.initial_state(decl.name)
                if init is not None:  # registers with a defined power-on value (a generator's state)
                    self.memory[decl.name][...] = init
                    if self.defined is not None:
                        self.defined[decl.name][...] = True
        with np.errstate(all="ignore"):  # semantics.compute's contract: poison and overflow flow on silently
            if self.comm.lockstep:  # (a launch's programs that race: simulator/comm.py)
                for s in self.kernel.body.stmts:
                    with self.comm.step():
                        self.block(Block((s,)))
            else:
                self.block(self.kernel.body)
        names = self.kernel.outputs + written_args(self.kernel)  # and the inputs the kernel updated
        return {name: self.memory[name].reshape(self.decls[name].shape) for name in names}

    def block(self, block: Block) -> None:
        for s in block.stmts:
            if isinstance(s, Op):
                self.op(s)
            elif isinstance(s, Alloc):
                self._allocate(self.decls[s.tensor])
            elif runtime_guard(s) is not None:
                self.runtime_loop(s)
            else:
                env = self.env
                for t in range(s.trip):
                    env[s.var] = t
                    self.block(s.body)
                env.pop(s.var, None)  # a zero-trip loop never bound it

    def _guard_input(self, guard: Op, i: int) -> int:
        x = guard.ins[i]
        if isinstance(x, Const):
            return int(x.value)
        return int(np.asarray(self.view(x, guard)).reshape(-1)[0])

    def runtime_loop(self, loop: Loop) -> None:
        """fori: bounds read at entry; while: the condition before each
        iteration; the guard writes the value the body reads (ir.ops.control)."""
        guard, rest = loop.body.stmts[0], Block(loop.body.stmts[1:])
        mode, step = guard.attr("mode"), guard.attr("step")
        env = self.env
        env[loop.var] = 0
        if mode == "fori":
            value, upper = self._guard_input(guard, 0), self._guard_input(guard, 1)
        t = 0
        while True:
            env[loop.var] = t
            if mode == "while":
                value = self._guard_input(guard, 0)
                if value == 0:
                    break
            elif value >= upper:
                break
            self.executed += 1
            out = guard.outs[0]
            semantics.store(strided(self.memory[out.tensor], self.start(out, guard), out.pattern), np.array([[value]]))
            if self.defined is not None and out.tensor in self.defined:
                strided(self.defined[out.tensor], self.start(out, guard), out.pattern)[...] = True
            self.block(rest)
            if mode == "fori":
                value += step
            t += 1
        env.pop(loop.var, None)

    def _allocate(self, decl: TensorDecl) -> None:
        if decl.name in self._shared:
            self.memory[decl.name] = self._shared[decl.name].reshape(-1)
            return
        self.memory[decl.name] = poison(dtypes.storage(decl.dtype, self.precise), decl.size, self.fill)
        if self.defined is not None:
            self.defined[decl.name] = np.zeros(decl.size, dtype=bool)
        if decl.buffer == "psum":
            self.written[decl.name] = np.zeros(decl.size, dtype=bool)

    def start(self, a: Access, op: Op, read: bool = False, check: bool = True) -> int:
        start = a.offset.evaluate(self.env)
        if a.scalar is not None:
            if a.scalar.register:
                value = self.env[a.scalar.register]
            else:
                flat = self.memory[a.scalar.tensor]
                value = int(flat[a.scalar.offset.evaluate(self.env)])
            start += value * a.scalar_scale
        lo, hi = start, start
        for step, num in a.pattern:
            if step >= 0:
                hi += step * (num - 1)
            else:
                lo += step * (num - 1)
        size = self.flat(a).size
        if not check or (read and lo >= 0 and self.decls[a.tensor].on_chip):
            return start  # reading past a tile's end: see view(); unchecked: oob_skip
        if lo < 0 or hi >= size:
            raise NkiccError("E170", f"{op.opcode} accesses elements [{lo}, {hi}] of {self.decls[a.tensor].described()} "
                                     f"(size {size}) at run time", op.loc,
                             "the runtime scalar offset is out of range: check how it is updated")
        return start

    def flat(self, a: Access) -> np.ndarray:
        """The tensor's memory as the flat array the access indexes: its bytes
        as another dtype for a reinterpreting view (precise storage only)."""
        flat = self.memory[a.tensor]
        if a.dtype is None:
            return flat
        if not self.precise:
            raise NkiccError("E160", f"{a.tensor} is read as {a.dtype}: reinterpreting bytes needs each dtype held "
                                     "as itself", None, "run with NKI_PRECISE_FP=1 (the default)")
        return flat.view(dtypes.storage(a.dtype, True))

    def _mask(self, mask: np.ndarray, a: Access, start: int) -> np.ndarray:
        """The written-mask elements of an access, shaped like it. A reinterpreting
        access sees the mask of the tensor's first element under each of its own
        (a strided view when it is one, else a copy: see _set_mask)."""
        if a.dtype is None:
            return strided(mask, start, a.pattern)
        return mask[self._base_index(a, start)]

    def _set_mask(self, mask: np.ndarray, a: Access, start: int) -> None:
        if a.dtype is None:
            strided(mask, start, a.pattern)[...] = True
            return
        ai, ti = dtypes.itemsize(a.dtype), dtypes.itemsize(self.decls[a.tensor].dtype)
        first = self._base_index(a, start)
        for k in range(max(1, ai // ti)):  # every element of the tensor the bytes cover
            mask[np.minimum(first + k, mask.size - 1)] = True

    def _base_index(self, a: Access, start: int) -> np.ndarray:
        idx = np.full(tuple(n for _, n in a.pattern), start, dtype=np.int64)
        for axis, (s, n) in enumerate(a.pattern):
            shape = [1] * len(a.pattern)
            shape[axis] = n
            idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
        return idx * dtypes.itemsize(a.dtype) // dtypes.itemsize(self.decls[a.tensor].dtype)

    def _gather(self, a: Access, op: Op) -> np.ndarray:
        flat = self.flat(a)
        idx, inside = gather_index(a, a.offset.evaluate(self.env), self.view(a.vector, op), flat.size, op,
                                   self.decls[a.tensor])
        out = np.full(idx.shape, poison(flat.dtype, 1)[0], dtype=flat.dtype)
        out[inside] = flat[idx[inside]]
        if self.defined is not None and a.tensor in self.defined and not self.defined[a.tensor][idx[inside]].all():
            self._undefined(op, a.tensor, False)
        if not inside.all():
            self._rows = inside  # the op writes only the rows it read (oob_mode.skip)
        return out

    def _scatter(self, a: Access, op: Op, values) -> None:
        flat = self.flat(a)
        idx, inside = gather_index(a, a.offset.evaluate(self.env), self.view(a.vector, op), flat.size, op,
                                   self.decls[a.tensor])
        tmp = np.empty(idx.shape, dtype=flat.dtype)
        semantics.store(tmp, np.broadcast_to(values, idx.shape) if np.ndim(values) == 0 else values)
        flat[idx[inside]] = tmp[inside]
        if self.defined is not None and a.tensor in self.defined:
            self.defined[a.tensor][idx[inside]] = True

    def view(self, a: Access, op: Op) -> np.ndarray:
        if a.vector is not None:
            return self._gather(a, op)
        flat = self.flat(a)
        start = self.start(a, op, read=True)
        end = start + sum(s * (n - 1) for s, n in a.pattern) + 1
        if self.defined is not None and a.tensor in self.defined:
            self._check_defined(a, op, start, end)
        if end > flat.size:
            # An on-chip read past the tile (tracing warned, W101): what lies
            # beyond is undefined, so it reads as poison.
            pad = poison(flat.dtype, end - flat.size)
            return strided(np.concatenate([flat[start:], pad]), 0, a.pattern)
        return strided(flat, start, a.pattern)

    def _check_defined(self, a: Access, op: Op, start: int, end: int) -> None:
        mask = self.defined[a.tensor]
        if a.dtype is not None:
            if not self._mask(mask, a, start).all():
                self._undefined(op, a.tensor, False)
            return
        if end > mask.size:
            self._undefined(op, a.tensor, True)
            mask = np.concatenate([mask[start:], np.ones(end - mask.size, dtype=bool)])
            start = 0
        if not strided(mask, start, a.pattern).all():
            self._undefined(op, a.tensor, False)

    def _undefined(self, op: Op, tensor: str, past_end: bool) -> None:
        if len(self.undefined_reads) < 64 and (op, tensor, past_end) not in self.undefined_reads:
            self.undefined_reads.append((op, tensor, past_end))

    def _skip_out_of_range(self, op: Op) -> bool:
        """oob_mode.skip with a runtime scalar offset (oob_skip.py): move the elements whose
        indices are in range; False (nothing done) when all are."""
        src, dst = op.ins[0], op.outs[0]
        sflat, dflat = self.flat(src), self.flat(dst)
        si = oob_skip.flat_index(src, self.start(src, op, check=False))
        di = oob_skip.flat_index(dst, self.start(dst, op, check=False))
        ok = oob_skip.moved(si, sflat.size, di, dflat.size)
        if ok is None:
            return False
        values = np.full(si.size, poison(sflat.dtype, 1)[0], dtype=sflat.dtype)
        values[ok] = sflat[si.reshape(-1)[ok]]
        ((_, result),) = semantics.compute(op, lambda a: values.reshape(si.shape))
        tmp = np.empty(di.shape, dtype=dflat.dtype)
        semantics.store(tmp, np.broadcast_to(result, di.shape) if np.ndim(result) == 0 else
                        np.asarray(result).reshape(di.shape))
        at = di.reshape(-1)[ok]
        dflat[at] = tmp.reshape(-1)[ok]
        if self.defined is not None and dst.tensor in self.defined:
            self.defined[dst.tensor][at] = True
        return True

    def op(self, op: Op) -> None:
        self.executed += 1
        if oob_skip.applies(op) and self._skip_out_of_range(op):
            return
        if self.defined is not None and op.attr("accumulate") is True and ops.of(op).accumulates(op):
            a = op.outs[0]
            start = self.start(a, op)
            self._check_defined(a, op, start, start + sum(s * (n - 1) for s, n in a.pattern) + 1)
        self._rows = None  # set by a gather that skipped rows out of range
        collective = ops.of(op).collective
        if collective is not None:
            me, group = self.comm.group(op)
            mine = collective_payload(op, lambda a: self.view(a, op))
            results = collective(op, self.comm.exchange(group, op, mine, 0.0)[0], me, group)
        else:
            results = semantics.compute(op, lambda a: self.view(a, op))
        if op.opcode == "device_print":
            self.prints.append(debug.print_text(op, lambda a: self.view(a, op)))
            if self.echo:
                print(self.prints[-1])
        for index, values in results:
            dst_access = op.outs[index]
            if dst_access.vector is not None:
                self._scatter(dst_access, op, values)
                continue
            if self._rows is not None:  # only the gathered rows in range arrive
                keep = self._rows
                old = np.array(strided(self.flat(dst_access), self.start(dst_access, op), dst_access.pattern))
                values = np.asarray(values).reshape(old.shape)
                values = np.where(keep.reshape((-1,) + (1,) * (old.ndim - 1)), values, old.astype(values.dtype))
            start = self.start(dst_access, op)
            dst = strided(self.flat(dst_access), start, dst_access.pattern)
            if self.defined is not None and dst_access.tensor in self.defined:
                self._set_mask(self.defined[dst_access.tensor], dst_access, start)
            mask = self.written.get(dst_access.tensor)
            if mask is not None:
                wmask = self._mask(mask, dst_access, start)
                if ops.of(op).accumulates(op):
                    values = self._accumulate(op.attr("accumulate"), dst, wmask, values)
                self._set_mask(mask, dst_access, start)
            if np.ndim(values) == 0:
                semantics.store(dst, np.full(dst.shape, values))
            else:
                semantics.store(dst, values)

    @staticmethod
    def _accumulate(mode, dst: np.ndarray, wmask: np.ndarray, values: np.ndarray) -> np.ndarray:
        values = values.reshape(dst.shape)
        if mode is False:
            return values
        current = semantics.f32(dst)
        if mode is True:
            return current + values
        return np.where(wmask, current + values, values)


def run_reference(kernel: Kernel, inputs: dict[str, np.ndarray], precise: bool | None = None
                  ) -> dict[str, np.ndarray]:
    """Outputs by name; precise=None reads NKI_PRECISE_FP."""
    with single_threaded_blas():
        return ReferenceMachine(kernel, precise=precise).run(inputs)


def _holds_poison(a: np.ndarray) -> bool:
    """Whether an output holds the poison value of its dtype anywhere."""
    if a.dtype == np.bool_ or a.size == 0:
        return False
    if np.issubdtype(a.dtype, np.integer):
        return bool((a == poison(a.dtype, 1)[0]).any())
    if a.dtype in (np.float16, np.float32, np.float64):
        return bool(np.isnan(a.max()))  # max propagates NaN: one pass, no full-size temporary
    return bool(np.isnan(a.astype(np.float32)).any())


def _other_fill(dt: np.dtype):
    """A second poison: finite, positive, and far from the first."""
    if np.issubdtype(dt, np.integer):
        return 1
    return 1.0


def check_defined(kernel: Kernel, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
    """Raise E173/E174 when an output of a reference run depends on memory that
    was never written (see the module docstring)."""
    def as_returned(values: dict) -> list:  # only what the kernel returns counts (a view of an output)
        return [np.asarray(returned(kernel, i, values[name])) for i, name in enumerate(kernel.outputs)]
    if not any(_holds_poison(a) for a in as_returned(outputs)):
        return
    # outputs may come from another simulator: compare two reference runs with each other
    outputs = ReferenceMachine(kernel, echo=False).run(inputs)
    machine = ReferenceMachine(kernel, fill=_other_fill, track_undefined=True, echo=False)
    again = machine.run(inputs)
    decls = kernel.tensor_map()
    for name, a, b in zip(kernel.outputs, as_returned(outputs), as_returned(again)):
        if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer):
            differ = a != b
        else:
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            differ = ~((a32 == b32) | (np.isnan(a32) & np.isnan(b32)))
        n = int(differ.sum())
        if not n:
            continue
        reads = sorted(machine.undefined_reads, key=lambda r: r[2])  # reads inside a tile first
        if reads:
            op, tensor, past_end = reads[0]
            what = f"past the end of {_named(decls[tensor])}" if past_end else \
                f"elements of {_named(decls[tensor])} that nothing wrote"
            raise NkiccError("E173", f"{n} of the {a.size} elements of output {_named(decls[name])} come from "
                                     f"never-written memory: this {op.opcode} reads {what}", op.loc,
                             "initialise the tile (nl.zeros, nisa.memset) or read only what was written; if those "
                             "elements are meant to be undefined, NKICC_UNDEFINED=poison returns NaN there")
        raise NkiccError("E174", f"{n} of the {a.size} elements of output {_named(decls[name])} are never written",
                         decls[name].loc, "store every element of the output; if those elements are meant to be "
                                          "undefined, NKICC_UNDEFINED=poison returns NaN there")


def _named(decl: TensorDecl) -> str:
    return decl.described()
