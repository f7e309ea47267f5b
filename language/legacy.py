"""NKI 0.1's statement semantics on nkicc's tensors and instructions.

NKI 0.1 (`neuronxcc.nki`) writes a statement as `dst[index] = op(operands,
mask=...)`: the operation returns its result, the assignment stores it, the
mask cuts the whole statement to a window of its index grid (grid.py), and a
matmul result added into PSUM (`psum[...] += nisa.nc_matmul(...)`) is the
matmul accumulating there. This module gives those forms their meaning with
nkicc's own instructions, so an 0.1 kernel becomes the same IR a 0.6 kernel
would: `assign` is `t[key] = value` (the builder calls it for kernels of this
dialect), `operand` turns what an 0.1 call receives into the views a 0.6 call
takes, and `BlockTensor` is a tensor with block dimensions in front of its
partition dimension (`nl.ndarray((8, nl.par_dim(128), 512))`), kept as one
tile whose blocks lie side by side along the free dimension (the migration
guide's "move the block dimension into the free dimension": every block
alive at once, so it is always correct; the allocator and multi-buffer pass
then see an ordinary tile).
"""
from __future__ import annotations

import math
import operator
import sys
from dataclasses import dataclass, field
from numbers import Number

from .. import isa
from ..ir import Access, Affine, NkiccError
from .creation import new_tensor
from .grid import GridRef, Window, unsupported, window
from .tensor import Tensor, broadcast_view, row_major
from .tracing import SymInt, user_loc

HBM = ("hbm", "shared_hbm", "private_hbm")


class ParDim(int):
    """`nl.par_dim(n)`: an int that marks the partition dimension of a shape."""


class _Skipped:
    """What a statement returns when its mask leaves nothing of it on this piece of the loop."""

    def __repr__(self) -> str:
        return "<masked out>"


SKIPPED = _Skipped()


class _Written:
    """`t[k] += v` has already written t[k]: the store that follows is a no-op."""


WRITTEN = _Written()


@dataclass(eq=False)
class Masked:
    """A result computed on a mask's window only, in a tile of the whole grid (the other
    rows never written, as in 0.1): the assignment that stores it stores that window."""
    tile: Tensor
    win: Window

    def __getattr__(self, name):
        return getattr(self.tile, name)

    def __getitem__(self, key):
        return self.tile[key]

    def __setitem__(self, key, value) -> None:
        self.tile[key] = value


@dataclass(eq=False)
class PendingMatmul:
    """`nisa.nc_matmul(stationary, moving)` in 0.1: a PSUM result that an
    assignment writes (`psum[...] = mm`), an augmented assignment accumulates
    (`psum[...] += mm`, the hardware's accumulate flag), and anything else reads
    from a fresh fp32 PSUM tile made on first use."""
    stationary: Tensor
    moving: Tensor
    options: dict
    tile: Tensor | None = field(default=None)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.stationary.shape[1], self.moving.shape[1])

    def into(self, dst: Tensor, accumulate: bool) -> None:
        if accumulate and dst.buffer == "psum":  # a fresh PSUM tile: the accumulation group starts at zero
            whole = Access(dst.decl.name, Affine(), row_major(tuple(dst.decl.shape)))
            dst.builder.zero_if_unwritten(whole)
        isa.nc_matmul(dst, self.stationary, self.moving, accumulate=accumulate, **self.options)

    def materialize(self) -> Tensor:
        if self.tile is None:
            self.tile = new_tensor(self.shape, "float32", "psum", "", user_loc(3))
            self.into(self.tile, False)
        return self.tile

    def accumulate_into(self, acc: Tensor):
        """`acc += mm` (operators.py asks for this): the matmul accumulates in acc's PSUM."""
        self.into(acc, True)
        return acc


class BlockTensor:
    """A tensor whose partition dimension (`nl.par_dim`) is not its first: the
    dimensions before it are blocks. Stored as one tile (partition, blocks...,
    free...); an index names blocks first, as the kernel wrote it."""
    _device_store = True  # a store into it is an instruction, not Python state (loop_effects.py)

    def __init__(self, inner: Tensor, nblock: int) -> None:
        self.inner = inner
        self.nblock = nblock

    @property
    def shape(self) -> tuple[int, ...]:
        s = self.inner.shape
        return tuple(s[1:1 + self.nblock]) + (s[0],) + tuple(s[1 + self.nblock:])

    @property
    def dtype(self):
        return self.inner.dtype

    @property
    def buffer(self):
        return self.inner.buffer

    @property
    def ndim(self) -> int:
        return self.inner.ndim

    def _key(self, key) -> tuple:
        key = key if isinstance(key, tuple) else (key,)
        if Ellipsis in [k for k in key if isinstance(k, type(Ellipsis))]:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - len(key) + 1) + key[i + 1:]
        key = key + (slice(None),) * (self.ndim - len(key))
        b = self.nblock
        return (key[b],) + tuple(key[:b]) + tuple(key[b + 1:])

    def __getitem__(self, key):
        return self.inner[self._key(key)]

    def __setitem__(self, key, value) -> None:
        assign(self.inner, self._key(key), value)

    def tiles(self) -> list[Tensor]:
        return [self.inner]


