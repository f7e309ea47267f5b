"""Element-wise results computed in place of an input that dies there, for the allocator.

`y = f(x)` element by element, where this is x's last use, can write y over x:
element i of y is computed from element i of x alone, so each is read before
it is overwritten. The NKI Library's cross-entropy keeps a [64, 65535]
bfloat16 chunk of logits and its [64, 65535] exponentials, 128 KiB per
partition each, and makes the second from the first with one tensor_scalar:
the two together are more than a trn2 partition (224 KiB), one fits.

The pair (x, y) becomes one tensor (y's accesses renamed to x) where:
- both are on-chip tensors of one buffer, dtype and shape, each with one
  allocation, both in one block, and touched only inside that block (its
  loops included: liveness is a backward scan, to a fixed point over each
  loop's iterations);
- every op that reads one and writes the other is element-wise (tensor_copy,
  tensor_scalar, tensor_tensor, activation) and reads the one exactly where
  it writes the other (same offset, pattern and dtype), and reads nothing
  else of the two;
- they never hold needed values at once: no op writes one while the other's
  value is still to be read (x's value is dead once a later op overwrites all
  of x before reading it, and likewise y's), except the element-wise op at
  which the input dies.
Runtime offsets, gathers and tensors used as index tiles are left alone."""
from __future__ import annotations

import collections
import dataclasses

from nkicc.ir import Access, Affine, Alloc, Block, Loop, Op
from nkicc.ir.analysis import reads, tensors_touched, writes

ELEMENTWISE = frozenset({"tensor_copy", "tensor_scalar", "tensor_tensor", "activation"})


def _row_major(shape) -> tuple:
    pairs, stride = [], 1
    for d in reversed(shape):
        pairs.append((stride, d))
        stride *= d
    return tuple(reversed(pairs))


def _plain(a: Access) -> bool:
    return a.scalar is None and a.vector is None and a.dtype is None


def _kills(op: Op, name: str, decl) -> bool:
    """op overwrites every element of `name` and reads none of it."""
    whole = Access(name, Affine(), _row_major(decl.shape))
    return any(a == whole for a in writes(op)) and all(a.tensor != name for a in reads(op))


def _scan(block: Block, names, decls, after: dict, record: list | None) -> dict:
    """Backward liveness of the tensors `names` over `block` (a loop's body: to a fixed
    point over its iterations): which are live before it, given which are after it. A
    tensor is live where its value is read before it is wholly overwritten. With
    `record`, each op's live-after set is appended to it (ops of loop bodies: over all
    iterations)."""
    live = dict(after)
    for s in reversed(block.stmts):
        if isinstance(s, Op):
            if record is not None:
                record.append((s, dict(live)))
            for n in names:
                if _kills(s, n, decls[n]):
                    live[n] = False
                if any(a.tensor == n for a in reads(s)):
                    live[n] = True
        elif isinstance(s, Loop):
            out = dict(live)
            body_in = _scan(s.body, names, decls, out, None)
            while True:  # the next iteration's needs are live at the end of the body
                around = {n: out[n] or body_in[n] for n in names}
                again = _scan(s.body, names, decls, around, None)
                if again == body_in:
                    break
                body_in = again
            _scan(s.body, names, decls, around, record)
            runs = s.kind == "static" and s.trip >= 1
            live = body_in if runs else {n: body_in[n] or out[n] for n in names}
    return live


def _in_place(op: Op, src: str, dst: str) -> bool:
    """op reads `src` exactly where it writes `dst`, element by element, and nothing else of the two."""
    if op.opcode not in ELEMENTWISE or len(op.outs) != 1 or op.outs[0].tensor != dst or not _plain(op.outs[0]):
        return False
    ins = [a for a in reads(op) if a.tensor in (src, dst)]
    return len(ins) == 1 and ins[0].tensor == src and _plain(ins[0]) \
        and (ins[0].offset, ins[0].pattern) == (op.outs[0].offset, op.outs[0].pattern)


