"""Strided views of one entry of a batched loop nest (simulator/batched.py).

Batched execution reads and writes every access of a nest once, over all the
nest's iterations: one numpy view per access, with a leading axis per loop.
Shared tensors are viewed in machine memory; tiles allocated inside the nest
are private to their iteration, each a typed array with a leading axis per
enclosing loop of the nest (stored partition-innermost where a matmul reads
them, Nest.columns). A tile one load fills whole from HBM is viewed at the
load's source (Nest.forward); a read that wraps rows of a tile the nest does
not write is a gathered copy (_wrapped). How each view is made depends only on
the geometry, so it is kept as a recipe per nest (Nest.recipes) and a later
entry only wraps its buffers. Views also holds what the entry owes its tiles:
tiles of zeros not yet filled, and GEMM products not yet written
(matmul_groups.one_add, forward_products), made real before anything else
reads them (`zero`, `before`).
"""
from __future__ import annotations

import numpy as np

from ..ir import Access
from ..ir.analysis import tensors_touched
from .cpushare import halves

_MAX_RECIPES = 1 << 14            # view recipes kept per nest (Nest.recipes): a nest entered at many offsets


def shift(a: Access, values: dict) -> int:
    """The elements access a's runtime scalar offset adds at this entry."""
    return values[a.scalar] * a.scalar_scale if a.scalar is not None else 0


