"""Canonical form and content hash of IR regions.

Loop variables and tensors are renamed in order of first appearance and
source locations are dropped, so two bodies that differ only in names hash
equal. Declarations of the tensors a region touches are part of its text,
since shape, dtype and buffer change what the body does.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

from .nodes import Access, Alloc, Block, Const, Kernel, Loop, Op, Stmt, TensorDecl
from .printer import format_block


class _Renamer:
    def __init__(self) -> None:
        self.vars: dict[str, str] = {}
        self.tensors: dict[str, str] = {}

    def var(self, name: str) -> str:
        return self.vars.setdefault(name, f"v{len(self.vars)}")

    def tensor(self, name: str) -> str:
        return self.tensors.setdefault(name, f"t{len(self.tensors)}")

    def access(self, a: Access) -> Access:
        for v in a.offset.vars:
            self.var(v)
        scalar = a.scalar
        if scalar is not None:
            scalar = type(scalar)(
                register=self.var(scalar.register) if scalar.register else None,
                tensor=self.tensor(scalar.tensor) if scalar.tensor else None,
                offset=scalar.offset.rename(self.vars),
            )
        return Access(self.tensor(a.tensor), a.offset.rename(self.vars), a.pattern, scalar, a.scalar_scale)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Op):
            outs = tuple(self.access(a) for a in s.outs)
            ins = tuple(self.access(a) if isinstance(a, Access) else a for a in s.ins)
            return Op(s.opcode, outs, ins, s.attrs, None)
        if isinstance(s, Alloc):
            return Alloc(self.tensor(s.tensor))
        var = self.var(s.var)
        return Loop(var, s.trip, s.start, s.step, s.kind, self.block(s.body), None)

    def block(self, b: Block) -> Block:
        return Block(tuple(self.stmt(s) for s in b.stmts))


def canonical_text(stmts: Iterable[Stmt], decls: dict[str, TensorDecl]) -> str:
    r = _Renamer()
    body = r.block(Block(tuple(stmts)))
    lines = []
    for original, new in r.tensors.items():
        d = decls[original]
        lines.append(f"tensor {new}: {d.dtype}{list(d.shape)} {d.buffer} {d.role} {d.address}")
    lines.extend(format_block(body, 0, with_loc=False))
    return "\n".join(lines)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def region_hash(loop: Loop, decls: dict[str, TensorDecl]) -> str:
    return digest(canonical_text([loop], decls))


def kernel_hash(kernel: Kernel) -> str:
    decls = kernel.tensor_map()
    head = f"kernel args={len(kernel.args)} outputs={[kernel.args.index(o) if o in kernel.args else -1 for o in kernel.outputs]}"
    order = [f"arg {decls[a].dtype}{list(decls[a].shape)}" for a in kernel.args]
    text = "\n".join([head, *order, canonical_text(kernel.body.stmts, decls)])
    return digest(text)


def region_hashes(kernel: Kernel) -> dict[str, str]:
    """Hash of every loop, keyed by loop variable."""
    decls = kernel.tensor_map()
    return {s.var: region_hash(s, decls) for s in kernel.body.walk() if isinstance(s, Loop)}
