"""multi-buffer: two buffers for the tiles a loop allocates, so that one
iteration's loads overlap the previous iteration's compute.

Every tensor has one address, so a tile allocated in a loop body sits in the
same bytes each iteration: the next iteration's DMA must wait until this
iteration's compute has read them. The classic answer, modulo variable
expansion, is done here on the rolled IR: a loop of trip N becomes a loop of
N // 2 whose body holds two copies of the original body (iterations 2i and
2i + 1), the second copy's tiles renamed, and every allocation of both copies
moved to the top of the body so that their live ranges overlap and alloc
gives them disjoint bytes. An odd trip leaves one more copy after the loop.
The IR grows by the copies (bounded by GROWTH), never with trip counts.

A loop is transformed only where the result still fits on chip without a
spill (the allocator's own placement decides), innermost loops first. A
kernel that does not fit as written is left alone: it needs its memory for
what it holds. Loops with dynamic loops or runtime offsets inside, and loops
whose tiles are used after the loop, are left alone too.
"""
from __future__ import annotations

import dataclasses
import os

from nkicc.ir import Access, Affine, Alloc, Block, Loop, Op, count_instructions
from nkicc.ir.analysis import tensors_touched
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


def _uses_outside(kernel, loop: Loop) -> set[str]:
    """Tensors referenced by ops outside `loop`."""
    inside = {id(s) for s in loop.body.walk()}
    names = set()
    for s in kernel.body.walk():
        if isinstance(s, Op) and id(s) not in inside:
            names |= tensors_touched(s)
    return names


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


def _expand(kernel, loop: Loop):
    """(statements replacing `loop`, new tensor declarations)."""
    decls = kernel.tensor_map()
    names = {t.name for t in kernel.tensors}
    new_decls = []

    def renamed(tag: str) -> dict[str, str]:
        mapping = {}
        for t in _allocated(loop.body):
            name, k = f"{t}.{tag}", 0
            while name in names:
                k += 1
                name = f"{t}.{tag}{k}"
            names.add(name)
            mapping[t] = name
            new_decls.append(dataclasses.replace(decls[t], name=name, address=None))
        return mapping

    v = loop.var
    used = {s.var for s in kernel.body.walk() if isinstance(s, Loop)}
    copy0 = _copy(loop.body, v, Affine.var(v, 2), {}, "", used)
    copy1 = _copy(loop.body, v, Affine.var(v, 2, 1), renamed("mb1"), ".mb1", used)
    stmts = [s for s in copy0.stmts + copy1.stmts if isinstance(s, Alloc)]
    stmts += [s for s in copy0.stmts + copy1.stmts if not isinstance(s, Alloc)]
    if loop.trip // 2 == 1:  # one pair: no loop left
        out = list(bind_block(Block(tuple(stmts)), {v: 0}).stmts)
    else:
        out = [dataclasses.replace(loop, trip=loop.trip // 2, step=loop.step * 2, body=Block(tuple(stmts)))]
    if loop.trip % 2:
        last = _copy(loop.body, v, Affine.of(loop.trip - 1), renamed("mb2"), ".mb2", used)
        out.extend(last.stmts)
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
    while True:
        decls = kernel.tensor_map()
        loop = next((s for s in _post_order(kernel.body) if s.var not in tried), None)
        if loop is None:
            break
        tried.add(loop.var)
        considered += 1
        ctx.progress(min(considered, loops), loops)  # each try walks the kernel: the budget applies
        if not _candidate(loop, decls, _uses_outside(kernel, loop)):
            continue
        stmts, new_decls = _expand(kernel, loop)
        trial = dataclasses.replace(kernel, body=_replace(kernel.body, loop.var, stmts),
                                    tensors=kernel.tensors + tuple(new_decls))
        if count_instructions(trial).rolled > limit or not fits(trial, ctx.target):
            continue
        tried.update(s.var for s in Block(tuple(stmts)).walk() if isinstance(s, Loop))
        kernel = trial
        done.append(f"{os.path.basename(loop.loc.file)}:{loop.loc.line}" if loop.loc else loop.var)
    lines = list(dict.fromkeys(done))  # a loop the tracer split is one source line, doubled per piece
    ctx.note("multi_buffered", ", ".join(lines) if lines else "none", show=bool(lines))
    return kernel


@hookimpl
def nkicc_passes():
    return [Pass("multi-buffer", multi_buffer,
                 "two buffers for tiles allocated in a loop (when they fit), so DMA overlaps compute",
                 scope="kernel", after=("verify", "simplify", "dce", "psum-legalize", "licm", "dma-coalesce",
                                        "unroll", "global-schedule"), before=("alloc",))]