def _mergeable(block: Block, x: str, y: str, decls) -> bool:
    """Whether x and y never hold needed values at once (the Chaitin test: no op writes one
    while the other is live after it), the element-wise op where one dies making the other
    aside."""
    record: list = []
    _scan(block, (x, y), decls, {x: False, y: False}, record)
    for op, live in record:
        touched = tensors_touched(op)
        if x in touched and y in touched:
            if not ((_in_place(op, x, y) and not live[x]) or (_in_place(op, y, x) and not live[y])):
                return False
            continue
        if (live[x] and any(a.tensor == y for a in writes(op))) or (live[y] and any(a.tensor == x for a in writes(op))):
            return False
    return True


def _candidates(kernel) -> list:
    """(block, x, y): an element-wise op computes y from x in place-able form, and the two are
    tensors alike, each allocated once, both in `block`, and touched nowhere else."""
    decls = kernel.tensor_map()
    index_tiles = {a.scalar.tensor for s in kernel.body.walk() if isinstance(s, Op)
                   for a in s.ins + s.outs if isinstance(a, Access) and a.scalar is not None and a.scalar.tensor}
    index_tiles |= {a.vector.tensor for s in kernel.body.walk() if isinstance(s, Op)
                    for a in s.ins + s.outs if isinstance(a, Access) and a.vector is not None}
    allocs: collections.Counter = collections.Counter()
    home: dict[str, Block] = {}  # tensor -> the block that allocates it

    def blocks(b: Block) -> None:
        for s in b.stmts:
            if isinstance(s, Alloc):
                allocs[s.tensor] += 1
                home[s.tensor] = b
            elif isinstance(s, Loop):
                blocks(s.body)

    blocks(kernel.body)
    uses = collections.Counter(t for s in kernel.body.walk() if isinstance(s, Op) for t in tensors_touched(s))
    found = []
    for op in kernel.body.walk():
        if not isinstance(op, Op) or op.opcode not in ELEMENTWISE or len(op.outs) != 1:
            continue
        y = op.outs[0].tensor
        for a in op.ins:
            x = a.tensor if isinstance(a, Access) else None
            if x is None or x == y or x not in decls or {x, y} & index_tiles or allocs[x] != 1 or allocs[y] != 1:
                continue
            dx, dy = decls[x], decls[y]
            if not (dx.on_chip and (dx.buffer, dx.dtype, dx.shape) == (dy.buffer, dy.dtype, dy.shape)
                    and dx.role == dy.role == "local" and home[x] is home[y] and _in_place(op, x, y)):
                continue
            inside = collections.Counter(t for s in home[x].walk() if isinstance(s, Op) for t in tensors_touched(s))
            if inside[x] == uses[x] and inside[y] == uses[y]:
                found.append((home[x], x, y))
    return found


def _rename(block: Block, old: str, new: str) -> Block:
    """`old` renamed `new`; the one allocation of the two at the first of their places."""
    def acc(a):
        return dataclasses.replace(a, tensor=new) if isinstance(a, Access) and a.tensor == old else a
    out, allocated = [], False
    for s in block.stmts:
        if isinstance(s, Op):
            out.append(dataclasses.replace(s, outs=tuple(map(acc, s.outs)), ins=tuple(map(acc, s.ins))))
        elif isinstance(s, Alloc):
            if s.tensor not in (old, new):
                out.append(s)
            elif not allocated:
                out.append(Alloc(new))
                allocated = True
        else:
            out.append(dataclasses.replace(s, body=_rename(s.body, old, new)))
    return Block(tuple(out))


def coalesce(kernel, buffer: str, enough):
    """(kernel with mergeable element-wise pairs of `buffer` tensors made one, largest
    first, until enough(kernel); [(x, y)] merged: y now lives in x's bytes)."""
    merged = []
    while not enough(kernel):
        decls = kernel.tensor_map()
        pairs = sorted(((x, y) for block, x, y in _candidates(kernel)
                        if decls[x].buffer == buffer and _mergeable(block, x, y, decls)),
                       key=lambda p: -decls[p[0]].size)
        pair = pairs[0] if pairs else None
        if pair is None:
            return kernel, merged
        x, y = pair
        kernel = dataclasses.replace(kernel, body=_rename(kernel.body, y, x),
                                     tensors=tuple(t for t in kernel.tensors if t.name != y))
        merged.append((decls[x].described(), decls[y].described()))
    return kernel, merged
