"""Tensors and zero-copy views. Every view, slice or `.ap`, is one `Access`:
base tensor, affine static offset, optional runtime scalar offset, and
(step, num) pairs in elements of the base's row-major storage."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Access, Affine, NkiccError, ScalarOffset, TensorDecl
from ..ir.analysis import extent
from ..ir.ops import TensorOperand
from . import dtypes
from .tracing import Builder, SymInt, as_affine, current_builder, user_loc


def row_major(shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    pairs = []
    stride = 1
    for d in reversed(shape):
        pairs.append((stride, d))
        stride *= d
    return tuple(reversed(pairs))


@dataclass(frozen=True)
class DynSlice:
    """nl.ds(start, size): `size` elements from `start` (start may be a loop index)."""
    start: object
    size: int


def ds(start, size) -> DynSlice:
    size = as_affine(size, "nl.ds size")
    if not size.is_const:
        raise NkiccError("E102", "nl.ds size must be a compile-time constant", user_loc(2),
                         "use a fixed tile size; handle the ragged end with min() in a separate slice")
    return DynSlice(start, size.const)


class Tensor(TensorOperand):
    """A kernel-visible tensor or view of one."""
    __slots__ = ("builder", "decl", "access", "overflow")

    def __init__(self, builder: Builder, decl: TensorDecl, access: Access | None = None,
                 overflow: str | None = None) -> None:
        self.builder = builder
        self.decl = decl
        self.access = access if access is not None else Access(decl.name, Affine(), row_major(decl.shape))
        # Set when a slice runs past the end of an on-chip free dimension: the
        # hardware reads whatever lies next in the partition, so reading is
        # allowed with a warning and writing is an error.
        self.overflow = overflow

    # properties a kernel reads
    @property
    def shape(self) -> tuple[int, ...]:
        return self.access.shape

    @property
    def ndim(self) -> int:
        return len(self.access.pattern)

    @property
    def dtype(self):
        return dtypes.public(self.decl.dtype)

    @property
    def buffer(self) -> str:
        return self.decl.buffer

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def itemsize(self) -> int:
        return dtypes.itemsize(self.decl.dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tensor({self.access}, {self.decl.dtype}, {self.decl.buffer})"

    def __iter__(self):
        raise NkiccError("E103", "a tensor cannot be iterated in Python", user_loc(2),
                         "index it with a loop: for i in nl.affine_range(t.shape[0])")

    def __bool__(self):
        raise NkiccError("E103", "a tensor has no truth value at trace time", user_loc(2),
                         "compare values on the device with nl.where or nl.greater")

    # views
    def _view(self, access: Access, overflow: str | None = None) -> "Tensor":
        return Tensor(self.builder, self.decl, access, overflow or self.overflow)

    def __getitem__(self, key) -> "Tensor":
        loc = user_loc(2)
        if not isinstance(key, tuple):
            key = (key,)
        pattern = self.access.pattern
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise NkiccError("E103", "an index can hold at most one `...`", loc)
        if Ellipsis in [k for k in key if not isinstance(k, (SymInt, Tensor))]:
            i = next(n for n, k in enumerate(key) if k is Ellipsis)
            fill = len(pattern) - (len(key) - 1)
            key = key[:i] + (slice(None),) * max(fill, 0) + key[i + 1:]
        if len(key) > len(pattern):
            raise NkiccError("E103", f"{len(key)} indices for a tensor of {len(pattern)} dimensions "
                                     f"(shape {list(self.shape)})", loc)
        key = key + (slice(None),) * (len(pattern) - len(key))
        offset = self.access.offset
        new_pattern: list[tuple[int, int]] = []
        trips = self.builder.trips()
        overflow = None
        for dim, (k, (step, num)) in enumerate(zip(key, pattern)):
            if isinstance(k, (slice, DynSlice)):
                start, size, stride = _slice_bounds(k, num, dim, loc, self)
                try:
                    _check_range(start, size, stride, num, trips, dim, loc, self)
                except NkiccError as err:
                    if not (self.decl.on_chip and dim > 0 and start.bounds(trips)[0] >= 0):
                        raise
                    overflow = err.message
                offset = offset + start.scale(step)
                new_pattern.append((step * stride, size))
            elif isinstance(k, Tensor):
                raise NkiccError("E160", "indexing with a tensor (indirect access) is not supported yet", loc,
                                 "use .ap(..., scalar_offset=tile) for a runtime offset")
            else:
                idx = as_affine(k)
                if idx.is_const and idx.const < 0:
                    idx = Affine.of(idx.const + num)
                _check_range(idx, 1, 1, num, trips, dim, loc, self)
                offset = offset + idx.scale(step)
                if dim == 0 and self.decl.on_chip:
                    new_pattern.append((step, 1))
        access = Access(self.access.tensor, offset, tuple(new_pattern), self.access.scalar, self.access.scalar_scale)
        return self._view(access, overflow)

    def ap(self, pattern, offset=0, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None) -> "Tensor":
        loc = user_loc(2)
        if vector_offset is not None:
            raise NkiccError("E160", "vector_offset (indirect DMA) is not supported yet", loc)
        if dtype is not None and dtypes.dtype_name(dtype) != self.decl.dtype:
            raise NkiccError("E160", "reinterpreting a tensor with .ap(dtype=) is not supported yet", loc)
        try:
            pairs = tuple((int(s), int(n)) for s, n in pattern)
        except (TypeError, ValueError):
            raise NkiccError("E103", "an access pattern is a list of [step, num] pairs", loc) from None
        if not pairs or any(n <= 0 for _, n in pairs):
            raise NkiccError("E103", f"access pattern {list(map(list, pairs))} must have pairs with num >= 1", loc)
        start = as_affine(offset, "ap offset")
        shape = self.decl.shape
        if not 0 <= indirect_dim < len(shape):
            raise NkiccError("E103", f"indirect_dim={indirect_dim} for a tensor of {len(shape)} dimensions", loc)
        scale = 1
        for d in shape[indirect_dim + 1:]:
            scale *= d
        scalar = None
        if isinstance(scalar_offset, SymInt):
            start = start + scalar_offset.expr.scale(scale)
        elif isinstance(scalar_offset, int):
            start = start + scalar_offset * scale
        elif isinstance(scalar_offset, Tensor):
            if scalar_offset.access.count != 1:
                raise NkiccError("E103", f"scalar_offset must be a (1, 1) tensor, got shape {list(scalar_offset.shape)}", loc)
            if not (scalar_offset.decl.on_chip or scalar_offset.decl.buffer == "reg"):
                raise NkiccError("E120", "scalar_offset must live on SBUF or be a register", loc)
            if not scalar_offset.decl.dtype.startswith(("int", "uint")):
                raise NkiccError("E103", f"scalar_offset must be an integer tile (int32), "
                                         f"{scalar_offset.name} is {scalar_offset.decl.dtype}", loc,
                                 "keep runtime offsets in an nl.int32 tile")
            so = scalar_offset.access
            scalar = ScalarOffset(tensor=so.tensor, offset=so.offset)
        elif scalar_offset is not None:
            raise NkiccError("E103", f"scalar_offset must be a (1, 1) tensor or a loop index, "
                                     f"got {type(scalar_offset).__name__}", loc)
        access = Access(self.decl.name, start, pairs, scalar, scale if scalar else 0)
        if scalar is None:
            check_access_bounds(access, self.decl, self.builder.trips(), loc)
        return self._view(access)

    def broadcast_to(self, shape) -> "Tensor":
        """A zero-copy view with size-1 dimensions repeated (step 0): `t.broadcast_to((128, n))`."""
        from .ops import broadcast_view
        return broadcast_view(self, tuple(int(d) for d in shape), user_loc(2))

    def reshape(self, shape) -> "Tensor":
        loc = user_loc(2)
        shape = tuple(int(d) for d in shape)
        n = 1
        for d in shape:
            n *= d
        contiguous = self.access.pattern == row_major(self.shape)
        if n != self.access.count or not contiguous:
            raise NkiccError("E140", f"cannot reshape a view of shape {list(self.shape)} to {list(shape)}", loc,
                             "reshape only contiguous views with the same element count")
        return self._view(Access(self.access.tensor, self.access.offset, row_major(shape),
                                 self.access.scalar, self.access.scalar_scale))


def _slice_bounds(k, num: int, dim: int, loc, t: Tensor) -> tuple[Affine, int, int]:
    if isinstance(k, DynSlice):
        return as_affine(k.start, "nl.ds start"), k.size, 1
    stride = 1 if k.step is None else k.step
    if not isinstance(stride, int) or stride <= 0:
        raise NkiccError("E103", f"slice step must be a positive int, got {k.step!r}", loc)
    start = Affine.of(0) if k.start is None else as_affine(k.start, "slice start")
    stop = Affine.of(num) if k.stop is None else as_affine(k.stop, "slice stop")
    if start.is_const and start.const < 0:
        start = Affine.of(start.const + num)
    if stop.is_const and stop.const < 0:
        stop = Affine.of(stop.const + num)
    extent = stop - start
    if not extent.is_const:
        raise NkiccError("E102", f"slice [{k.start}:{k.stop}] on dimension {dim} has a size that depends on "
                                 f"a loop index ({extent})", loc,
                         "slice sizes must be compile-time constants; use nl.ds(start, size)")
    size = -(-extent.const // stride)
    if size <= 0:
        raise NkiccError("E101", f"slice [{k.start}:{k.stop}] on dimension {dim} is empty", loc)
    return start, size, stride


def _check_range(start: Affine, size: int, stride: int, num: int, trips, dim: int, loc, t: Tensor) -> None:
    lo, hi = start.bounds(trips)
    last = hi + (size - 1) * stride
    if lo < 0 or last >= num:
        raise NkiccError("E101", f"index out of bounds on dimension {dim} of {t.decl.name} "
                                 f"(size {num}): reaches [{lo}, {last}]", loc,
                         "check the slice bounds and the loop trip counts")


def check_access_bounds(access: Access, decl: TensorDecl, trips, loc) -> None:
    lo, hi = extent(access, trips, decl)
    if lo < 0 or hi >= decl.size:
        raise NkiccError("E101", f"access pattern on {decl.name} reaches elements [{lo}, {hi}] "
                                 f"of a tensor with {decl.size}", loc,
                         "check the pattern's steps and counts and the offset")


def wrap(builder: Builder, decl: TensorDecl) -> Tensor:
    return Tensor(builder, decl)


class UnsupportedName(NkiccError, AttributeError):
    """`nl.NAME` / `nisa.NAME` that nkicc does not provide: E160 at the kernel's
    line, and still an AttributeError for hasattr() and getattr(..., default)."""


def unsupported_name(module: str, name: str) -> UnsupportedName:
    return UnsupportedName("E160", f"{module}.{name} is not supported by nkicc (or is not NKI)", user_loc(3),
                           "see NKI_SPEC section 4 for the operations nkicc provides")


def require_builder(what: str) -> Builder:
    b = current_builder()
    if b is None:
        raise NkiccError("E160", f"{what} can only be called inside a kernel that nkicc traces", user_loc(3),
                         "decorate the kernel with @nki.jit / @nkicc.jit and call it")
    return b
