"""Canonical forms of regions that compose, so that keying every block of a
kernel, pass after pass, costs about the size of the kernel rather than its
size times its depth.

Every statement and block has a *summary* (digest, names). `names` lists the
tensors, loop variables and source locations it mentions, in order of first
appearance: ("t", tensor), ("v", var), ("l", (file, line)). The digest hashes
its canonical form, in which every name is replaced by its position in
`names`. A block's canonical form holds, per statement, the statement's
canonical text (an op) or header and body digest (a loop) and the positions,
in the block's own `names`, of the statement's names; so canonical names come
out in the order a full walk would give them, and two blocks have equal
digests exactly when they are equal up to a consistent renaming of tensors,
variables and locations (digests aside). Summaries are memoised per object
for one compile; passes hand unchanged statements on as the same objects.

`region_form` is what a region pass's result is keyed by; `encode_output` /
`decode_output` store a pass's output in canonical names, with every
statement or block that is the very object of the pass's input stored as a
reference to its position there, and map it back onto another, equivalent
input.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Mapping

from .hash import NotCanonical, Renaming, digest
from .nodes import Alloc, Block, Loc, Loop, Op, TensorDecl
from .serialize import decode, encode

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _loc_key(loc: Loc | None):
    return None if loc is None else ("l", (loc.file, loc.line))


class Summary:
    __slots__ = ("obj", "digest", "names", "index")

    def __init__(self, obj, digest_: str, names: tuple, index: dict) -> None:
        self.obj = obj
        self.digest = digest_
        self.names = names      # (("t"|"v"|"l", original), ...) in order of first appearance
        self.index = index      # name -> position


def _positions(names, index: dict, order: list) -> list:
    """Positions of `names` in a growing (index, order)."""
    out = []
    for n in names:
        i = index.get(n)
        if i is None:
            i = index[n] = len(order)
            order.append(n)
        out.append(i)
    return out


class Summaries:
    """Per-compile memo of statement, block and declaration summaries."""

    def __init__(self) -> None:
        self._stmts: dict[int, tuple] = {}     # id(op/alloc) -> (obj, text, names)
        self._blocks: dict[int, Summary] = {}  # id(block) -> Summary
        self._shapes: dict[tuple, Summary] = {}  # block contents -> Summary, for rebuilt blocks
        self._decls: dict[int, tuple] = {}     # id(decl) -> (obj, digest)

    def clear(self) -> None:
        self._stmts.clear()
        self._blocks.clear()
        self._shapes.clear()
        self._decls.clear()

    def stmt(self, s) -> tuple[str, tuple]:
        """(canonical text, names) of an Op or Alloc on its own."""
        m = self._stmts.get(id(s))
        if m is not None and m[0] is s:
            return m[1], m[2]
        r = Renaming()
        text = _dumps(encode(r.stmt(s)))
        names = tuple(("l", (x.file, x.line)) if k == "l" else (k, x) for k, x in r.order)
        self._stmts[id(s)] = (s, text, names)
        return text, names

    def _shape(self, block: Block) -> tuple | None:
        """Identity of a block's contents without encoding it: the objects of
        its ops, and per loop its header and its body's memoised digest."""
        parts = []
        for s in block.stmts:
            if type(s) is Loop:
                m = self._blocks.get(id(s.body))
                if m is None or m.obj is not s.body:
                    return None
                parts.append((s.var, s.trip, s.start, s.step, s.kind, _loc_key(s.loc), m.digest))
            else:
                parts.append(id(s))
        return tuple(parts)

    def summary(self, block: Block) -> Summary:
        m = self._blocks.get(id(block))
        if m is not None and m.obj is block:
            return m
        shape = self._shape(block)
        found = self._shapes.get(shape) if shape is not None else None
        if found is None:
            index: dict = {}
            order: list = []
            form = compose(block, index, order, self)
            found = Summary(None, digest(_dumps(form)), tuple(order), index)
            if shape is not None:
                self._shapes[shape] = found
        m = Summary(block, found.digest, found.names, found.index)
        self._blocks[id(block)] = m
        return m

    def decl(self, d: TensorDecl) -> str:
        """Digest of a declaration without its names (name, label) and location."""
        m = self._decls.get(id(d))
        if m is not None and m[0] is d:
            return m[1]
        text = digest(_dumps(encode(dataclasses.replace(d, name="", loc=None, label=""))))
        self._decls[id(d)] = (d, text)
        return text


def compose(block: Block, index: dict, order: list, summaries: Summaries) -> list:
    """Canonical JSON of a block; fills (index, order) with its names."""
    out = []
    for s in block.stmts:
        t = type(s)
        if t is Op or t is Alloc:
            text, names = summaries.stmt(s)
            out.append([text, _positions(names, index, order)])
        elif t is Loop:
            head = _positions([("v", s.var)] + ([_loc_key(s.loc)] if s.loc is not None else []), index, order)
            body = summaries.summary(s.body)
            out.append(["L", head, s.trip, s.start, s.step, s.kind, body.digest,
                        _positions(body.names, index, order)])
        else:
            raise NotCanonical(f"not a statement: {t.__name__}")
    return out