class BlockList(BlockTensor):
    """A PSUM tensor with block dimensions: one tile per block (a PSUM tile lies in one
    2 KiB bank, so blocks cannot sit side by side), the migration guide's "list of
    tensors". A block index must be known when traced: a loop that indexes blocks is
    traced iteration by iteration."""

    def __init__(self, tiles: list[Tensor], blocks: tuple[int, ...]) -> None:
        super().__init__(tiles[0], len(blocks))
        self._tiles, self.blocks = tiles, blocks

    @property
    def shape(self) -> tuple[int, ...]:
        return self.blocks + tuple(self.inner.shape)

    @property
    def ndim(self) -> int:
        return len(self.blocks) + self.inner.ndim

    def _tile_key(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if Ellipsis in [k for k in key if isinstance(k, type(Ellipsis))]:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - len(key) + 1) + key[i + 1:]
        key = key + (slice(None),) * (self.ndim - len(key))
        flat = 0
        for k, n in zip(key[:self.nblock], self.blocks):
            try:
                k = operator.index(k)  # (a loop index: that loop is traced concretely)
            except TypeError:
                raise unsupported("a PSUM block dimension indexed by other than one integer", "block-dims",
                                  user_loc(4)) from None
            if not 0 <= k < n:
                raise NkiccError("E101", f"block {k} of a dimension of {n} blocks", user_loc(4))
            flat = flat * n + k
        return self._tiles[flat], key[self.nblock:]

    def __getitem__(self, key):
        tile, rest = self._tile_key(key)
        return tile[rest]

    def __setitem__(self, key, value) -> None:
        tile, rest = self._tile_key(key)
        assign(tile, rest, value)

    def tiles(self) -> list[Tensor]:
        return self._tiles


def allocate(shape, dtype, buffer, name, loc) -> Tensor | BlockTensor:
    """`nl.ndarray` and friends: a tile, or a BlockTensor where par_dim is not first."""
    shape = tuple(shape)
    marks = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    if not marks or marks[0] == 0:
        return new_tensor(shape, dtype, buffer, name, loc)
    p = marks[0]
    if buffer in HBM:
        raise unsupported("nl.par_dim in an HBM tensor's shape", "block-dims", loc)
    if buffer == "psum":
        tiles = [new_tensor(shape[p:], dtype, buffer, name, loc) for _ in range(math.prod(shape[:p]))]
        return BlockList(tiles, tuple(shape[:p]))
    inner = new_tensor((shape[p],) + shape[:p] + shape[p + 1:], dtype, buffer, name, loc)
    return BlockTensor(inner, p)


# --- operands ------------------------------------------------------------------------------

def _cut(t: Tensor, win: Window, loc) -> Tensor:
    """The window's part of a full-grid tile (a tile already that size, or of size 1 there, is kept)."""
    bounds = win.bounds(t.ndim)
    key = []
    for d, size in enumerate(t.shape):
        if d not in bounds:
            key.append(slice(None))
            continue
        lo, hi, full = bounds[d]
        if size == full and not (lo == 0 and hi == full):
            key.append(slice(lo, hi))
        elif size in (full, hi - lo, 1):
            key.append(slice(None))
        else:
            raise NkiccError("E140", f"mask= spans {full} on dimension {d}; the operand has {size}", loc)
    return t[tuple(key)] if any(k != slice(None) for k in key) else t


