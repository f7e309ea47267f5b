"""Index grids of NKI 0.1 (`nl.arange`, `nl.mgrid`) and their `mask=` predicates.

An index grid expression is affine: a constant (an int or a loop index) plus an
integer coefficient per axis of a broadcast grid, each axis counting 0..extent-1.
Indexing a tensor with such expressions selects, for every point of the grid,
the element they address; since everything is affine, that selection is one
strided access pattern (one `[step, num]` pair per grid axis), so the grid
becomes an ordinary view and loops around it stay rolled.

A mask is a conjunction of comparisons of such expressions with 0. nkicc takes
masks whose every comparison bounds one grid axis: the mask is then a box, a
window [lo, hi) per axis, and a masked statement is the unmasked one on the
window's part of each operand (rows a ragged tile does not have are never
touched). A comparison over two axes at once (a triangle) is not a box: E161.

Indexing is lazy (`GridRef`): the view is built only when the statement's mask
is known, since the unmasked index may run past the tensor's end.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import NkiccError
from .guide import hint
from .tracing import SymInt, user_loc

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _is_offset(x) -> bool:
    return isinstance(x, SymInt) or (isinstance(x, int) and not isinstance(x, bool))


def unsupported(what: str, rule: str, loc=None, version: str = "0.1") -> NkiccError:
    """The one-line error for an older dialect's form nkicc cannot run, naming the guide's section."""
    return NkiccError("E161", f"{what} (NKI {version}) is not supported by nkicc", loc or user_loc(3), hint(rule))


@dataclass(frozen=True, eq=False)
class GridIndex:
    """`const + sum(coef[a] * k_a)` over the axes a of an `ndim`-dimensional
    grid, k_a in 0..extent[a]-1. Axes are numbered from the left, and operands
    of different ndim align on the right, as numpy broadcasts."""
    ndim: int
    const: object  # int or SymInt
    coefs: tuple  # ((axis, coef), ...)
    extents: tuple  # ((axis, extent), ...): every axis this expression spans

    _is_index_grid = True  # what tensors and loop indices look for (duck typing, no import)

    # --- shape -------------------------------------------------------------------------
    def _aligned(self, ndim: int) -> "GridIndex":
        s = ndim - self.ndim
        return GridIndex(ndim, self.const, tuple((a + s, c) for a, c in self.coefs),
                         tuple((a + s, n) for a, n in self.extents))

    @property
    def shape(self) -> tuple[int, ...]:
        ext = dict(self.extents)
        return tuple(ext.get(a, 1) for a in range(self.ndim))

    def __getitem__(self, key):
        """`nl.arange(n)[:, None]`: place the axes (`:`) among new size-1 ones (`None`)."""
        key = key if isinstance(key, tuple) else (key,)
        if any(k is not None and k != slice(None) for k in key) or sum(k is not None for k in key) != self.ndim:
            raise unsupported(f"indexing an index grid with {key!r}", "mgrid")
        where = [i for i, k in enumerate(key) if k is not None]
        return GridIndex(len(key), self.const, tuple((where[a], c) for a, c in self.coefs),
                         tuple((where[a], n) for a, n in self.extents))

    # --- arithmetic (affine only) --------------------------------------------------------
    def _combine(self, other, sign: int) -> "GridIndex":
        if _is_offset(other):
            return GridIndex(self.ndim, self.const + sign * other, self.coefs, self.extents)
        if not isinstance(other, GridIndex):
            return NotImplemented
        n = max(self.ndim, other.ndim)
        a, b = self._aligned(n), other._aligned(n)
        coefs = dict(a.coefs)
        for axis, c in b.coefs:
            coefs[axis] = coefs.get(axis, 0) + sign * c
        ext = dict(a.extents)
        for axis, e in b.extents:
            if ext.get(axis, 1) not in (1, e) and e != 1:
                raise NkiccError("E140", f"index grids of extents {ext[axis]} and {e} on one axis do not broadcast",
                                 user_loc(3))
            ext[axis] = max(ext.get(axis, 1), e)
        return GridIndex(n, a.const + sign * b.const, tuple(sorted((k, v) for k, v in coefs.items() if v)),
                         tuple(sorted(ext.items())))

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return self * -1

    def __pos__(self):
        return self

    def __mul__(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            return GridIndex(self.ndim, self.const * other, tuple((a, c * other) for a, c in self.coefs if c * other),
                             self.extents)
        if isinstance(other, (GridIndex, SymInt)):
            raise unsupported("a product of two indices in an index grid (not affine)", "mgrid")
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other):
        raise unsupported(f"`// {other!r}` on an index grid (not affine)", "mgrid")

    __mod__ = __truediv__ = __floordiv__

    # --- comparisons make mask predicates ---------------------------------------------
    def _cmp(self, other, rel: str):
        if _is_offset(other) or isinstance(other, GridIndex):
            return GridMask(((self - other, rel),))
        return NotImplemented

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __bool__(self):
        raise unsupported("the truth of an index grid (use it in a mask= instead)", "mask")


def arange(*args) -> GridIndex:
    """`nl.arange([start,] stop[, step])`: a 1-dimensional index grid."""
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    for v in (start, stop, step):
        if not (isinstance(v, int) and not isinstance(v, bool)):
            raise NkiccError("E103", f"nl.arange takes integers, got {type(v).__name__}", user_loc(2),
                             "index grids have a size known when the kernel is traced")
    n = len(range(start, stop, step))
    return GridIndex(1, start, ((0, step),) if n > 1 else (), ((0, n),))


class GridTuple(tuple):
    """What `nl.mgrid[...]` returns: the index grids, also named `.p` (the partition
    axis) and `.x`, `.y`, `.z` (the free axes)."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])
    y = property(lambda self: self[2])
    z = property(lambda self: self[3])


