"""Loop-carried dependences whose result does not depend on the order.

ir/loopdeps.py finds two iterations of an `affine_range` loop that touch the
same element, at least one of them writing it. NKI may run the iterations in
any order, or overlapped, so such a dependence is an error (E190) when the
order can change what the kernel computes. It cannot when every write of the
pair leaves each shared element holding the same value whichever iteration
runs first:

1. a self-copy: a pure data move (`tensor_copy`, `dma_copy` without a
   conversion, `nc_stream_shuffle`) whose source for the shared element is
   that very element (same tensor, same dtype view). It writes back the value
   the element holds, so memory does not change, and every read of the
   element, before or after it, sees one value. (The NKI Library broadcasts a
   row to 128 partitions with four `nc_stream_shuffle`s from partition 0 of a
   tile into partitions 32b..32b+31 of the same tile: iteration 0 rewrites
   partition 0 with its own value, and iterations 1..3 read it.)
2. write against write, both `memset`s of one value: the element ends up
   holding that value in every order.

Anything else stays E190: a write that changes an element another iteration
reads (a read-after-write chain: prefix sums, a shift in place, a value
scaled in place and broadcast), two writes of different values (overlapping
stores), a move from another element or tensor, a conversion. The test is
pairwise and sound: a write that does change a shared element forms a pair of
its own with every access of another iteration to that element, the
self-copy's own read included, and that pair is judged on its own.

`order_free` decides a pair exactly, by enumerating the elements each
instance touches over the loop's iterations, the loops inside it and the
rolled loops around it. Beyond MAX_ELEMENTS elements or MAX_INSTANCES
instances, or where an address or a loop's trip is known only at run time,
it answers False: the dependence stays an error.
"""
from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from . import ops
from .nodes import Access, Block, Loop, Op

# whose numpy semantics return their source values unchanged (no arithmetic, no conversion between
# equal dtypes): a self-copy through one of these leaves memory as it was
MOVES = frozenset({"tensor_copy", "dma_copy", "nc_stream_shuffle"})
MAX_ELEMENTS = 4_000_000  # elements enumerated per pair before giving up
MAX_INSTANCES = 20_000    # and instances (one access in one iteration of every loop it is in)


def order_free(loop: Loop, w: tuple[Op, Access], x: tuple[Op, Access], x_writes: bool,
               outer: Mapping[str, int], dynamic: frozenset = frozenset()) -> bool:
    """Whether the write `w` (op, destination) in one iteration of `loop` and the
    access `x` (op, access; a write when `x_writes`) in another leave the kernel's
    result independent of the iterations' order (see the module docstring).
    `outer`: the trips of the rolled loops around `loop`; `dynamic`: the loop
    variables whose trip is known only at run time."""
    (wop, wacc), (xop, xacc) = w, x
    if wacc.tensor != xacc.tensor or wacc.dtype != xacc.dtype:
        return False  # (element numbers are not comparable)
    if x_writes and wop.opcode == xop.opcode == "memset" and wop.attr("value") == xop.attr("value"):
        return True
    writes = [w, x] if x_writes else [w]
    if not all(_is_move(op, dst) for op, dst in writes):
        return False
    nests = _nests(loop.body)
    budget = [MAX_ELEMENTS, MAX_INSTANCES]
    free_vars = [v for v in outer if v in _vars(wop) | _vars(xop)]
    if any(v in dynamic for v in free_vars):
        return False
    for values in itertools.product(*(range(outer[v]) for v in free_vars)):
        env = dict(zip(free_vars, values))
        wt = _touched(loop, nests, wop, wacc, env, budget, moves=True)
        xt = _touched(loop, nests, xop, xacc, env, budget, moves=x_writes)
        if wt is None or xt is None:
            return False
        if not _kept(wt, xt) or (x_writes and not _kept(xt, wt)):
            return False
    return True


def _is_move(op: Op, dst: Access) -> bool:
    """A pure move that reads the tensor it writes (else it cannot be a self-copy)."""
    return (op.opcode in MOVES and not op.attr("cast") and not ops.of(op).accumulates(op)
            and any(isinstance(a, Access) and a.tensor == dst.tensor for a in op.ins))


def _vars(op: Op) -> set[str]:
    out: set[str] = set()
    for a in list(op.outs) + [a for a in op.ins if isinstance(a, Access)]:
        out.update(a.offset.vars)
    return out


