"""multi-buffer: k buffers for the tiles a loop allocates, so that the loads
of the next k - 1 iterations overlap this iteration's compute.

Every tensor has one address, so a tile allocated in a loop body sits in the
same bytes each iteration: the next iteration's DMA must wait until this
iteration's compute has read them. The classic answer, modulo variable
expansion, is done here on the rolled IR: a loop of trip N becomes a loop of
N // k whose body holds k copies of the original body (iterations ki .. ki +
k - 1), every copy but the first with its tiles renamed, and every
allocation of the copies moved to the top of the body so that their live
ranges overlap and alloc gives them disjoint bytes. The N % k iterations
left over follow the loop as copies of their own (their allocations first
too). The IR grows by the copies (bounded by GROWTH), never with trip counts.

How many buffers: a load into buffer j can start once the iteration that
last used buffer j has computed, so with k buffers a load has k - 1
iterations of compute to hide behind. From the cost table (the same rules
the machine simulator times instructions by), the body's load latency L is
one DMA fixed latency plus the transfer time of every load into the body's
tiles, and its compute time C that of its busiest compute engine (inner
loops times their trips); k = 1 + ceil(L / C), at least 2, at most the
target's DMA queue count (more copies cannot put more loads in flight) and
half the trip (the loop keeps two rounds at least: this pass expands, the
unroll pass unrolls). Where k copies exceed GROWTH or do not fit on chip
without a spill (the allocator's own placement decides), k - 1 is tried,
down to 2.

Innermost loops first. A kernel that does not fit as written is left
alone: it needs its memory for what it holds. Loops with dynamic loops or
runtime offsets inside, and loops whose tiles are used after the loop, are
left alone too.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os

from nkicc.ir import Access, Affine, Alloc, Block, Loop, Op, count_instructions, ops
from nkicc.ir.analysis import engine_of, tensors_touched
from nkicc.ir.ops.costs import cost_ns
from nkicc.ir.rewrite import bind_block
from nkicc.pass_api import Pass, hookimpl

from .alloc import fits

# stop once the rolled IR is this many times its size on entry
GROWTH = 4


def _allocated(block: Block) -> list[str]:
    return [s.tensor for s in block.walk() if isinstance(s, Alloc)]


def _candidate(loop: Loop, decls, used_outside) -> bool:
    if loop.kind != "static" or loop.trip < 2:
        return False
    if not any(isinstance(s, Alloc) and decls[s.tensor].on_chip for s in loop.body.stmts):
        return False
    for s in loop.body.walk():
        if isinstance(s, Loop) and s.kind != "static":
            return False
        if isinstance(s, Op) and any(a.scalar is not None or a.vector is not None
                                     for a in s.outs + s.ins if isinstance(a, Access)):
            return False
    return not any(t in used_outside for t in _allocated(loop.body))


def _times(block: Block, tiles: set[str], decls, target, table, times: int = 1, acc=None) -> dict[str, float]:
    """Estimated ns per engine of one execution of `block` (inner loops times
    their trips); "load" sums the transfer time, without the fixed latency,
    of the DMAs that write `tiles`."""
    acc = {} if acc is None else acc
    for s in block.stmts:
        if isinstance(s, Loop):
            _times(s.body, tiles, decls, target, table, times * s.trip, acc)
        elif isinstance(s, Op) and not ops.of(s).control:
            engine = engine_of(s, decls)
            ns = cost_ns(s, engine, decls, target, table) * times
            acc[engine] = acc.get(engine, 0.0) + ns
            if engine == "dma" and any(a.tensor in tiles for a in s.outs):
                acc["load"] = acc.get("load", 0.0) + max(0.0, ns - table.dma_fixed_ns * times)
    return acc


def buffers_wanted(loop: Loop, decls, target) -> int:
    """k = 1 + ceil(L / C): enough buffers that the k - 1 iterations computing
    ahead of a load hide its latency L (one DMA fixed latency plus the
    transfer time of the body's loads), C being the busiest compute engine's
    time per iteration; at least 2, at most the DMA queues (more copies
    cannot put more loads in flight) and half the trip (two rounds at
    least: the loop stays a loop, expanded, not unrolled; unroll does that)."""
    table = target.costs
    times = _times(loop.body, set(_allocated(loop.body)), decls, target, table)
    compute = max((ns for e, ns in times.items() if e not in ("dma", "load")), default=0.0)
    cap = min(loop.trip // 2, getattr(target, "dma_queues", 16))
    if "load" not in times:
        return 2
    latency = table.dma_fixed_ns + times["load"]
    k = cap if compute <= 0 else 1 + math.ceil(latency / compute)
    return max(2, min(k, cap))


def _ops_touching(block: Block) -> collections.Counter:
    """Tensor -> how many distinct ops of `block` touch it."""
    ops = {id(s): s for s in block.walk() if isinstance(s, Op)}
    counts: collections.Counter = collections.Counter()
    for op in ops.values():
        counts.update(tensors_touched(op))
    return counts


def _uses_outside(whole: collections.Counter, loop: Loop) -> set[str]:
    """Tensors referenced by ops outside `loop`, given `whole`, the kernel's _ops_touching
    (once per kernel, not per loop: a walk of the kernel per loop was 70% of qkv_cte's time)."""
    inside = _ops_touching(loop.body)
    return {t for t, n in whole.items() if n > inside.get(t, 0)}


def _copy(block: Block, var: str, repl: Affine, tensors: dict[str, str], suffix: str, used: set[str]) -> Block:
    """The body with `var` replaced by `repl`, tensors renamed by `tensors`,
    and inner loop variables given `suffix`, kept unique against `used` (the
    allocator and the simulators key loops by variable)."""
    inner = {}
    for s in block.walk():
        if isinstance(s, Loop):
            name, k = s.var + suffix, 0
            while suffix and name in used:
                k += 1
                name = f"{s.var}{suffix}{k}"
            used.add(name)
            inner[s.var] = name

    def access(a):
        if not isinstance(a, Access):
            return a
        offset = a.offset.substitute(var, repl).rename(inner)
        return Access(tensors.get(a.tensor, a.tensor), offset, a.pattern, a.scalar, a.scalar_scale, a.dtype,
                      access(a.vector) if a.vector is not None else None, a.vector_group)

    def walk(b: Block) -> Block:
        out = []
        for s in b.stmts:
            if isinstance(s, Op):
                out.append(Op(s.opcode, tuple(access(a) for a in s.outs), tuple(access(a) for a in s.ins),
                              s.attrs, s.loc))
            elif isinstance(s, Alloc):
                out.append(Alloc(tensors.get(s.tensor, s.tensor)))
            else:
                out.append(dataclasses.replace(s, var=inner[s.var], body=walk(s.body)))
        return Block(tuple(out))

    return walk(block)


def _expand(kernel, loop: Loop, k: int):
    """(statements replacing `loop` by k copies per iteration and the
    remainder's copies, new tensor declarations)."""
    decls = kernel.tensor_map()
    names = {t.name for t in kernel.tensors}
    new_decls = []

    def renamed(tag: str) -> dict[str, str]:
        mapping = {}
        for t in _allocated(loop.body):
            name, n = f"{t}.{tag}", 0
            while name in names:
                n += 1
                name = f"{t}.{tag}{n}"
            names.add(name)
            mapping[t] = name
            new_decls.append(dataclasses.replace(decls[t], name=name, address=None))
        return mapping

    def allocs_first(copies: list[Block]) -> list:
        stmts = [s for c in copies for s in c.stmts]
        return [s for s in stmts if isinstance(s, Alloc)] + [s for s in stmts if not isinstance(s, Alloc)]

    v = loop.var
    used = {s.var for s in kernel.body.walk() if isinstance(s, Loop)}
    copies = [_copy(loop.body, v, Affine.var(v, k), {}, "", used)]
    copies += [_copy(loop.body, v, Affine.var(v, k, j), renamed(f"mb{j}"), f".mb{j}", used) for j in range(1, k)]
    body = Block(tuple(allocs_first(copies)))
    if loop.trip // k == 1:  # one round: no loop left
        out = list(bind_block(body, {v: 0}).stmts)
    else:
        out = [dataclasses.replace(loop, trip=loop.trip // k, step=loop.step * k, body=body)]
    first = loop.trip - loop.trip % k
    out += allocs_first([_copy(loop.body, v, Affine.of(first + j), renamed(f"mb{k + j}"), f".mb{k + j}", used)
                         for j in range(loop.trip % k)])
    return out, new_decls


def _replace(block: Block, var: str, stmts: list) -> Block:
    out = []
    for s in block.stmts:
        if isinstance(s, Loop):
            if s.var == var:
                out.extend(stmts)
            else:
                out.append(dataclasses.replace(s, body=_replace(s.body, var, stmts)))
        else:
            out.append(s)
    return Block(tuple(out))


def _post_order(block: Block):
    for s in block.stmts:
        if isinstance(s, Loop):
            yield from _post_order(s.body)
            yield s


def multi_buffer(kernel, ctx):
    if not fits(kernel, ctx.target):
        ctx.note("multi_buffered", "none: the kernel does not fit on chip as written")
        return kernel
    limit = GROWTH * count_instructions(kernel).rolled
    loops = sum(1 for _ in _post_order(kernel.body))
    tried: set[str] = set()
    done = []
    considered = 0
    whole = None
    while True:
        decls = kernel.tensor_map()
        loop = next((s for s in _post_order(kernel.body) if s.var not in tried), None)
        if loop is None:
            break
        tried.add(loop.var)
        considered += 1
        ctx.progress(min(considered, loops), loops)  # each try walks the kernel: the budget applies
        whole = whole or _ops_touching(kernel.body)
        if not _candidate(loop, decls, _uses_outside(whole, loop)):
            continue
        for k in range(buffers_wanted(loop, decls, ctx.target), 1, -1):
            stmts, new_decls = _expand(kernel, loop, k)
            trial = dataclasses.replace(kernel, body=_replace(kernel.body, loop.var, stmts),
                                        tensors=kernel.tensors + tuple(new_decls))
            if count_instructions(trial).rolled <= limit and fits(trial, ctx.target):
                break
        else:
            continue
        tried.update(s.var for s in Block(tuple(stmts)).walk() if isinstance(s, Loop))
        kernel, whole = trial, None
        where = f"{os.path.basename(loop.loc.file)}:{loop.loc.line}" if loop.loc else loop.var
        done.append(f"{where} x{k}")
    lines = list(dict.fromkeys(done))  # a loop the tracer split is one source line, doubled per piece
    ctx.note("multi_buffered", ", ".join(lines) if lines else "none", show=bool(lines))
    return kernel


@hookimpl
def nkicc_passes():
    return [Pass("multi-buffer", multi_buffer,
                 "k buffers for tiles allocated in a loop (k from the cost table, as many as fit), so DMA overlaps compute",
                 scope="kernel", after=("verify", "simplify", "dce", "psum-legalize", "licm", "dma-coalesce",
                                        "unroll", "global-schedule"), before=("alloc",))]
