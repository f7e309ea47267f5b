"""A naive lowering for tests and benchmarks of the machine simulator: NOT the
compiler's alloc and schedule passes, and not a substitute for them.

`naive_lower(kernel, target)` gives every on-chip tensor its own bytes (a bump
allocator, no reuse: fine for small kernels), every op an id, its default engine
(ir.analysis.engine_of), a DMA queue (round robin over `queues`), and waits on
every op on another engine/queue that touches overlapping memory with a write on
either side - including ops later in program order, which covers loop back-edges
(an op waits for the most recent executed instance of each listed op).
Conservative and slow to execute in parallel, but free of hazards.
"""
from __future__ import annotations

import dataclasses

from ..ir import Access, Alloc, Block, Kernel, Loop, Op
from ..ir import dtypes
from ..ir.analysis import engine_of, reads, writes


def assign_addresses(kernel: Kernel, target, align: int = 64) -> Kernel:
    """Bump-allocate every on-chip tensor that has no address."""
    nxt = {"sbuf": 0, "psum": 0}
    limit = {"sbuf": target.sbuf_partition_bytes, "psum": target.psum_partition_bytes}
    tensors = []
    for t in kernel.tensors:
        if t.on_chip and t.address is None:
            free = t.size // max(1, t.shape[0]) * dtypes.itemsize(t.dtype)
            addr = nxt[t.buffer]
            if addr + free > limit[t.buffer]:
                raise ValueError(f"naive_lower: {t.buffer} is full at {t.name} (no reuse in this allocator)")
            nxt[t.buffer] = -(-(addr + free) // align) * align
            t = dataclasses.replace(t, address=addr)
        tensors.append(t)
    return dataclasses.replace(kernel, tensors=tuple(tensors))


def _footprint(kernel: Kernel, name: str):
    t = kernel.tensor(name)
    if not t.on_chip:
        return ("hbm", name, 0, 1)
    free = t.size // max(1, t.shape[0]) * dtypes.itemsize(t.dtype)
    return (t.buffer, None, t.address, t.address + free)


def _conflict(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "hbm":
        return a[1] == b[1]
    return a[2] < b[3] and b[2] < a[3]


def naive_lower(kernel: Kernel, target, queues: int = 4) -> Kernel:
    kernel = assign_addresses(kernel, target)
    ops: list[Op] = [s for s in kernel.body.walk() if isinstance(s, Op)]
    info = []
    ndma = 0
    for n, op in enumerate(ops):
        engine = engine_of(op, kernel.tensor_map())
        if engine == "dma":
            lane = f"dma{ndma % queues}"
            queue = ndma % queues
            ndma += 1
        else:
            lane, queue = engine, None
        r = {_footprint(kernel, a.tensor) for a in reads(op)}
        w = {_footprint(kernel, a.tensor) for a in writes(op)}
        info.append((n, engine, queue, lane, r, w))
    attrs = {}
    for n, engine, queue, lane, r, w in info:
        wait = []
        for m, _, _, lane2, r2, w2 in info:
            if m == n or lane2 == lane:
                continue
            if any(_conflict(x, y) for x in w for y in r2 | w2) or any(_conflict(x, y) for x in r for y in w2):
                wait.append(m)
        extra = [("id", n), ("engine", engine)] + ([("queue", queue)] if queue is not None else [])
        extra.append(("wait", tuple(wait)))
        attrs[id(ops[n])] = extra

    def block(b: Block) -> Block:
        out = []
        for s in b.stmts:
            if isinstance(s, Op):
                keep = tuple((k, v) for k, v in s.attrs if k not in ("id", "engine", "queue", "wait"))
                out.append(dataclasses.replace(s, attrs=keep + tuple(attrs[id(s)])))
            elif isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=block(s.body)))
            else:
                out.append(s)
        return Block(tuple(out))

    return dataclasses.replace(kernel, body=block(kernel.body))


def edit_op(kernel: Kernel, op_id: int, **attrs) -> Kernel:
    """A copy of the kernel with some attrs of the op with this id replaced."""
    def block(b: Block) -> Block:
        out = []
        for s in b.stmts:
            if isinstance(s, Op) and s.attr("id") == op_id:
                kept = tuple((k, v) for k, v in s.attrs if k not in attrs)
                s = dataclasses.replace(s, attrs=kept + tuple(attrs.items()))
            elif isinstance(s, Loop):
                s = dataclasses.replace(s, body=block(s.body))
            out.append(s)
        return Block(tuple(out))
    return dataclasses.replace(kernel, body=block(kernel.body))


def lowered_ops(kernel: Kernel) -> list[Op]:
    return [s for s in kernel.body.walk() if isinstance(s, Op)]


__all__ = ["naive_lower", "assign_addresses", "edit_op", "lowered_ops", "Access", "Alloc"]