class Views:
    """Strided views of one entry of a nest: machine memory for shared
    tensors, private arrays for the nest's own tiles."""

    def __init__(self, sim, nest, env: dict, values: dict):
        self.sim, self.nest, self.env, self.values = sim, nest, env, values
        self.priv: dict = {}
        # tiles of zeros not yet zeroed: each is filled just before something first touches it, or
        # never, where a sum's first write covers the whole of it (matmul_groups.one_add)
        self.unfilled: set = set()
        # tiles whose content is a GEMM's products not yet written: name -> (the tile's elements as one
        # strided view, the products in the same shape). A GEMM that reads such a tile reads the
        # products instead (matmul_groups.forward_products); anything else gets them written first (`zero`)
        self.products: dict = {}
        for name, vars_ in nest.private.items():
            if name in nest.dead or name in nest.forward or name not in nest.uses:
                continue
            t = sim.tensors[name]
            lead = tuple(nest.trips[v] for v in vars_)
            column = name in nest.columns
            shape = lead + ((t.F, t.P) if column else (t.P, t.F))
            if name in nest.zeroed:
                self.unfilled.add(name)
            data = sim.scratch.take(shape, t.dtype, None if name in nest.zeroed or name in nest.fresh else t.fill)
            if column:
                data = data.swapaxes(-1, -2)  # indexed (partition, free) like the others
            mask = sim.scratch.take(shape, np.bool_, False) if t.is_psum else None
            self.priv[name] = (data, mask, vars_)

    def zero(self, names) -> None:
        """The tiles among `names` made what the program says they hold, before anything reads or
        adds into them: zeros filled, or GEMM products written (x + 0.0: 0 + x, a -0.0 product
        summing to +0.0 as it would)."""
        for name in self.unfilled.intersection(names):
            self.unfilled.discard(name)
            halves(self.sim, lambda _, d: d.fill(0), None, self.priv[name][0], True)
        for name in [n for n in names if n in self.products]:
            dst, terms = self.products.pop(name)
            halves(self.sim, lambda r, d: np.add(r(0), np.float32(0), out=d), lambda _: terms, dst, True)

    def before(self, ops, kept=frozenset()) -> None:
        """`zero` for the tiles any of `ops` touches but `kept`, before they run (nothing worked
        out while no tile waits: the usual case, on every instruction of every entry)."""
        if self.unfilled or self.products:
            self.zero(set().union(*map(tensors_touched, ops)) - kept)

    def release(self) -> None:
        for data, mask, _ in self.priv.values():
            self.sim.scratch.give(data)
            if mask is not None:
                self.sim.scratch.give(mask)
        self.priv, self.products, self.unfilled = {}, {}, set()

    def start(self, a: Access) -> int:
        """The element access a starts at for this entry, the nest's own loops at 0."""
        trips = self.nest.trips
        return a.offset.const + sum(c * self.env[v] for v, c in a.offset.terms if v not in trips) + shift(a, self.values)

    def view(self, a: Access, lead: tuple, read: bool = False):
        """(data, PSUM written-mask or None) of access a over the loops `lead`, or None if it
        wraps rows or leaves its tensor (per-iteration execution handles those). A read that
        wraps rows of a tile the nest does not write gets a gathered copy instead (_wrapped)."""
        t = self.sim.tensors[a.tensor]
        e = self.start(a)
        fw, priv = self.nest.forward.get(t.name), self.priv.get(t.name)
        key = (id(a), lead, read, e, self.start(fw[1]) if fw is not None else None,
               priv[0].strides if priv is not None else None)
        recipe = self.nest.recipes.get(key)
        if recipe is None:
            recipe = self._recipe(a, t, lead, read, e, fw)
            if len(self.nest.recipes) >= _MAX_RECIPES:
                self.nest.recipes.clear()
            self.nest.recipes[key] = recipe
        kind = recipe[0]
        if kind == "none":
            return None
        if kind == "wrapped":
            return _wrapped(self, a, t, lead, e)
        _, where, dtype, off, shape, strides, mask = recipe
        if kind == "memory":
            data = np.ndarray(shape, dtype, self.sim._mv[where], off, strides)
            return data, None if mask is None else np.ndarray(shape, np.bool_, self.sim._mask_mv, *mask)
        arr, marr, _ = self.priv[where]
        data = np.ndarray(shape, dtype, arr.base if arr.base is not None else arr, off, strides)
        return data, None if mask is None else np.ndarray(shape, np.bool_, marr, *mask)

    def _recipe(self, a: Access, t, lead: tuple, read: bool, e: int, fw) -> tuple:
        """How `view` makes access a's view: ("none",), ("wrapped",) (a gathered copy, made anew
        each time: it copies values), or ("memory" | "private", the machine memory's key | the
        private tile, dtype, byte offset, shape, strides, the PSUM mask's (offset, strides) or None)."""
        sim, trips = self.sim, self.nest.trips
        dims = [(a.offset.coeff(v), trips[v]) for v in lead] + list(a.pattern)
        shape = tuple(n for _, n in dims)
        if not t.onchip:
            lo = e + sum(s * (n - 1) for s, n in dims if s < 0)
            hi = e + sum(s * (n - 1) for s, n in dims if s > 0)
            if lo < 0 or hi >= t.size:
                return ("none",)
            return ("memory", t.key, t.dtype, e * t.item, shape, tuple(s * t.item for s, _ in dims), None)
        if fw is not None:
            recipe = _forwarded_view(self, a, t, lead, fw, e)
            return recipe or (("wrapped",) if read else ("none",))
        priv = self.priv.get(t.name)
        F = t.F
        if priv is not None:  # private copies are typed arrays, (partition, free) either way round
            pb, item = priv[0].strides[-2:]
        else:
            pb, item = sim._pb(t), t.item
        strides = _window(dims, e, t.P, F, pb, item)
        if strides is None:
            if read and priv is None and not any(w for _, _, w in self.nest.uses.get(t.name, ())):
                return ("wrapped",)
            return ("none",)
        p0, f0 = divmod(e, F)
        if priv is None:
            off = t.address + p0 * pb + f0 * item
            return ("memory", t.key, t.dtype, off, shape, tuple(strides), (off, tuple(strides)) if t.is_psum else None)
        arr, marr, mine = priv
        for k, v in enumerate(lead):  # a loop around the tile's Alloc picks the private copy
            if v in mine:
                strides[k] += arr.strides[mine.index(v)]
        off = p0 * pb + f0 * item
        mask = None if marr is None else (off // item, tuple(s // item for s in strides))  # one byte an element
        return ("private", t.name, t.dtype, off, shape, tuple(strides), mask)


def _window(dims, e: int, P: int, F: int, partition_step: int, free_step: int) -> list | None:
    """Strides of a [(step, num)] walk over a (P, F) tile from element e, a step that is a
    multiple of F moving partitions (partition_step each) and any other moving along the row
    (free_step each); None where the walk leaves the tile."""
    strides, plo, phi, flo, fhi = [], 0, 0, 0, 0
    for s, n in dims:
        if n > 1 and s and s % F == 0:
            strides.append((s // F) * partition_step)
            plo, phi = plo + min(0, (s // F) * (n - 1)), phi + max(0, (s // F) * (n - 1))
        else:
            strides.append(s * free_step)
            flo, fhi = flo + min(0, s * (n - 1)), fhi + max(0, s * (n - 1))
    p0, f0 = divmod(e, F)
    if p0 + plo < 0 or p0 + phi >= P or f0 + flo < 0 or f0 + fhi >= F:
        return None
    return strides


def _wrapped(self, a: Access, t, lead: tuple, e: int):
    """A read of on-chip tile t that wraps rows or runs past the tile (the static seed's ragged
    last block reads 7 columns past its At tile), as per-iteration execution reads it: flat
    over the tile, partition-major, poison past its end; gathered into a new array (the tile is
    one the nest does not write, so its values are known before the nest runs: a forwarded
    load's source or memory as the nest found it). Along loops it does not move with, the copy
    is broadcast. None for PSUM or a start before the tile (per iteration reports those)."""
    if t.is_psum:
        return None
    sim, trips = self.sim, self.nest.trips
    fw = self.nest.forward.get(t.name)
    mine = self.nest.private.get(t.name, ()) if fw is not None else ()
    x = fw[1] if fw is not None else None
    full, moves = [], []
    for v in lead:
        full.append(trips[v])
        moves.append(a.offset.coeff(v) != 0 or (v in mine and x.offset.coeff(v) != 0))
    dims = [(a.offset.coeff(v), trips[v] if m else 1) for v, m in zip(lead, moves)] + list(a.pattern)
    nd = len(dims)
    axis = lambda k, n: np.arange(n, dtype=np.int64).reshape([n if j == k else 1 for j in range(nd)])
    idx = np.int64(e)
    for k, (step, n) in enumerate(dims):
        idx = idx + step * axis(k, n)
    idx = np.broadcast_to(idx, tuple(n for _, n in dims))
    if idx.min() < 0:
        return None
    inside = idx < t.P * t.F
    p, f = np.divmod(np.where(inside, idx, 0), t.F)
    if fw is None:
        vals = t.footprint[p, f]
    else:
        _, _, (sp, sf) = fw
        xt = sim.tensors[x.tensor]
        src = self.start(x) + p * sp + f * sf
        for k, v in enumerate(lead):
            if v in mine and moves[k]:
                src = src + x.offset.coeff(v) * axis(k, dims[k][1])
        src = np.broadcast_to(src, idx.shape)
        if src.min() < 0 or src.max() >= xt.size:
            return None
        vals = sim._at(xt, src)
    out = np.where(inside, vals, t.fill).astype(t.dtype, copy=False)
    return np.broadcast_to(out, tuple(full) + out.shape[len(lead):]), None


def _forwarded_view(self, a: Access, t, lead: tuple, fw, e: int):
    """Access a (starting at element e) of a forwarded tile as a view of its load's source (a
    Views recipe): element (p, f) of the tile is source element base + p * sp + f * sf; loops
    around the tile move the source as the load does. None where a leaves the tile
    (per-iteration execution reports it)."""
    sim, trips = self.sim, self.nest.trips
    _, x, (sp, sf) = fw
    xt, F = sim.tensors[x.tensor], t.F
    mine = self.nest.private[t.name]
    base = self.start(x)
    dims = [(a.offset.coeff(v), trips[v]) for v in lead] + list(a.pattern)
    strides = _window(dims, e, t.P, F, sp, sf)
    if strides is None:
        return None
    p0, f0 = divmod(e, F)
    for k, v in enumerate(lead):
        if v in mine:  # another copy of the tile: where the load read it
            strides[k] += x.offset.coeff(v)
    shape = tuple(n for _, n in dims)
    return ("memory", xt.key, xt.dtype, (base + p0 * sp + f0 * sf) * xt.item, shape,
            tuple(s * xt.item for s in strides), None)