class _MGrid:
    """`nl.mgrid[0:128, 0:512]`: one index grid per slice, each on its own axis."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for axis, s in enumerate(key):
            if not isinstance(s, slice) or s.stop is None:
                raise NkiccError("E103", f"nl.mgrid takes slices with a stop, got {s!r}", user_loc(2))
            start, step = s.start or 0, s.step or 1
            n = len(range(start, s.stop, step))
            out.append(GridIndex(len(key), start, ((axis, step),) if n > 1 else (), ((axis, n),)))
        return GridTuple(out) if len(out) > 1 else out[0]

    def __repr__(self) -> str:
        return "nl.mgrid"


mgrid = _MGrid()


@dataclass(frozen=True, eq=False)
class GridMask:
    """A conjunction of `expr REL 0` over index grid expressions (`mask=`)."""
    terms: tuple  # ((GridIndex, rel), ...)

    def __and__(self, other):
        if not isinstance(other, GridMask):
            return NotImplemented
        return GridMask(self.terms + other.terms)

    def __bool__(self):
        raise unsupported("the truth of a mask (pass it as mask=)", "mask")


# --- windows ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """What a mask leaves of a grid: per axis (lo, hi, full extent); `empty` when nothing."""
    ndim: int
    axes: tuple  # ((axis, lo, hi, extent), ...)
    empty: bool = False

    def bounds(self, ndim: int) -> dict:
        s = ndim - self.ndim
        return {a + s: (lo, hi, n) for a, lo, hi, n in self.axes}

    def fit(self, shape: tuple[int, ...]) -> "Window":
        """The window on the axes a result of `shape` still spans: an instruction whose
        result has other sizes than its masked operands (bn_stats: 6 per 512) keeps the rest whole."""
        s = len(shape) - self.ndim
        keep = tuple(ax for ax in self.axes if 0 <= ax[0] + s < len(shape) and shape[ax[0] + s] == ax[3])
        return Window(self.ndim, keep, self.empty)


def _ceil_div(num, den: int):
    return -((-num) // den)


def window(mask) -> Window:
    """The box a mask leaves, loop by loop (a bound that moves with a loop index
    splits that loop where the box changes size)."""
    if isinstance(mask, GridIndex) or not isinstance(mask, GridMask):
        raise NkiccError("E103", f"mask= takes comparisons of index grids (`i_p < n`), got {type(mask).__name__}",
                         user_loc(3))
    ndim = max(e.ndim for e, _ in mask.terms)
    lo: dict = {}
    hi: dict = {}
    ext: dict = {}
    empty = False
    for expr, rel in mask.terms:
        expr = expr._aligned(ndim)
        ext.update(expr.extents)
        if rel in (">", ">="):  # c*k + K > 0  <=>  -c*k - K < 0
            expr, rel = -expr, _FLIP[rel]
        k = expr.const if rel == "<" else expr.const - 1  # c*k + K <= 0  <=>  c*k + K - 1 < 0
        if not expr.coefs:
            if k >= 0:  # a predicate on loop indices only: false on this piece of the loop
                empty = True
            continue
        if len(expr.coefs) > 1:
            raise unsupported("a mask comparing two grid axes (not a box)", "mask", user_loc(4))
        axis, c = expr.coefs[0]
        if c > 0:  # c*k < -K  <=>  k < ceil(-K / c)
            bound = _ceil_div(-k, c)
            hi[axis] = bound if axis not in hi else min(hi[axis], bound)
        else:  # -|c|*k < -K  <=>  k > K / |c|  <=>  k >= floor(K / |c|) + 1
            lo[axis] = max(lo.get(axis, 0), k // -c + 1)
    axes = []
    for axis in sorted(set(lo) | set(hi)):
        n = dict(ext).get(axis, 1)
        a, b = max(lo.get(axis, 0), 0), min(hi.get(axis, n), n)
        if b <= a:
            empty = True
            b = a
        axes.append((axis, a, b, n))
    return Window(ndim, tuple(axes), empty)


@dataclass(frozen=True, eq=False)
class GridRef:
    """`t[index grids]`, not yet a view: the statement's mask may still cut it."""
    tensor: object
    key: tuple

    _is_grid_ref = True

    def _grid(self):
        for k in self.key:
            if isinstance(k, slice) or k is Ellipsis:
                raise unsupported(f"an index grid next to a {type(k).__name__} index", "mgrid", user_loc(4))
            if not (isinstance(k, GridIndex) or _is_offset(k)):
                raise unsupported(f"an index grid next to a {type(k).__name__} index", "dynamic-access", user_loc(4))
        grids = [k for k in self.key if isinstance(k, GridIndex)]
        n = max(g.ndim for g in grids)
        keys = [k._aligned(n) if isinstance(k, GridIndex) else GridIndex(n, k, (), ()) for k in self.key]
        ext: dict = {}
        for k in keys:
            for a, e in k.extents:
                ext[a] = max(ext.get(a, 1), e)
        return n, keys, ext

    @property
    def shape(self) -> tuple[int, ...]:
        n, _, ext = self._grid()
        return tuple(ext.get(a, 1) for a in range(n))

    @property
    def dtype(self):
        return self.tensor.dtype

    @property
    def buffer(self):
        return self.tensor.buffer

    def view(self, win: Window | None = None):
        """The strided view of the grid's points (inside `win`)."""
        t = self.tensor
        n, keys, ext = self._grid()
        bounds = win.bounds(n) if win is not None else {}
        for a, (lo, hi, full) in bounds.items():
            if ext.get(a, 1) not in (1, full):
                raise NkiccError("E140", f"the mask spans {full} on grid axis {a}, the index {ext[a]}", user_loc(3))
        strides = t.strides
        if len(keys) != len(strides):
            raise NkiccError("E103", f"{len(keys)} indices for a tensor of {len(strides)} dimensions "
                                     f"(shape {list(t.shape)})", user_loc(3))
        if t.buffer != "hbm" and t.buffer != "shared_hbm" and any(a != 0 for a, _ in keys[0].coefs):
            raise unsupported("a partition index that moves along a free grid axis", "mgrid", user_loc(3))
        offset = 0
        pattern = []
        for a in range(n):
            lo, hi, _ = bounds.get(a, (0, ext.get(a, 1), None))
            step = sum(dict(k.coefs).get(a, 0) * s for k, s in zip(keys, strides))
            offset = offset + step * lo
            num = int(hi - lo) if ext.get(a, 1) > 1 else 1  # a size moving with a loop: that loop is traced concretely
            pattern.append([step if step or num > 1 else (strides[0] if a == 0 else 1), num])
        for k, s in zip(keys, strides):
            offset = offset + k.const * s
        return t.ap(pattern=pattern, offset=offset)


def is_grid_key(key: tuple) -> bool:
    return any(isinstance(k, GridIndex) for k in key)
