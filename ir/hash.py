"""Canonical form and content hash of IR regions.

Loop variables and tensors are renamed in order of first appearance and
source locations are dropped, so two bodies that differ only in names hash
equal. Declarations of the tensors a region touches are part of its text,
since shape, dtype and buffer change what the body does.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

from . import nodes
from .affine import Affine
from .nodes import Access, Alloc, Block, Kernel, Loc, Loop, Op, ScalarOffset, Stmt, TensorDecl
from .printer import format_block
from .serialize import dumps, encode


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
        return Access(self.tensor(a.tensor), a.offset.rename(self.vars), a.pattern, scalar, a.scalar_scale, a.dtype,
                      self.access(a.vector) if a.vector is not None else None, a.vector_group)

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


# --- exact canonical forms (the cache's keys) ------------------------------------------------
#
# `Renaming` is a bijection between the tensor names, loop variables and
# source locations of a piece of IR and canonical ones (t0, t1, ..., v0, ...,
# locations Loc("", 0), ...), assigned in order of first appearance. A growing
# renaming assigns names as it meets them; `frozen()` maps only what it has
# seen (anything else raises NotCanonical); `inverse()` maps back. Affine
# expressions must be normalised (terms sorted by variable, no zero
# coefficients): they are renamed and re-sorted, which is what a pass that
# builds them with Affine arithmetic produces under either set of names.

class NotCanonical(Exception):
    """IR the canonical renaming cannot map exactly: a name or location outside
    the mapping, or an affine expression that is not normalised."""


# Fields of every node the renaming knows; a node with any other field stops
# canonicalisation (NotCanonical) until it is taught here, since an unknown
# field may hold a name.
KNOWN_FIELDS = {
    "Loc": ("file", "line"),
    "TensorDecl": ("name", "shape", "dtype", "buffer", "role", "loc", "address", "label"),
    "ScalarOffset": ("register", "tensor", "offset"),
    "Access": ("tensor", "offset", "pattern", "scalar", "scalar_scale", "dtype", "vector", "vector_group"),
    "Const": ("value",),
    "Op": ("opcode", "outs", "ins", "attrs", "loc"),
    "Alloc": ("tensor",),
    "Loop": ("var", "trip", "start", "step", "kind", "body", "loc"),
    "Block": ("stmts",),
    "Kernel": ("name", "tensors", "args", "outputs", "body", "loc", "views"),
    "View": ("offset", "pattern", "dtype"),  # holds no name
    "Affine": ("terms", "const"),
}


def unknown_fields() -> list[str]:
    """Fields of IR nodes that KNOWN_FIELDS does not cover (empty when the
    canonical renaming is complete)."""
    import dataclasses
    out = []
    for cls in [Affine] + [getattr(nodes, n) for n in dir(nodes)]:
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ in (nodes.__name__, Affine.__module__):
            have = tuple(f.name for f in dataclasses.fields(cls))
            if have != KNOWN_FIELDS.get(cls.__name__):
                out.append(f"{cls.__name__}: {have}")
    return out


_UNKNOWN: list[str] | None = None


class Renaming:
    def __init__(self, locs: str = "symbol") -> None:
        global _UNKNOWN
        if _UNKNOWN is None:
            _UNKNOWN = unknown_fields()
        if _UNKNOWN:
            raise NotCanonical(f"IR nodes with fields the canonical renaming does not know: {_UNKNOWN}")
        self.tensors: dict[str, str] = {}
        self.vars: dict[str, str] = {}
        self.locs: dict[tuple, Loc] = {}  # (file, line) -> mapped Loc
        self._loc_objects: dict[tuple, Loc] = {}
        self.loc_mode = locs  # symbol: Loc("", n); drop: None
        self.grow = True
        self.order: list[tuple[str, object]] = []  # ("t" | "v" | "l", original) in order of first appearance

    def tensor(self, name: str) -> str:
        new = self.tensors.get(name)
        if new is None:
            if not self.grow:
                raise NotCanonical(f"tensor {name!r} is not in the mapping")
            new = self.tensors[name] = f"t{len(self.tensors)}"
            self.order.append(("t", name))
        return new

    def var(self, name: str) -> str:
        new = self.vars.get(name)
        if new is None:
            if not self.grow:
                raise NotCanonical(f"loop variable {name!r} is not in the mapping")
            new = self.vars[name] = f"v{len(self.vars)}"
            self.order.append(("v", name))
        return new

    def loc(self, loc: Loc | None) -> Loc | None:
        if loc is None or self.loc_mode == "drop":
            return None
        key = (loc.file, loc.line)  # a tuple hashes in C; a Loc's hash is Python code
        new = self.locs.get(key)
        if new is None:
            if not self.grow:
                raise NotCanonical(f"location {loc} is not in the mapping")
            new = self.locs[key] = Loc("", len(self.locs))
            self._loc_objects[key] = loc
            self.order.append(("l", loc))
        return new

    def name(self, kind: str, original):
        """Map a name of kind "t", "v" or "l" (see `order`)."""
        if kind == "t":
            return self.tensor(original)
        if kind == "v":
            return self.var(original)
        return self.loc(original)

    def frozen(self) -> "Renaming":
        r = Renaming(self.loc_mode)
        r.tensors, r.vars, r.locs, r._loc_objects, r.grow = self.tensors, self.vars, self.locs, self._loc_objects, False
        return r

    def inverse(self) -> "Renaming":
        r = Renaming(self.loc_mode)
        r.tensors = {v: k for k, v in self.tensors.items()}
        r.vars = {v: k for k, v in self.vars.items()}
        r.locs = {(v.file, v.line): self._loc_objects[k] for k, v in self.locs.items()}
        r.grow = False
        return r

    def affine(self, a: Affine) -> Affine:
        terms = a.terms
        if not terms:
            return a
        for i, (v, c) in enumerate(terms):
            if not c or (i and terms[i - 1][0] >= v):
                raise NotCanonical(f"affine expression {a} is not normalised")
        return Affine(tuple(sorted((self.var(v), c) for v, c in terms)), a.const)

    def access(self, a: Access) -> Access:
        tensor = self.tensor(a.tensor)
        offset = self.affine(a.offset)
        scalar = a.scalar
        if scalar is not None:
            scalar = ScalarOffset(self.var(scalar.register) if scalar.register is not None else None,
                                  self.tensor(scalar.tensor) if scalar.tensor is not None else None,
                                  self.affine(scalar.offset))
        return Access(tensor, offset, a.pattern, scalar, a.scalar_scale, a.dtype,
                      self.access(a.vector) if a.vector is not None else None, a.vector_group)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Op):
            outs = tuple(self.access(a) for a in s.outs)
            ins = tuple(self.access(a) if isinstance(a, Access) else a for a in s.ins)
            return Op(s.opcode, outs, ins, s.attrs, self.loc(s.loc))
        if isinstance(s, Alloc):
            return Alloc(self.tensor(s.tensor))
        if isinstance(s, Loop):
            var = self.var(s.var)
            loc = self.loc(s.loc)
            return Loop(var, s.trip, s.start, s.step, s.kind, self.block(s.body), loc)
        raise NotCanonical(f"not a statement: {type(s).__name__}")

    def block(self, b: Block) -> Block:
        return Block(tuple(self.stmt(s) for s in b.stmts))

    def decl(self, t: TensorDecl) -> TensorDecl:
        # the label is a name: canonical forms leave it out, like the name itself
        return TensorDecl(self.tensor(t.name), t.shape, t.dtype, t.buffer, t.role, self.loc(t.loc), t.address)


def canonical_kernel(kernel: Kernel) -> Kernel:
    """The kernel with every name canonical and every location dropped:
    arguments first, then outputs, then names in order of first appearance
    in the body, then the remaining declarations (their order is kept)."""
    r = Renaming(locs="drop")
    args = tuple(r.tensor(a) for a in kernel.args)
    outputs = tuple(r.tensor(o) for o in kernel.outputs)
    body = r.block(kernel.body)
    tensors = tuple(r.decl(t) for t in kernel.tensors)
    return Kernel("", tensors, args, outputs, body, None, kernel.views)


def kernel_hash(kernel: Kernel) -> str:
    """Hash of everything that decides what the kernel computes and what the
    passes make of it: declarations (shape, dtype, buffer, role, order),
    arguments and outputs in order, every statement with its attributes and
    constants. Names and source locations are left out. Raises
    Unserialisable for an attribute value with no exact JSON form."""
    return digest(dumps(encode(canonical_kernel(kernel))))


def exact_hash(kernel: Kernel) -> str:
    """Hash of the kernel exactly as it is, names and source locations
    included: equal hashes mean equal kernels (digests aside).

    For speed it is taken over the pickle protocol's rendering of the IR
    (C code, several times faster than walking the dataclasses in Python);
    nothing is ever unpickled, and pickle renders every field with its type,
    so equal renderings mean equal IR. Only object identity can make two
    renderings of equal IR differ (pickle writes a repeated object once),
    which costs a miss, never a wrong hit. IR that pickle cannot render is
    hashed through its exact JSON form instead."""
    import pickle
    try:
        return "p" + hashlib.blake2b(pickle.dumps(kernel, protocol=5), digest_size=16).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
        import json
        # the encoding's dicts have one key (or a fixed order): no need to sort
        return "j" + digest(json.dumps(encode(kernel), separators=(",", ":")))


def file_placeholder(i: int) -> str:
    return f"<source file {i}>"


def exact_hash_without_files(kernel: Kernel) -> tuple[str, tuple[str, ...]]:
    """exact_hash with the source files of its locations replaced by
    placeholders (the n-th file met is file_placeholder(n)), and those files in
    that order. Lines stay in: they decide messages. The files do not decide
    what the kernel computes, and where code lives can change from run to run
    while the code does not (a notebook cell's file is named after the kernel
    process): the kernel-level cache key uses this, and a stored result gets
    its files back with move_files."""
    import copyreg
    import io
    import pickle

    files: dict[str, str] = {}

    def reduce_loc(loc: Loc):
        new = files.get(loc.file)
        if new is None:
            new = files[loc.file] = file_placeholder(len(files))
        return Loc, (new, loc.line)

    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.dispatch_table = {**copyreg.dispatch_table, Loc: reduce_loc}  # a C callback per location, no IR walk
    try:
        pickler.dump(kernel)
        text = "p" + hashlib.blake2b(buf.getvalue(), digest_size=16).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
        files.clear()
        for loc in _locs(kernel):
            if loc.file not in files:
                files[loc.file] = file_placeholder(len(files))
        text = exact_hash(move_files(kernel, files))
    return text, tuple(files)


def _locs(kernel: Kernel):
    if kernel.loc is not None:
        yield kernel.loc
    for t in kernel.tensors:
        if t.loc is not None:
            yield t.loc
    for s in kernel.body.walk():
        loc = getattr(s, "loc", None)
        if loc is not None:
            yield loc


def move_files(kernel: Kernel, mapping: dict[str, str]) -> Kernel:
    """The kernel with the file of every location renamed by `mapping` (files
    not in it are kept)."""
    import dataclasses

    def loc(l: Loc | None) -> Loc | None:
        if l is None or l.file not in mapping:
            return l
        return Loc(mapping[l.file], l.line)

    def block(b: Block) -> Block:
        out = []
        for s in b.stmts:
            if type(s) is Op:
                out.append(s if s.loc is None or s.loc.file not in mapping else dataclasses.replace(s, loc=loc(s.loc)))
            elif type(s) is Loop:
                out.append(dataclasses.replace(s, body=block(s.body), loc=loc(s.loc)))
            else:
                out.append(s)
        return Block(tuple(out))

    tensors = tuple(t if t.loc is None or t.loc.file not in mapping else dataclasses.replace(t, loc=loc(t.loc))
                    for t in kernel.tensors)
    return dataclasses.replace(kernel, tensors=tensors, body=block(kernel.body), loc=loc(kernel.loc))


def region_hash(loop: Loop, decls: dict[str, TensorDecl]) -> str:
    """Hash of a loop (header and body) with the declarations it touches;
    names and locations left out."""
    r = Renaming(locs="drop")
    stmt = encode(r.stmt(loop))
    tensors = [encode(r.decl(decls[n])) for n in list(r.tensors)]
    return digest(dumps({"loop": stmt, "tensors": tensors}))


def region_hashes(kernel: Kernel) -> dict[str, str]:
    """Hash of every loop, keyed by loop variable."""
    decls = kernel.tensor_map()
    return {s.var: region_hash(s, decls) for s in kernel.body.walk() if isinstance(s, Loop)}