class RegionNames:
    """The bijection between a region's names and their positions."""

    def __init__(self, names: tuple, index: dict) -> None:
        self.names = names
        self.index = index

    def pos(self, name) -> int:
        i = self.index.get(name)
        if i is None:
            raise NotCanonical(f"{name[1]!r} is not a name of the pass's input")
        return i


def region_form(block: Block, loop: Loop | None, trips: Mapping[str, int], decls: Mapping[str, TensorDecl],
                summaries: Summaries) -> tuple[dict, RegionNames]:
    """The canonical form of what a region pass sees - the block, the trip
    counts of the enclosing loops (outermost first: `trips` is in nesting
    order) and which of the block's variables they are, the owning loop's
    header, and the declaration (and location) of every tensor the block
    names - and the names of the region. Raises NotCanonical (or
    Unserialisable) when there is none."""
    body = summaries.summary(block)
    index = body.index
    trip_list = [[index.get(("v", v), -1), t] for v, t in trips.items()]
    header = None
    if loop is not None:
        header = [index.get(("v", loop.var), -1), loop.trip, loop.start, loop.step, loop.kind,
                  -2 if loop.loc is None else index.get(_loc_key(loop.loc), -1)]
    tensors = []
    for kind, name in body.names:
        if kind == "t":
            d = decls.get(name)
            if d is None:
                raise NotCanonical(f"tensor {name!r} has no declaration")
            tensors.append([summaries.decl(d), -2 if d.loc is None else index.get(_loc_key(d.loc), -1)])
    form = {"trips": trip_list, "loop": header, "block": body.digest, "tensors": tensors}
    return form, RegionNames(body.names, index)


# --- a pass's output, stored canonically -----------------------------------------------------

def _index_objects(block: Block, path: tuple, into: dict) -> None:
    into[id(block)] = ("b", path)
    for i, s in enumerate(block.stmts):
        into[id(s)] = ("s", path + (i,))
        if type(s) is Loop:
            _index_objects(s.body, path + (i,), into)


def encode_output(out: Block, inp: Block, names: RegionNames, summaries: Summaries):
    """`out` with every name replaced by its position in the region's names
    (a name the input did not have raises NotCanonical); statements and
    blocks that are objects of `inp` become references to their position."""
    objects: dict[int, tuple] = {}
    _index_objects(inp, (), objects)
    pos = names.pos

    def block(b: Block):
        ref = objects.get(id(b))
        if ref is not None and ref[0] == "b":
            return {"refblock": list(ref[1])}
        return {"block": [stmt(s) for s in b.stmts]}

    def stmt(s):
        ref = objects.get(id(s))
        if ref is not None and ref[0] == "s":
            return {"refstmt": list(ref[1])}
        t = type(s)
        if t is Loop:
            return {"loop": [pos(("v", s.var)), s.trip, s.start, s.step, s.kind,
                             None if s.loc is None else pos(_loc_key(s.loc)), block(s.body)]}
        if t is Op or t is Alloc:
            text, local = summaries.stmt(s)
            return {"stmt": [text, [pos(n) for n in local]]}
        raise NotCanonical(f"not a statement: {t.__name__}")

    if type(out) is not Block:
        raise NotCanonical(f"a region pass returned {type(out).__name__}, not a Block")
    return block(out)


def _resolve(inp: Block, path):
    """The statement at `path` (statement indices, loop bodies in between)."""
    node = None
    b = inp
    for n, i in enumerate(path):
        node = b.stmts[i]
        if n + 1 < len(path):
            if type(node) is not Loop:
                raise NotCanonical("a reference through a statement that is not a loop")
            b = node.body
    return node


def decode_output(data, inp: Block, names: RegionNames) -> Block:
    """The stored output mapped back onto `inp` (equivalent, under the
    renaming, to the input it was stored from)."""
    table = names.names

    def original(i: int, kind: str):
        k, x = table[i]
        if k != kind:
            raise NotCanonical("a stored name of the wrong kind")
        return Loc(x[0], x[1]) if kind == "l" else x

    def block(d) -> Block:
        if "refblock" in d:
            path = d["refblock"]
            if not path:
                return inp
            loop = _resolve(inp, path)
            if type(loop) is not Loop:
                raise NotCanonical("a reference to the body of a statement that is not a loop")
            return loop.body
        return Block(tuple(stmt(x) for x in d["block"]))

    def stmt(d):
        if "refstmt" in d:
            return _resolve(inp, d["refstmt"])
        if "loop" in d:
            var, trip, start, step, kind, loc, body = d["loop"]
            return Loop(original(var, "v"), trip, start, step, kind, block(body),
                        None if loc is None else original(loc, "l"))
        text, positions = d["stmt"]
        node = decode(json.loads(text))
        if type(node) not in (Op, Alloc):
            raise NotCanonical("not a statement")
        # the statement's own canonical names (t0.., v0.., Loc("", 0)..) -> the originals
        local = Renaming()
        local.grow = False
        counts = {"t": 0, "v": 0, "l": 0}
        for i in positions:
            kind = table[i][0]
            n = counts[kind]
            counts[kind] += 1
            if kind == "t":
                local.tensors[f"t{n}"] = original(i, "t")
            elif kind == "v":
                local.vars[f"v{n}"] = original(i, "v")
            else:
                local.locs[("", n)] = original(i, "l")
        return local.stmt(node)

    return block(data)
