"""The IR: a kernel is a tree of blocks, loops, allocations and operations.

Tensors are referred to by name so that the IR is plain data: it prints,
hashes and serialises without object identity.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field
from typing import Iterator, Union

from .affine import Affine

# reg: an engine's internal registers (the accumulators some instructions keep
# across instructions), made explicit so that dependences on them are visible
BUFFERS = ("sbuf", "psum", "hbm", "shared_hbm", "reg")
ON_CHIP = ("sbuf", "psum")


@dataclass(frozen=True)
class Loc:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class TensorDecl:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: str
    # arg: kernel input, output: returned shared_hbm tensor, spill: HBM home of
    # an on-chip tensor the allocator evicted, spill-temp: the on-chip tile a
    # spilled tensor is staged through, state: engine registers (buffer reg),
    # local: anything else
    role: str = "local"
    loc: Loc | None = None
    # byte offset inside every partition of its buffer, set by the allocator
    address: int | None = None
    # the name the kernel's author knows it by: the parameter, the name= of the
    # allocation, else the variable the allocation was assigned to (`out = nl.ndarray(...)`);
    # "" when none. `name` stays the unique name the IR refers to it by (`out`, `out.3`).
    label: str = ""

    @property
    def user_name(self) -> str:
        return self.label or self.name

    def described(self) -> str:
        """How messages, reports and traces name it: `out (made at line 12)`,
        or a parameter's name."""
        if self.role == "arg" or self.loc is None:
            return self.user_name
        return f"{self.user_name} (made at line {self.loc.line})"

    @property
    def on_chip(self) -> bool:
        return self.buffer in ON_CHIP

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class ScalarOffset:
    """A runtime offset: either a loop register or element [0] of a tensor."""
    register: str | None = None
    tensor: str | None = None
    offset: Affine = Affine()  # element offset into `tensor`

    def __str__(self) -> str:
        return self.register if self.register else f"{self.tensor}[{self.offset}]"


# Access.vector_group of an indirect view before the instruction that reads it is known
UNRESOLVED_GROUP = -1


@dataclass(frozen=True)
class Access:
    """view[i0, ..., ik] = flat(tensor)[start + sum(i_j * step_j)] with
    start = offset + value(scalar) * scalar_scale. `dtype`, when set, reads
    the tensor's bytes as that dtype (`.ap(dtype=)`, `view(dtype)`): flat()
    is then the bytes seen as an array of it, and offset and steps count its
    elements. `vector`, when set (`.ap(vector_offset=)`: a gather or scatter),
    is the access of a [n, 1] index tile and replaces the stepping of the
    first pair: view[i0, ...] = flat(tensor)[offset + vector[i0] * scalar_scale
    + sum over the other pairs of i_j * step_j]. With `vector_group` G > 0
    (tensor indirection, `NkiTensor.indirect`) the index tile's values, read
    as index[i % G, i // G], replace the stepping of pair 1 instead:
    view[p, i] = flat(tensor)[offset + p * step_0 + index(i) * scalar_scale]."""
    tensor: str
    offset: Affine
    pattern: tuple[tuple[int, int], ...]  # (step, num), outermost first
    scalar: ScalarOffset | None = None
    scalar_scale: int = 0
    dtype: str | None = None
    vector: "Access | None" = None
    # 0: `vector` gives pair 0's rows; G > 0: it gives pair 1's columns, snake over G partitions;
    # -1 until the instruction that reads the view is known (G is 32 on the Tensor Engine, else 16)
    vector_group: int = 0

    @functools.cached_property  # (a tracer reads it for every view it makes: 400 k times a compile)
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.pattern)

    @property
    def count(self) -> int:
        n = 1
        for _, num in self.pattern:
            n *= num
        return n

    def __str__(self) -> str:
        pat = ",".join(f"[{s},{n}]" for s, n in self.pattern)
        dyn = f" + {self.scalar}*{self.scalar_scale}" if self.scalar else ""
        dyn += f" + [{self.vector}]*{self.scalar_scale}" if self.vector else ""
        dyn += f" indirect/{self.vector_group}" if self.vector_group else ""
        as_ = f" as {self.dtype}" if self.dtype else ""
        return f"{self.tensor}@({self.offset}{dyn}){{{pat}}}{as_}"


@dataclass(frozen=True)
class Const:
    value: float | int

    def __str__(self) -> str:
        return repr(self.value)


Operand = Union[Access, Const]


@dataclass(frozen=True)
class Op:
    opcode: str
    outs: tuple[Access, ...]
    ins: tuple[Operand, ...]
    attrs: tuple[tuple[str, object], ...] = ()
    loc: Loc | None = None

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default


@dataclass(frozen=True)
class Alloc:
    tensor: str


@dataclass(frozen=True)
class Loop:
    var: str
    trip: int
    # the source-level index is start + step * var; kept for the printer
    start: int = 0
    step: int = 1
    kind: str = "static"  # static | dynamic
    body: "Block" = field(default_factory=lambda: Block(()))
    loc: Loc | None = None


Stmt = Union[Op, Alloc, Loop]


@dataclass(frozen=True)
class Block:
    stmts: tuple[Stmt, ...]

    def walk(self) -> Iterator[Stmt]:
        for s in self.stmts:
            yield s
            if isinstance(s, Loop):
                yield from s.body.walk()


@dataclass(frozen=True)
class View:
    """The part of an output tensor a kernel returns when it returns a view
    (`out.reshape(...)`, `out.ap(...)`, `out[a:b]`): returned[i0, ..., ik] =
    flat(tensor)[offset + sum(i_j * step_j)], the tensor's bytes read as `dtype`
    when that is set (as `Access` reads them). The caller gets these elements in
    this shape; the program itself computes the whole tensor."""
    offset: int
    pattern: tuple[tuple[int, int], ...]  # (step, num), outermost first
    dtype: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.pattern)


@dataclass(frozen=True)
class Kernel:
    name: str
    tensors: tuple[TensorDecl, ...]
    args: tuple[str, ...]
    outputs: tuple[str, ...]
    body: Block
    loc: Loc | None = None
    # empty when every output is returned whole; else one entry per output, None for a whole tensor
    views: tuple["View | None", ...] = ()

    def tensor(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def tensor_map(self) -> dict[str, TensorDecl]:
        return {t.name: t for t in self.tensors}

    def view(self, i: int) -> "View | None":
        """The view output i is returned through, None for the whole tensor."""
        return self.views[i] if self.views else None
