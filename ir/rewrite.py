"""Binding loop variables to values: what unrolling and loop peeling are made of;
and rewriting a block statement by statement."""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

from .nodes import Access, Alloc, Block, Loop, Op, ScalarOffset, Stmt


def bind_access(a: Access, values: Mapping[str, int]) -> Access:
    scalar = a.scalar
    if scalar is not None:
        if scalar.register and scalar.register in values:
            # a register whose value is now known folds into the static offset
            offset = a.offset.bind(values) + values[scalar.register] * a.scalar_scale
            return Access(a.tensor, offset, a.pattern, None, 0, a.dtype)  # (no vector: one runtime offset a view)
        scalar = ScalarOffset(scalar.register, scalar.tensor, scalar.offset.bind(values))
    return Access(a.tensor, a.offset.bind(values), a.pattern, scalar, a.scalar_scale, a.dtype,
                  bind_access(a.vector, values) if a.vector is not None else None, a.vector_group)


def bind_op(op: Op, values: Mapping[str, int]) -> Op:
    return Op(op.opcode, tuple(bind_access(a, values) for a in op.outs),
              tuple(bind_access(a, values) if isinstance(a, Access) else a for a in op.ins), op.attrs, op.loc)


def bind_stmt(s: Stmt, values: Mapping[str, int]) -> Stmt:
    if isinstance(s, Op):
        return bind_op(s, values)
    if isinstance(s, Alloc):
        return s
    return Loop(s.var, s.trip, s.start, s.step, s.kind, bind_block(s.body, values), s.loc)


def bind_block(b: Block, values: Mapping[str, int]) -> Block:
    return Block(tuple(bind_stmt(s, values) for s in b.stmts))


def map_stmts(block: Block, fn: Callable[[Stmt], list]) -> Block:
    """`block` with each statement other than a loop replaced by the list
    fn(statement) gives, in program order; loops are entered, kept."""
    out = []
    for s in block.stmts:
        if isinstance(s, Loop):
            out.append(dataclasses.replace(s, body=map_stmts(s.body, fn)))
        else:
            out.extend(fn(s))
    return Block(tuple(out))