def _nests(body: Block) -> dict[int, list[Loop]]:
    """id(op) -> the loops inside `body` that enclose it, outermost first."""
    out: dict[int, list[Loop]] = {}

    def walk(block: Block, around: list[Loop]) -> None:
        for s in block.stmts:
            if isinstance(s, Loop):
                walk(s.body, around + [s])
            elif isinstance(s, Op):
                out[id(s)] = around
    walk(body, [])
    return out


def _touched(loop: Loop, nests, op: Op, acc: Access, env: dict, budget: list, moves: bool):
    """(elements, iteration, kept) of every instance of `acc` over the loop's
    iterations and the loops inside it that `op` uses: flat element numbers, the
    iteration that touched each, and whether the instance wrote it back with its
    own value (`moves`: for a write through a move; else all False). None when
    the answer is out of reach (a runtime address or loop, over budget)."""
    if acc.scalar is not None or acc.vector is not None or any(
            a.scalar is not None or a.vector is not None for a in op.ins if isinstance(a, Access)):
        return None
    used = _vars(op)
    inner = [s for s in nests.get(id(op), ()) if s.var in used]
    if any(s.kind != "static" for s in inner) or loop.kind != "static":
        return None
    elements, iterations, kept = [], [], []
    for k in range(loop.trip):
        for values in itertools.product(*(range(s.trip) for s in inner)):
            here = {**env, loop.var: k, **{s.var: v for s, v in zip(inner, values)}}
            idx = _indices(acc, here)
            budget[0] -= idx.size
            budget[1] -= 1
            if budget[0] < 0 or budget[1] < 0:
                return None
            elements.append(idx.reshape(-1))
            iterations.append(np.full(idx.size, k, dtype=np.int64))
            kept.append(_self_copied(op, acc, here).reshape(-1) if moves else np.zeros(idx.size, dtype=bool))
    return np.concatenate(elements), np.concatenate(iterations), np.concatenate(kept)


def _indices(acc: Access, env: Mapping[str, int]) -> np.ndarray:
    """The flat element numbers of `acc`, shaped like it."""
    idx = np.full(acc.shape, acc.offset.evaluate(env), dtype=np.int64)
    for axis, (step, num) in enumerate(acc.pattern):
        idx += (np.arange(num, dtype=np.int64) * step).reshape((num,) + (1,) * (len(acc.pattern) - axis - 1))
    return idx


def _self_copied(op: Op, dst: Access, env: Mapping[str, int]) -> np.ndarray:
    """For each element of the move's destination: whether its source is that
    element itself. The op's own semantics run on element numbers instead of
    values (a source elsewhere reads as -1), so what it moves is what it copies."""
    def read(a):
        if not isinstance(a, Access):
            raise TypeError("a constant operand")
        if a.tensor != dst.tensor or a.dtype != dst.dtype:
            return np.full(a.shape, -1, dtype=np.int64)
        return _indices(a, env)
    want = _indices(dst, env)
    try:
        results = dict(ops.of(op).compute(op, read))
        got = np.asarray(results[op.outs.index(dst)])
        got = got.reshape(want.shape) if got.size == want.size else np.broadcast_to(got, want.shape)
    except (TypeError, ValueError, KeyError, IndexError):
        return np.zeros(want.shape, dtype=bool)
    return got == want


def _kept(a, b) -> bool:
    """Whether every element that instance set `a` writes and another iteration of
    set `b` touches is one `a` wrote back with its own value."""
    elements, iterations, kept = a
    others, other_iters, _ = b
    if others.size == 0 or elements.size == 0:
        return True
    # per element of b: the lowest and highest iteration touching it (one iteration: both equal)
    order = np.argsort(others, kind="stable")
    keys, first = np.unique(others[order], return_index=True)
    lo = np.minimum.reduceat(other_iters[order], first)
    hi = np.maximum.reduceat(other_iters[order], first)
    pos = np.searchsorted(keys, elements)
    pos_ok = pos < keys.size
    hit = np.zeros(elements.size, dtype=bool)
    hit[pos_ok] = keys[pos[pos_ok]] == elements[pos_ok]
    p = np.minimum(pos, keys.size - 1)
    shared = hit & ((lo[p] != iterations) | (hi[p] != iterations))  # touched by b in another iteration
    return bool(kept[shared].all())
