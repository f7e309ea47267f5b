"""Tensors and zero-copy views. Every view, slice or `.ap`, is one `Access`:
base tensor, affine static offset, optional runtime scalar offset, and
(step, num) pairs in elements of the base's row-major storage."""
from __future__ import annotations

import math

from dataclasses import dataclass

from ..ir import Access, Affine, NkiccError, ScalarOffset, TensorDecl
from ..ir.analysis import extent
from ..ir.nodes import UNRESOLVED_GROUP
from ..ir.ops import TensorOperand, require_generation
from . import dtypes, views
from .allocation import allocate, concrete_shape
from .grid import GridRef, is_grid_key
from .guide import REMOVED, hint
from .tracing import Builder, SymInt, as_affine, user_loc


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
    """A slice of `size` elements from `start` (which may depend on loop indices): `t[nl.ds(i * 128, 128), :]`."""
    if isinstance(size, SymInt):
        return DynSlice(start, size.builder.constant_size(
            size.expr, "the nl.ds size", "use a fixed tile size; handle the ragged end with min() in a separate slice"))
    return DynSlice(start, as_affine(size, "nl.ds size").const)


MAX_TRUTH_TESTS = 100_000  # of one tensor in one trace (NkiTensor.__bool__)


class NkiTensor(TensorOperand):
    """A kernel-visible tensor or a zero-copy view of one (`nl.NkiTensor`).
    Every view (slice, permute, reshape, select, `.ap`, ...) is the same base
    tensor with another `Access`; the shape algebra is in views.py."""
    # Its Python operators (`a + b` is `nl.add(a, b)`) are nl operations, which make
    # tensors: operators.py, above ops.py, adds them to this class.
    __slots__ = ("builder", "decl", "access", "overflow", "unusable")
    _device_store = True  # `t[k] = v` (NKI 0.1) is an instruction, not Python state (loop_effects.py)

    def __init__(self, shape, dtype, storage=None, buffer="sbuf", name="") -> None:
        if isinstance(shape, Builder):  # nkicc's own form: NkiTensor(builder, decl, access|None, overflow=None)
            self._bind(shape, dtype, storage, None if buffer == "sbuf" else buffer)
            return
        # the reference's form: a new tensor, or `storage` (an NkiTensor) seen with this shape
        loc = user_loc(2)
        if storage is None:
            self._bind(*allocate(shape, dtype, buffer, name, loc), None, None)
            return
        if not isinstance(storage, NkiTensor):
            raise NkiccError("E103", f"NkiTensor storage must be None or an NkiTensor, got {type(storage).__name__}",
                             loc, "allocate tensors with nl.ndarray")
        if dtypes.dtype_name(dtype) != storage.decl.dtype:
            raise NkiccError("E160", f"re-binding {storage.decl.dtype} storage as {dtypes.dtype_name(dtype)} is not "
                                     "supported yet", loc, "keep the storage's dtype")
        shape = concrete_shape(shape, loc)
        count = views.product(shape)
        if count > storage.decl.size:
            raise NkiccError("E101", f"shape {list(shape)} needs {count} elements; the storage of {storage.name} "
                                     f"holds {storage.decl.size}", loc)
        self._bind(storage.builder, storage.decl, Access(storage.decl.name, Affine(), row_major(shape)), None)

    def _bind(self, builder: Builder, decl: TensorDecl, access: Access | None, overflow: str | None) -> None:
        self.builder = builder
        self.decl = decl
        self.access = access if access is not None else Access(decl.name, Affine(), row_major(decl.shape))
        # Set when a slice runs past the end of an on-chip free dimension: the
        # hardware reads whatever lies next in the partition, so reading is
        # allowed with a warning and writing is an error.
        self.overflow = overflow
        # The E101 of an .ap() pattern that reaches outside its tensor: making such a
        # view is free (the library makes one per iteration and uses it only where an
        # `if` says it is in range); an instruction that uses it raises it.
        self.unusable: NkiccError | None = None

    # properties a kernel reads
    @property
    def shape(self) -> tuple[int, ...]:
        return self.access.shape

    @property
    def generation(self) -> int:
        """The NeuronCore generation of the target the kernel is traced for."""
        return self.builder.nc_version

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
    def shown(self) -> str:
        """The user's name for it, with the line it was made at (messages)."""
        return self.decl.described()

    @property
    def base_tensor(self) -> "NkiTensor":
        """The whole tensor this view was cut from, in its own dtype (the NKI Library reads it
        before re-viewing packed MX weights)."""
        return NkiTensor(self.builder, self.decl, None, None)

    @property
    def itemsize(self) -> int:
        return dtypes.itemsize(self.decl.dtype)

    @property
    def strides(self) -> tuple[int, ...]:
        """Elements of the base tensor between neighbours along each dimension (0: broadcast)."""
        return tuple(step for step, _ in self.access.pattern)

    @property
    def offset(self):
        """Element offset of the view's first element in its base tensor (a loop index
        expression when it moves with a loop)."""
        return SymInt.wrap(self.access.offset, self.builder)

    @property
    def size(self) -> int:
        return self.access.count

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"NkiTensor({self.access}, {self.decl.dtype}, {self.decl.buffer})"

    def __iter__(self):
        raise NkiccError("E103", "a tensor cannot be iterated in Python", user_loc(2),
                         "index it with a loop: for i in nl.affine_range(t.shape[0])")

    def __bool__(self):
        # NKI's tensors are Python objects, so `if t:` is true: kernels test an
        # optional tensor or tile that way (the NKI Library: `if params.expert_index:`).
        # A comparison's result in an `if` (`if t > 0:`) asks for the device's
        # values, and a register's truth is its run-time value: both are mistakes.
        if self.decl.buffer == "reg" or self.decl.name in self.builder.compared:
            raise NkiccError("E103", f"{self.shown} has no truth value at trace time: its values are known only "
                                     "on the device", user_loc(2),
                             "decide on the device with nl.where or a mask; `if t is not None:` tests presence")
        tests = self.builder.truth_tests
        tests[self.decl.name] = n = tests.get(self.decl.name, 0) + 1
        if n > MAX_TRUTH_TESTS:  # a presence test is asked a few times; `while t:` would never end
            raise NkiccError("E103", f"{self.shown} was tested for truth {MAX_TRUTH_TESTS:,} times: `while t:` on "
                                     "a tensor never ends at trace time (a tensor is always true)", user_loc(2),
                             "loop on device values with nl.while_loop")
        return True

    # views
    def _view(self, access: Access, overflow: str | None = None,
              unusable: NkiccError | None = None) -> "NkiTensor":
        old = self.access
        if old.vector_group:
            raise NkiccError("E160", f"re-viewing the indirect view of {self.shown} (NkiTensor.indirect) is not "
                                     "supported", user_loc(3), "slice the tensor first, then call .indirect()")
        if old.vector is not None and (access.vector is not old.vector or access.offset != old.offset
                                       or access.pattern[:1] != old.pattern[:1]):
            raise NkiccError("E160", f"re-viewing the gathered rows of {self.shown} (a vector_offset view) is not "
                                     "supported", user_loc(3), "make the .ap(..., vector_offset=) view last")
        view = NkiTensor(self.builder, self.decl, access, overflow or self.overflow)
        view.unusable = unusable or self.unusable
        return view

    def _pattern(self, pattern, loc=None) -> "NkiTensor":
        a = self.access
        return self._view(Access(a.tensor, a.offset, tuple(pattern), a.scalar, a.scalar_scale, a.dtype, a.vector))

    def __getitem__(self, key) -> "NkiTensor":
        loc = user_loc(2)
        if not isinstance(key, tuple):
            key = (key,)
        if is_grid_key(key):  # NKI 0.1's nl.arange / nl.mgrid index: a view once the mask is known
            return GridRef(self, key)
        pattern = self.access.pattern
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise NkiccError("E103", "an index can hold at most one `...`", loc)
        if Ellipsis in [k for k in key if not isinstance(k, (SymInt, NkiTensor))]:
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
        dropped_step = None  # the step of the last dimension an integer index dropped
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
            elif isinstance(k, NkiTensor):
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
                else:
                    dropped_step = step
        if dropped_step is not None and len(new_pattern) < (2 if self.decl.on_chip else 1):
            # NKI keeps an on-chip view at least 2-D and an HBM view at least 1-D: the last
            # dimension an integer dropped stays, at size 1 (t[:n, k] of a [P, F] tile is [n, 1])
            new_pattern.append((dropped_step, 1))
        access = Access(self.access.tensor, offset, tuple(new_pattern), self.access.scalar, self.access.scalar_scale,
                        self.access.dtype, self.access.vector)
        return self._view(access, overflow)

    def __setitem__(self, key, value) -> None:
        """`t[key] = value` is NKI 0.1 (language/legacy.py); 0.2 and later write the destination first."""
        if self.builder.setitem is None:
            raise NkiccError("E160", f"`{self.name}[...] = value` (NKI 0.1) in a kernel of NKI 0.6", user_loc(2),
                             "write the destination first, nisa.tensor_copy(dst=t[...], src=value), or import "
                             f"neuronxcc.nki for 0.1 ({hint('dst')})")
        self.builder.setitem(self, key, value)

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0,
           dtype=None) -> "NkiTensor":
        """An explicit [[step, num], ...] pattern over this view's storage, starting at
        the view's own offset plus `offset` elements; a runtime `scalar_offset` moves
        it by that many steps of dimension `indirect_dim` of this view."""
        loc = user_loc(2)
        if vector_offset is not None:
            return self._gather(pattern, offset, vector_offset, indirect_dim, dtype, scalar_offset, loc)
        if dtype is not None and dtypes.dtype_name(dtype) != self.decl.dtype:
            return self._retyped_ap(pattern, offset, dtypes.dtype_name(dtype), scalar_offset, loc)
        pairs = _pattern_pairs(pattern, loc)
        start = self.access.offset + as_affine(0 if offset is None else offset, "ap offset")
        if not 0 <= indirect_dim < self.ndim:
            raise NkiccError("E103", f"indirect_dim={indirect_dim} for a tensor of {self.ndim} dimensions", loc)
        scale = self._indirect_step(indirect_dim)
        scalar, scalar_scale = self.access.scalar, self.access.scalar_scale
        if scalar_offset is not None and scalar is not None:
            raise NkiccError("E160", f"{self.name}: this view already has a runtime offset; a second one is "
                                     "not supported", loc, "check t.is_indirect() before adding one")
        if isinstance(scalar_offset, SymInt):
            start = start + scalar_offset.expr.scale(scale)
        elif isinstance(scalar_offset, int):
            start = start + scalar_offset * scale
        elif isinstance(scalar_offset, NkiTensor):
            scalar, scalar_scale = _scalar_offset(scalar_offset, "scalar_offset", loc), scale
        elif scalar_offset is not None:
            raise NkiccError("E103", f"scalar_offset must be a (1, 1) tensor or a loop index, "
                                     f"got {type(scalar_offset).__name__}", loc)
        access = Access(self.decl.name, start, pairs, scalar, scalar_scale if scalar else 0, self.access.dtype)
        unusable = None
        if scalar is None:
            try:
                check_access_bounds(access, self.decl, self.builder.trips(), loc)
            except NkiccError as err:
                unusable = err
        return self._view(access, unusable=unusable)

    def _indirect_step(self, dim: int) -> int:
        """The elements one step of a runtime offset along `dim` moves: the dimension's step. A
        dimension of size 1 has none in the view's pattern (0, as a broadcast's); it steps as it
        would in a row-major layout, over the dimensions inside it, as NKI's views give it (the
        library selects a rank's part of a reshaped (d, ranks, 1) tensor along its last axis)."""
        pattern = self.access.pattern
        carried = 1  # the row-major step of the dimension after j: one element past the innermost
        for j in range(len(pattern) - 1, dim - 1, -1):
            s, n = pattern[j]
            step = s if (s != 0 or n != 1) else carried
            carried = step * n
        return step

    # --- gathers and scatters: a per-partition offset from an index tile ------------------------

    def _gather(self, pattern, offset, vector_offset, indirect_dim, dtype, scalar_offset, loc) -> "NkiTensor":
        """`.ap(pattern, offset, vector_offset=idx, indirect_dim=d)`: row i of the
        first pair starts at idx[i] steps of this view's dimension d (not at i
        steps of the pair's own); the other pairs step as written."""
        if scalar_offset is not None or self.is_indirect():
            raise NkiccError("E160", f"{self.name}: one runtime offset per view (vector_offset with another one is "
                                     "not supported)", loc, "check t.is_indirect() before adding one")
        if dtype is not None and dtypes.dtype_name(dtype) != self.decl.dtype:
            raise NkiccError("E160", ".ap(dtype=) with a vector_offset is not supported yet", loc)
        if self.decl.on_chip:
            raise NkiccError("E120", f"vector_offset gathers from / scatters to HBM tensors; {self.shown} lives in "
                                     f"{self.buffer}", loc, "gather rows of an HBM tensor with nisa.dma_copy")
        # one index per partition: (n, 1), or any view of one element per partition, such as the
        # library's column of a [t, k] tile seen as [[k, t], [1, 1], [1, 1]] (router_topk)
        if not isinstance(vector_offset, NkiTensor) or not vector_offset.decl.on_chip \
                or len(vector_offset.shape) < 2 or math.prod(vector_offset.shape[1:]) != 1 \
                or dtypes.is_float(vector_offset.decl.dtype):
            shape = list(vector_offset.shape) if isinstance(vector_offset, NkiTensor) else type(vector_offset).__name__
            raise NkiccError("E103", f"vector_offset must be an integer SBUF tile of one index per partition, "
                                     f"shape (n, 1); got {shape}", loc,
                             "copy the indices into an nl.int32 tile of shape (n, 1)")
        pairs = _pattern_pairs(pattern, loc)
        if pairs[0][1] != vector_offset.shape[0]:
            raise NkiccError("E140", f"vector_offset holds {vector_offset.shape[0]} indices for the {pairs[0][1]} "
                                     "rows of the pattern's first pair", loc)
        if not 0 <= indirect_dim < self.ndim:
            raise NkiccError("E103", f"indirect_dim={indirect_dim} for a tensor of {self.ndim} dimensions", loc)
        start = self.access.offset + as_affine(0 if offset is None else offset, "ap offset")
        access = Access(self.decl.name, start, pairs, None, self._indirect_step(indirect_dim), self.access.dtype,
                        vector_offset.access)
        return self._view(access)

    # --- the same bytes as another dtype -------------------------------------------------------
    # A reinterpreting view keeps the tensor's name; its Access names the dtype
    # it reads the bytes as (offset and steps count elements of that dtype),
    # and its decl is the tensor as if declared with that dtype: the last
    # dimension holds as many of its elements as the bytes make.

    def _retyped_decl(self, name: str, loc) -> TensorDecl:
        base = self.builder.decls[self.decl.name]
        if name == base.dtype:
            return base
        last = base.shape[-1] * dtypes.itemsize(base.dtype)
        if not base.shape or last % dtypes.itemsize(name) or (base.on_chip and len(base.shape) < 2):
            raise NkiccError("E140", f"the rows of {base.described()} ({base.dtype}{list(base.shape)}) are not a "
                                     f"whole number of {name} elements", loc,
                             "reinterpret a tensor whose last dimension holds whole elements of the new dtype")
        return TensorDecl(base.name, base.shape[:-1] + (last // dtypes.itemsize(name),), name, base.buffer,
                          base.role, base.loc, base.address)

    def _offset_as(self, name: str, what: str, loc):
        """This view's start in elements of dtype `name` (it must fall on one)."""
        have, want = dtypes.itemsize(self.decl.dtype), dtypes.itemsize(name)
        if have >= want:
            return self.access.offset.scale(have // want)
        start = self.access.offset.floordiv_exact(want // have)
        if start is None:
            raise NkiccError("E140", f"{what}: {self.shown} starts inside a {name} element", loc,
                             f"start the view on a multiple of {want} bytes")
        return start

    def _retyped(self, name: str, start, pairs, loc) -> "NkiTensor":
        decl = self._retyped_decl(name, loc)
        as_ = None if name == self.builder.decls[self.decl.name].dtype else name
        access = Access(self.decl.name, start, tuple(pairs), None, 0, as_)
        check_access_bounds(access, decl, self.builder.trips(), loc)
        return NkiTensor(self.builder, decl, access, self.overflow)

    def _retyped_ap(self, pattern, offset, name: str, scalar_offset, loc) -> "NkiTensor":
        """`.ap(pattern, offset, dtype=)`: pattern and offset count elements of the new dtype."""
        if scalar_offset is not None or self.is_indirect():
            raise NkiccError("E160", ".ap(dtype=) with a runtime offset is not supported yet", loc)
        pairs = _pattern_pairs(pattern, loc)
        start = self._offset_as(name, ".ap(dtype=)", loc) + as_affine(0 if offset is None else offset, "ap offset")
        return self._retyped(name, start, pairs, loc)

    def broadcast_to(self, shape) -> "NkiTensor":
        """A zero-copy view with size-1 dimensions repeated (step 0): `t.broadcast_to((128, n))`."""
        return broadcast_view(self, tuple(int(d) for d in shape), user_loc(2))

    # --- the reference's view methods -------------------------------------------------------
    # All are zero-copy: they return this tensor with another pattern. On-chip
    # tensors keep dimension 0, the partition dimension, in front and unsplit.

    def _dim(self, dim, loc, what: str, allow_end: bool = False) -> int:
        try:
            d = int(dim)
        except (TypeError, ValueError):
            raise NkiccError("E103", f"{what}: dim must be an int, got {dim!r}", loc) from None
        n = self.ndim + (1 if allow_end else 0)
        if d < 0:
            d += n
        if not 0 <= d < n:
            raise NkiccError("E103", f"{what}: dim {dim} is out of range for shape {list(self.shape)}", loc)
        return d

    def _not_partition(self, dim: int, loc, what: str) -> None:
        if dim == 0 and self.decl.on_chip:
            raise NkiccError("E140", f"{what} cannot change dimension 0 of {self.name}, the partition dimension "
                                     f"of an on-chip tensor", loc, "change a free dimension (1 and up)")

    def _shape_error(self, err: Exception, what: str, loc) -> NkiccError:
        return NkiccError("E140", f"{what} of {self.name} (shape {list(self.shape)}): {err}", loc)

    def is_contiguous(self) -> bool:
        """Row-major and dense; on-chip tensors are judged per partition (free dimensions only)."""
        return views.is_contiguous(self.access.pattern, self.decl.on_chip)

    def get_pattern(self) -> list[list[int]]:
        """The view as [[step, num], ...], one pair per dimension."""
        return [[step, num] for step, num in self.access.pattern]

    def is_indirect(self) -> bool:
        """True when the view has a runtime offset: a dynamic select, a
        vector_select / vector_offset gather, or tensor indirection."""
        return self.access.scalar is not None or self.access.vector is not None

    def permute(self, dims) -> "NkiTensor":
        loc = user_loc(2)
        try:
            pattern = views.permute(self.access.pattern, dims)
        except (views.ViewError, TypeError, ValueError) as err:
            raise self._shape_error(err, "permute", loc) from None
        if self.decl.on_chip and int(tuple(dims)[0]) != 0:
            self._not_partition(0, loc, "permute")
        return self._pattern(pattern)

    def broadcast(self, dim, size) -> "NkiTensor":
        loc = user_loc(2)
        d = self._dim(dim, loc, "broadcast")
        self._not_partition(d, loc, "broadcast")
        if self.shape[d] != 1:
            raise NkiccError("E140", f"broadcast: dimension {d} of {self.name} has size {self.shape[d]}, not 1", loc)
        if int(size) <= 0:
            raise NkiccError("E103", f"broadcast: size must be positive, got {size}", loc)
        pattern = list(self.access.pattern)
        pattern[d] = (0, int(size))
        return self._pattern(pattern)

    def expand_dim(self, dim) -> "NkiTensor":
        loc = user_loc(2)
        d = self._dim(dim, loc, "expand_dim", allow_end=True)
        self._not_partition(d, loc, "expand_dim")
        pattern = list(self.access.pattern)
        pattern.insert(d, (0, 1))
        return self._pattern(pattern)

    def squeeze_dim(self, dim) -> "NkiTensor":
        loc = user_loc(2)
        d = self._dim(dim, loc, "squeeze_dim")
        self._not_partition(d, loc, "squeeze_dim")
        if self.shape[d] != 1:
            raise NkiccError("E140", f"squeeze_dim: dimension {d} of {self.name} has size {self.shape[d]}, not 1", loc)
        pattern = list(self.access.pattern)
        del pattern[d]
        return self._pattern(pattern)

    def reshape_dim(self, dim, shape) -> "NkiTensor":
        loc = user_loc(2)
        d = self._dim(dim, loc, "reshape_dim")
        pattern = list(self.access.pattern)
        try:
            sizes = views.infer_sizes(tuple(shape), pattern[d][1])
        except (views.ViewError, TypeError) as err:
            raise self._shape_error(err, "reshape_dim", loc) from None
        if len(sizes) != 1:
            self._not_partition(d, loc, "reshape_dim")
        pattern[d:d + 1] = views.split(pattern[d], sizes)
        return self._pattern(pattern)

    def flatten_dims(self, start_dim, end_dim) -> "NkiTensor":
        loc = user_loc(2)
        a, b = self._dim(start_dim, loc, "flatten_dims"), self._dim(end_dim, loc, "flatten_dims")
        if a > b:
            raise NkiccError("E103", f"flatten_dims: start_dim {a} is after end_dim {b}", loc)
        if a != b:
            self._not_partition(a, loc, "flatten_dims")
        pattern = list(self.access.pattern)
        merged = views.merge(tuple(pattern[a:b + 1]))
        if merged is None:
            raise NkiccError("E140", f"flatten_dims: dimensions {a}..{b} of {self.name} (pattern "
                                     f"{self.get_pattern()[a:b + 1]}) are not contiguous in memory", loc,
                             "merge only dimensions laid out one after the other; copy the view first")
        pattern[a:b + 1] = [merged]
        return self._pattern(pattern)

    def reshape(self, shape) -> "NkiTensor":
        """The same elements in the same order with another shape, without a copy:
        fails when the view's layout needs one (after a permute or a strided slice)."""
        loc = user_loc(2)
        try:
            shape = views.infer_sizes(tuple(shape), self.size)
        except (views.ViewError, TypeError) as err:
            raise self._shape_error(err, "reshape", loc) from None
        if self.decl.on_chip and shape[0] != self.shape[0]:
            raise NkiccError("E140", f"cannot reshape {self.name} from {list(self.shape)} to {list(shape)}: an "
                                     f"on-chip tensor keeps its {self.shape[0]} partitions", loc,
                             "reshape the free dimensions only")
        if self.decl.on_chip:
            rest = views.reshape(self.access.pattern[1:], shape[1:])
            pattern = None if rest is None else (self.access.pattern[0],) + rest
        else:
            pattern = views.reshape(self.access.pattern, shape)
        if pattern is None:
            raise NkiccError("E140", f"cannot reshape a view of shape {list(self.shape)} (pattern "
                                     f"{self.get_pattern()}) to {list(shape)} without a copy", loc,
                             "reshape a contiguous view, or copy it into a new tile first")
        return self._pattern(pattern)

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None) -> "NkiTensor":
        """einops-style: `t.rearrange(('p', ('h', 'w')), ('p', 'w', 'h'), {'h': 4})`."""
        loc = user_loc(2)
        try:
            pattern = views.rearrange(self.access.pattern, src_pattern, dst_pattern, fixed_sizes)
        except (views.ViewError, TypeError) as err:
            raise self._shape_error(err, "rearrange", loc) from None
        if self.decl.on_chip and pattern[:1] != self.access.pattern[:1]:
            self._not_partition(0, loc, "rearrange")
        return self._pattern(pattern)

    def slice(self, dim, start, end, step=1) -> "NkiTensor":
        """t.slice(1, a, b, s) is t[:, a:b:s]."""
        loc = user_loc(2)
        d = self._dim(dim, loc, "slice")
        for v, what in ((start, "start"), (end, "end"), (step, "step")):
            if isinstance(v, bool) or not isinstance(v, (int, SymInt)):
                raise NkiccError("E103", f"slice {what} must be an int or a loop index, got {v!r}", loc)
        if isinstance(step, SymInt) or step < 1:
            raise NkiccError("E103", f"slice step must be an int >= 1, got {step}", loc)
        if isinstance(start, int) and isinstance(end, int) and not 0 <= start < end <= self.shape[d]:
            raise NkiccError("E101", f"slice [{start}:{end}] of dimension {d} of {self.name} (size "
                                     f"{self.shape[d]}): needs 0 <= start < end <= size", loc)
        return self[(slice(None),) * d + (slice(start, end, step),)]

    def select(self, dim, index) -> "NkiTensor":
        """One position of dimension `dim`: an int or loop index, or a (1, 1) int32
        SBUF tensor read at run time. The dimension is removed, except dimension 0
        of an on-chip tensor, which stays with size 1 (as t[i] does)."""
        loc = user_loc(2)
        d = self._dim(dim, loc, "select")
        if not isinstance(index, NkiTensor):
            return self[(slice(None),) * d + (index,)]
        if self.is_indirect():
            raise NkiccError("E160", f"select: {self.name} already has a runtime offset; only one dynamic select "
                                     "per view", loc, "check t.is_indirect() first")
        if d == 0 and self.decl.on_chip:
            raise NkiccError("E140", "select with a runtime index cannot select a partition of an on-chip tensor",
                             loc, "select a free dimension, or an HBM tensor's dimension 0")
        a = self.access
        step = a.pattern[d][0]
        pattern = a.pattern[:d] + a.pattern[d + 1:]
        scalar = _scalar_offset(index, "select index", loc)
        return self._view(Access(a.tensor, a.offset, pattern, scalar, step, a.dtype, a.vector))

    def vector_select(self, dim, vector_offset) -> "NkiTensor":
        loc = user_loc(2)
        d = self._dim(dim, loc, "vector_select")
        if d != 0:
            raise NkiccError("E103", f"vector_select works on dimension 0, got {dim}", loc)
        if self.decl.on_chip:
            raise NkiccError("E120", "vector_select works on HBM tensors only", loc)
        rows = vector_offset.shape[0] if isinstance(vector_offset, NkiTensor) else 1
        pattern = [(self.strides[0], rows)] + list(self.access.pattern[1:])
        return self._gather(pattern, 0, vector_offset, 0, None, None, loc)

    def indirect(self, index, num_elem=None) -> "NkiTensor":
        """Tensor indirection (NeuronCore-v4): a [P, num_elem] view whose column
        i is this view's column index(i), where index(i) = index[i % G, i // G]
        (G partitions per group: 32 when the Tensor Engine reads or writes the
        view, 16 for the other engines). An instruction's input (gather) or
        output (scatter)."""
        loc = user_loc(2)
        try:
            require_generation(self.generation, 4, "NkiTensor.indirect (tensor indirection)")
        except NkiccError as e:
            raise NkiccError(e.code, e.message, loc, e.hint) from None
        if not self.decl.on_chip or self.ndim != 2:
            raise NkiccError("E120", f"indirect: tensor indirection addresses a [partitions, free] SBUF/PSUM view; "
                                     f"{self.shown} is {self.buffer} {list(self.shape)}", loc,
                             "gather rows of an HBM tensor with .vector_select or .ap(vector_offset=)")
        if self.is_indirect():
            raise NkiccError("E160", f"indirect: {self.shown} already has a runtime offset", loc)
        if not isinstance(index, NkiTensor) or not index.decl.on_chip or index.ndim != 2 \
                or dtypes.is_float(index.decl.dtype):
            raise NkiccError("E103", "indirect: index must be an integer SBUF tile of shape (P, K)", loc,
                             "copy the offsets into an nl.int32 / nl.uint32 tile")
        if index.shape[0] != self.shape[0]:
            raise NkiccError("E140", f"indirect: index has {index.shape[0]} partitions, the view {self.shape[0]}",
                             loc, "one row of offsets per partition group row: index.shape[0] == view.shape[0]")
        n = index.size if num_elem is None else int(num_elem)
        if not 1 <= n <= index.size:
            raise NkiccError("E130", f"indirect: num_elem={n}, the index holds {index.size} offsets", loc)
        (pstep, parts), (fstep, _) = self.access.pattern
        access = Access(self.decl.name, self.access.offset, ((pstep, parts), (fstep, n)), None, fstep,
                        self.access.dtype, index.access, UNRESOLVED_GROUP)
        return NkiTensor(self.builder, self.decl, access, self.overflow)

    def view(self, dtype) -> "NkiTensor":
        """The same bytes as another dtype (numpy's `view(dtype)`): the last
        dimension, which must be contiguous, holds itemsize-ratio times more
        (or fewer) elements; the other dimensions stay."""
        loc = user_loc(2)
        name = dtypes.dtype_name(dtype)
        if self.is_indirect():
            raise NkiccError("E160", "view(dtype) after a dynamic select is not supported", loc)
        if name == self.decl.dtype:
            return self._pattern(self.access.pattern)
        pattern = self.access.pattern
        if not pattern or pattern[-1][0] != 1 or (self.decl.on_chip and len(pattern) < 2):
            raise NkiccError("E140", f"view({name}): the last dimension of {self.shown} must be contiguous "
                                     "(step 1) and not the partition dimension", loc,
                             "reinterpret a row-major view, or use .ap(pattern, dtype=)")
        have, want = dtypes.itemsize(self.decl.dtype), dtypes.itemsize(name)
        start = self._offset_as(name, f"view({name})", loc)
        if have >= want:
            r = have // want
            pairs = [(s * r, n) for s, n in pattern[:-1]] + [(1, pattern[-1][1] * r)]
        else:
            r = want // have
            if pattern[-1][1] % r or any(s % r for s, n in pattern[:-1] if n > 1):
                raise NkiccError("E140", f"view({name}): the rows of {self.shown} {list(self.shape)} are not whole "
                                         f"{name} elements", loc, f"the last dimension must hold a multiple of {r}")
            pairs = [(s // r, n) for s, n in pattern[:-1]] + [(1, pattern[-1][1] // r)]
        return self._retyped(name, start, pairs, loc)

    reinterpret_cast = view


def _scalar_offset(t: "NkiTensor", what: str, loc) -> ScalarOffset:
    """A (1, 1) integer SBUF tensor whose value moves a view at run time."""
    if t.access.count != 1:
        raise NkiccError("E103", f"{what} must be a (1, 1) tensor, got shape {list(t.shape)}", loc)
    if not (t.decl.on_chip or t.decl.buffer == "reg"):
        raise NkiccError("E120", f"{what} must live on SBUF or be a register", loc)
    if not t.decl.dtype.startswith(("int", "uint")):
        raise NkiccError("E103", f"{what} must be an integer tile (int32), {t.shown} is {t.decl.dtype}", loc,
                         "keep runtime offsets in an nl.int32 tile")
    return ScalarOffset(tensor=t.access.tensor, offset=t.access.offset)


def _slice_bounds(k, num: int, dim: int, loc, t: NkiTensor) -> tuple[Affine, int, int]:
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
    if start.is_const and stop.is_const:  # (most slices: no Affine arithmetic, no message made)
        extent = stop.const - start.const
    else:
        extent = t.builder.constant_size(stop - start, f"the size of slice [{k.start}:{k.stop}] on dimension {dim}",
                                         "slice sizes in a hardware loop are constants; use nl.ds(start, size)")
    size = -(-extent // stride)
    if size <= 0:
        raise NkiccError("E101", f"slice [{k.start}:{k.stop}] on dimension {dim} is empty", loc)
    return start, size, stride


def _check_range(start: Affine, size: int, stride: int, num: int, trips, dim: int, loc, t: NkiTensor) -> None:
    lo, hi = start.bounds(trips)
    last = hi + (size - 1) * stride
    if lo < 0 or last >= num:
        raise NkiccError("E101", f"index out of bounds on dimension {dim} of {t.shown} "
                                 f"(size {num}): reaches [{lo}, {last}]", loc,
                         "check the slice bounds and the loop trip counts")


def check_access_bounds(access: Access, decl: TensorDecl, trips, loc) -> None:
    lo, hi = extent(access, trips, decl)
    if lo < 0 or hi >= decl.size:
        raise NkiccError("E101", f"access pattern on {decl.described()} reaches elements [{lo}, {hi}] "
                                 f"of a tensor with {decl.size}", loc,
                         "check the pattern's steps and counts and the offset")


Tensor = NkiTensor  # nkicc's older name


def broadcast_view(t: Tensor, shape: tuple[int, ...], loc) -> Tensor:
    pattern = list(t.access.pattern)
    if len(pattern) > len(shape):
        raise NkiccError("E140", f"cannot broadcast {list(t.shape)} to {list(shape)}", loc)
    pattern = [(0, 1)] * (len(shape) - len(pattern)) + pattern
    out = []
    for (step, num), want in zip(pattern, shape):
        if num == want:
            out.append((step, num))
        elif num == 1:
            out.append((0, want))
        else:
            raise NkiccError("E140", f"cannot broadcast {list(t.shape)} to {list(shape)}", loc)
    a = t.access
    if a.vector is not None and (a.vector_group or tuple(out[:1]) != a.pattern[:1]):
        raise NkiccError("E160", "broadcasting a vector_offset view is not supported", loc)
    return Tensor(t.builder, t.decl, Access(a.tensor, a.offset, tuple(out), a.scalar, a.scalar_scale, a.dtype, a.vector))


def wrap(builder: Builder, decl: TensorDecl) -> NkiTensor:
    return NkiTensor(builder, decl)


class UnsupportedName(NkiccError, AttributeError):
    """`nl.NAME` / `nisa.NAME` that nkicc does not provide: E160 at the kernel's
    line, and still an AttributeError for hasattr() and getattr(..., default)."""


def unsupported_name(module: str, name: str) -> UnsupportedName:
    rule = REMOVED.get(f"{module}.{name}")
    if rule is not None:  # NKI 0.1 wrote it (import neuronxcc.nki), later versions removed it
        return UnsupportedName("E160", f"{module}.{name} is NKI 0.1, removed in 0.2", user_loc(3),
                               f"import neuronxcc.nki to run the kernel as 0.1, or {hint(rule)}")
    return UnsupportedName("E160", f"{module}.{name} is not supported by nkicc (or is not NKI)", user_loc(3),
                           "docs/api.md lists the operations nkicc provides")


def _pattern_pairs(pattern, loc) -> tuple[tuple[int, int], ...]:
    """`.ap`'s [[step, num], ...] as int pairs, each num at least 1."""
    try:
        pairs = tuple((int(s), int(n)) for s, n in pattern)
    except (TypeError, ValueError):
        raise NkiccError("E103", "an access pattern is a list of [step, num] pairs", loc) from None
    if not pairs or any(n <= 0 for _, n in pairs):
        raise NkiccError("E103", f"access pattern {list(map(list, pairs))} must have pairs with num >= 1", loc)
    return pairs