def operand(x, win: Window | None, loc=None):
    """What an 0.1 call passes on to the 0.6 one: index grids as views (cut by the mask),
    pending matmuls as their PSUM tile, masked results as their tile."""
    if isinstance(x, GridRef):
        return x.view(win)
    if isinstance(x, Masked):  # (a tile of the whole grid: an unmasked statement reads all of it)
        return x.tile if win is None else _cut(x.tile, win, loc)
    if isinstance(x, PendingMatmul):
        x = x.materialize()
    if isinstance(x, BlockTensor):
        raise unsupported("a tensor with block dimensions used whole (index its blocks)", "block-dims", loc)
    if hasattr(x, "store_into"):
        raise unsupported("nl.loop_reduce's result used other than assigned into its accumulator", "loop-reduce",
                          loc)
    if x is SKIPPED:
        raise NkiccError("E161", "a result its mask= left empty is used by an unmasked statement", loc,
                         "give the statement the same mask")
    if win is not None and isinstance(x, Tensor):
        return _cut(x, win, loc)
    if isinstance(x, (list, tuple)) and any(isinstance(e, (GridRef, Masked, PendingMatmul)) for e in x):
        return type(x)(operand(e, win, loc) for e in x)
    return x


def masked_call(fn, args, kwargs, mask, loc, prepare=None):
    """Call the 0.6 function `fn` the way 0.1 does with `mask=` (`prepare` adjusts the operands)."""
    win = window(mask) if mask is not None else None
    if win is not None and win.empty:
        return SKIPPED
    args = [operand(a, win, loc) for a in args]
    kwargs = {k: operand(v, win, loc) for k, v in kwargs.items()}
    out = fn(*(prepare(args) if prepare else args), **kwargs)
    if win is None or not isinstance(out, Tensor):
        return out
    return Masked(_widened(out, win, [*args, *kwargs.values()], loc), win)


def _widened(out: Tensor, win: Window, operands: list, loc) -> Tensor:
    """The result of a masked statement as 0.1 has it: a tile of the whole grid, the
    window's part computed (the rest never written), so that it meets unmasked tiles of
    the whole grid. The instruction that made `out` writes the window itself where it may."""
    bounds = win.bounds(out.ndim)
    shape = tuple(bounds[d][2] if d in bounds and size == bounds[d][1] - bounds[d][0] else size
                  for d, size in enumerate(out.shape))
    if shape == tuple(out.shape):
        return out
    whole = new_tensor(shape, out.decl.dtype, out.buffer, "", loc)
    part = _cut(whole, win, loc)
    mine = all(not (isinstance(t, Tensor) and t.decl.name == out.decl.name) for t in operands)
    if not (mine and _writes_in_place(part, out) and out.builder.retarget_last(out.decl.name, part.access)):
        _copy(part, out, loc)
    return whole


# --- t[key] = value ----------------------------------------------------------------------

def _copy(dst: Tensor, src, loc) -> None:
    if isinstance(src, (Number, SymInt)) and not isinstance(src, bool):
        isa.memset(dst, src)
        return
    if not isinstance(src, Tensor):
        raise NkiccError("E103", f"cannot store a {type(src).__name__} into a tensor", loc)
    if tuple(src.shape) != tuple(dst.shape):
        if src.ndim > dst.ndim and [s for s in src.shape if s != 1] == [s for s in dst.shape if s != 1]:
            src = src.reshape(tuple(dst.shape))  # (P, 1) into t[:, j], which is (P,)
        else:
            src = broadcast_view(partition_first(src, dst.ndim), tuple(dst.shape), loc)
    if dst.buffer in HBM or src.buffer in HBM:
        isa.dma_copy(dst, src)
    else:
        isa.tensor_copy(dst, src)


def partition_first(t: Tensor, ndim: int) -> Tensor:
    """0.1 lines a tile up with another by its partition dimension first: a (P,)
    tile (a reduction's result, `t[:, 3]`) meets a (P, F) one as (P, 1)."""
    if t.buffer in HBM:
        return t
    while 1 <= t.ndim < ndim:
        t = t.expand_dim(t.ndim)
    return t


def _references_of_a_temporary() -> int:
    """How many references `sys.getrefcount` sees in `assign` for a value the statement
    `t[k] = op(...)` made and nobody named: the statement's stack, `__setitem__`'s and the setitem
    hook's arguments, getrefcount's own. The number differs between interpreters (5 on CPython
    3.10, 4 on 3.11-3.13), so it is measured here through a call chain of the same shape
    (NkiTensor.__setitem__ -> Builder.setitem -> assign). A name adds one, and then the value keeps
    its own tile; where the probe cannot tell the two apart, nothing is written in place (a copy is
    always right). tests/language/test_dialect01.py checks both cases."""
    seen = []

    def hook(t, key, value):
        seen.append(sys.getrefcount(value))

    class Probe:
        setitem = staticmethod(hook)

        def __setitem__(self, key, value):
            self.setitem(self, key, value)

    probe = Probe()
    probe[0] = object()
    named = object()
    probe[0] = named
    return seen[0] if seen[0] < seen[1] else 0


_TEMPORARY = _references_of_a_temporary()


