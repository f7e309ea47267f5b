"""dce: remove instructions whose results nothing reads, and allocations of
tensors nothing uses. Tensor-granular, so it is exact on rolled loops: a
tensor read anywhere keeps every write to it."""
import dataclasses

from nkicc.ir import Access, Block, Loop, Op, ops
from nkicc.ir.analysis import reads, writes
from nkicc.pass_api import Pass, hookimpl


def _used(block: Block, read: set, touched: set) -> None:
    for s in block.stmts:
        if isinstance(s, Loop):
            _used(s.body, read, touched)
        elif isinstance(s, Op):
            r = reads(s)
            for a in r:
                read.add(a.tensor)
            for a in writes(s) + r + tuple(x for x in s.ins if isinstance(x, Access)):
                touched.add(a.tensor)  # dependency tokens (writes/reads) included


def _prune(block: Block, live: set, touched: set, removed: list) -> Block:
    """The block without what is dead; removed[0] counts the statements taken out."""
    out = []
    for s in block.stmts:
        if isinstance(s, Loop):
            body = _prune(s.body, live, touched, removed)
            if body.stmts:
                out.append(dataclasses.replace(s, body=body))
            else:
                removed[0] += 1
        elif isinstance(s, Op):
            d = ops.of(s)
            # a collective stays even where its result is dead: the other ranks wait for this one to join
            if any(a.tensor in live for a in s.outs) or not s.outs or d.control or d.collective is not None:
                out.append(s)
            else:
                removed[0] += 1
        elif s.tensor in touched or s.tensor in live:
            out.append(s)
        else:
            removed[0] += 1
    return Block(tuple(out))


def dce(kernel, ctx):
    keep = set(kernel.outputs) | set(kernel.args)
    while True:
        read, touched = set(), set()
        _used(kernel.body, read, touched)
        removed = [0]  # (counted, not found by comparing the whole IR with the last round's)
        body = _prune(kernel.body, read | keep, touched, removed)
        if not removed[0]:
            break
        kernel = dataclasses.replace(kernel, body=body)
    used = set(touched) | keep
    tensors = tuple(t for t in kernel.tensors if t.name in used)
    return dataclasses.replace(kernel, tensors=tensors)


@hookimpl
def nkicc_passes():
    return [Pass("dce", dce, "remove instructions and allocations whose results are never read",
                 scope="kernel", after=("dma-coalesce", "licm", "verify"))]