def _writes_in_place(dst: Tensor, value: Tensor) -> bool:
    """Whether the instruction that made `value` (a whole fresh tile) may write `dst` instead:
    same dtype, buffer and shape (the partition start: Builder.retarget_last)."""
    a, d = value.access, value.decl
    if not (a.offset.is_const and a.offset.const == 0 and a.pattern == row_major(tuple(d.shape))
            and a.scalar is None and a.vector is None and a.dtype is None):
        return False
    b = dst.access
    if (dst.decl.dtype, dst.buffer, tuple(dst.shape)) != (d.dtype, value.buffer, tuple(value.shape)) \
            or b.scalar is not None or b.vector is not None or b.dtype is not None or dst.overflow:
        return False
    return True


def _same(a: Tensor, b: Tensor) -> bool:
    return a.decl.name == b.decl.name and a.access == b.access


def assign(t: Tensor, key, value) -> None:
    """`t[key] = value` in NKI 0.1."""
    loc = user_loc(3)
    if value is SKIPPED or value is WRITTEN:
        return
    dst = t[key]
    win = value.win.fit(tuple(dst.shape)) if isinstance(value, Masked) else None
    dst = dst.view(win) if isinstance(dst, GridRef) else (_cut(dst, win, loc) if win is not None else dst)
    if isinstance(value, PendingMatmul):
        value.into(dst, False)
        return
    store_into = getattr(value, "store_into", None)  # nl.loop_reduce: the destination is its accumulator
    if store_into is not None:
        store_into(dst)
        return
    if isinstance(value, Tensor) and _same(dst, value):
        return  # `t[k] += v`: the in-place update already wrote t[k]
    if isinstance(value, Tensor) and sys.getrefcount(value) <= _TEMPORARY and _writes_in_place(dst, value) \
            and t.builder.retarget_last(value.decl.name, dst.access):
        return  # `t[k] = op(...)`: op writes t[k], as 0.1 compiles it (no copy)
    _copy(dst, operand(value, win, loc) if isinstance(value, Masked) else operand(value, None, loc), loc)


def _accumulate(acc, value, op: str):
    """`acc OP= value` where acc is an index grid view or value is an 0.1 result."""
    if isinstance(value, PendingMatmul) and op == "add":
        value.into(acc.view() if isinstance(acc, GridRef) else acc, True)
        return WRITTEN
    win = value.win if isinstance(value, Masked) else None
    if isinstance(acc, GridRef):
        acc = acc.view(win)
    elif win is not None:
        acc = _cut(acc, win, user_loc(3))
    getattr(acc, f"__i{op}__")(operand(value, None, user_loc(3)))
    return WRITTEN


def _forward(cls, unwrap) -> None:
    """Python operators of an 0.1 result: those of the tile it stands for."""
    for op in ("add", "sub", "mul", "truediv", "pow", "mod", "and", "or", "xor", "lshift", "rshift",
               "lt", "le", "gt", "ge"):
        setattr(cls, f"__{op}__", lambda self, other, _op=op: getattr(unwrap(self), f"__{_op}__")(
            operand(other, None)))
        if op not in ("lt", "le", "gt", "ge"):
            setattr(cls, f"__r{op}__", lambda self, other, _op=op: getattr(unwrap(self), f"__r{_op}__")(
                operand(other, None)))
    for op in ("neg", "abs", "invert"):
        setattr(cls, f"__{op}__", lambda self, _op=op: getattr(unwrap(self), f"__{_op}__")())


def _grid_operators() -> None:
    """`grid_ref OP x` reads the view (the statement has no mask); `grid_ref OP= x` updates it in place."""
    for op in ("add", "sub", "mul", "truediv", "pow", "mod", "and", "or", "xor", "lshift", "rshift"):
        def binary(self, other, _op=op):
            return getattr(self.view(other.win if isinstance(other, Masked) else None), f"__{_op}__")(
                operand(other, None))

        def reflected(self, other, _op=op):
            return getattr(self.view(), f"__r{_op}__")(operand(other, None))

        def in_place(self, other, _op=op):
            return _accumulate(self, other, _op)
        setattr(GridRef, f"__{op}__", binary)
        setattr(GridRef, f"__r{op}__", reflected)
        setattr(GridRef, f"__i{op}__", in_place)
    for op in ("neg", "abs", "invert"):
        setattr(GridRef, f"__{op}__", lambda self, _op=op: getattr(self.view(), f"__{_op}__")())


_grid_operators()
_forward(Masked, lambda m: m.tile)
_forward(PendingMatmul, lambda m: m.materialize())
