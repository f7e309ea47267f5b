"""Fused matmuls of a batched loop nest joined into GEMMs: which of them share one (when
simulator/batched.py plans a nest) and running each group's GEMM (at every entry of the nest).

A matmul computed inside the sum it feeds (batched._fuse) is one item here. Items over loops of
the same trips whose operands pair up every distinct stationary operand with every distinct
moving one are a Group: one GEMM, the operands side by side (group_matmuls; the ragged variants of
a matmul the tracer peels, the unrolled copies of a loop body). Groups of one shape whose products
add into the same elements are one group stacked along the contraction, each sum added once
(_stack). Groups that read the same moving operands over loops that extend one another are one
GEMM with their rows concatenated (_rowsets: a loop of row tiles and its peeled tail). Every
joining is legal only where nothing writes what a matmul reads between the matmul and the GEMM's
turn (_writes_between), which is decided here from the body order alone.

At an entry, each group's GEMM is checked before any of its adds runs (check_groups: do the
operand views line up), runs at its first applying add (gemm.py builds it), and each add takes
its cell of the products (product_of), all cells in one pass where they tile one strided view
(one_add). A GEMM that reads a tile whose content is another GEMM's products not yet written
reads the products in place (forward_products). Together with gemm.py, this is all of the
batched path's GEMM batching; batched.py calls it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..ir import Access
from ..ir.analysis import tensors_touched
from ..ir.ops.values import address, same_view, view_at
from . import gemm
from .cpushare import halves


@dataclass
class Group:
    """Fused matmuls of one nest over loops of the same trips, summed over the same axes, whose
    products are one GEMM: every distinct stationary operand with every distinct moving one
    (the ragged variants of one matmul the tracer peels, the unrolled copies of a loop body)."""
    adds: list                      # the sums they feed, body order
    sts: list                       # per distinct stationary operand: [(feeding add, access)] per part
    mvs: list                       # per distinct moving operand, likewise
    cell: dict                      # id(add) -> (index in sts, index in mvs)
    applies: set = field(default_factory=set)  # id(add): the sums that add their cell's product
    # whether all its cells may be added at its first applying add (nothing else touches the
    # accumulators in between): then, where their views tile one strided view, one pass (one_add)
    one_add: bool = False
    # parts: groups of one shape whose cells add into the same elements are one group whose
    # GEMM stacks them along the contraction (_stack); each cell's sum is then added once, by its
    # last add, the other adds of the cell adding nothing
    # groups that share their moving operands and whose loops are this one's and more, only their
    # stationaries moving along the rest: one GEMM, their rows concatenated (_rowsets); None alone
    rows: list | None = None



def group_matmuls(items: list, trips: dict, private: dict, tensors: dict) -> None:
    """Join fused matmuls into _Groups: those over loops of the same trips (names may differ: the
    unrolled copies of a loop), summed over the same axes, with the same contraction size and
    operand kinds; each group is every pairing of its distinct stationary and moving operands
    once (else one group per stationary operand). The GEMM runs at the group's first sum, so
    nothing from the first to the last of its instructions may write what the matmuls read."""
    cands: dict = {}
    for add in items:
        mm = add.feeds
        if mm is None:  # (a fused matmul's rule `sums`: its instances may share a GEMM)
            continue
        op = mm.plan.op
        st, mv = op.ins[0], op.ins[1]
        key = (tuple(trips[v] for v in add.vars), add.reduce, bool(op.attr("double_row")), st.shape[0],
               tensors[st.tensor].dtype, tensors[mv.tensor].dtype, len(st.shape), len(mv.shape))
        cands.setdefault(key, []).append(add)
    opnd = lambda add, k: _operand_key(add.feeds.plan.op.ins[k], add.vars, private)
    for key, adds in cands.items():
        groups = []
        for comp in _components(adds, opnd):
            sts = set(opnd(a, 0) for a in comp)
            mvs = set(opnd(a, 1) for a in comp)
            if (len(comp) == len(sts) * len(mvs) == len({(opnd(a, 0), opnd(a, 1)) for a in comp})
                    and _unwritten_between(items, comp)):
                groups.append(_make_group(comp, opnd))
                continue
            # not every pairing, or a write in between: the matmuls sharing a stationary operand
            for k in dict.fromkeys(opnd(a, 0) for a in comp):
                part = [a for a in comp if opnd(a, 0) == k]
                if len(part) == 1 or _unwritten_between(items, part):
                    groups.append(_make_group(part, opnd))
                else:
                    groups += [_make_group([a], opnd) for a in part]
        _stack(items, groups, private)
        for g in {id(a.group): a.group for a in adds if a.group is not None}.values():
            app = [a for a in g.adds if id(a) in g.applies]
            members = {id(it) for a in g.adds for it in (a, a.feeds)}
            lo, hi = min(a.order for a in app), max(a.order for a in app)
            dsts = {a.plan.op.outs[0].tensor for a in app}
            g.one_add = not any(lo <= it.order <= hi and id(it) not in members and not it.skip
                                and any(_touches(it, t) for t in dsts) for it in items)
    _rowsets(items, private)
    for a in items:  # a group of one matmul alone: its own product as before
        if a.group is not None and len(a.group.adds) == 1 and a.group.rows is None:
            a.group = None


def _rowsets(items: list, private: dict) -> None:
    """Groups whose matmuls read the same moving operands, part by part, over loops that extend
    the shortest group's (the stationaries alone moving along the extra ones, which are not
    summed) run as one GEMM with their rows concatenated (gemm.grouped's `subs`): mm2's
    E, whose m1 loop the multi-buffer pass split into a loop of four row tiles and the peeled last
    two. At the first member's GEMM turn, so nothing may write what a member's matmuls read
    between each of them and that turn (the check _stack makes)."""
    gs = list({id(a.group): a.group for a in items if a.group is not None}.values())

    def moving(g):  # per moving operand and part: its access, and the loops and sums of its matmul
        return [[(x, a.vars, a.reduce) for a, x in parts] for parts in g.mvs]

    def fits(g, h):  # h's loops extend g's, the rest the same
        if len(g.mvs) != len(h.mvs) or len(g.sts[0]) != len(h.sts[0]) or len(g.sts) + len(h.sts) < 2:
            return False
        ga, ha = g.adds[0].feeds.plan.op, h.adds[0].feeds.plan.op
        if bool(ga.attr("double_row")) != bool(ha.attr("double_row")) or ga.ins[0].shape[0] != ha.ins[0].shape[0]:
            return False
        for pg, ph in zip(moving(g), moving(h)):
            for (x, vg, rg), (y, vh, rh) in zip(pg, ph):
                extra = vh[len(vg):]
                if (x != y or vh[:len(vg)] != vg or rg != rh or any(x.offset.coeff(v) for v in extra)
                        or any(v in private.get(x.tensor, ()) for v in extra)):
                    return False
        return True
    gs.sort(key=lambda g: min(a.order for a in g.adds))
    taken: set = set()
    for g in gs:
        if id(g) in taken:
            continue
        short = [h for h in gs if id(h) not in taken and (h is g or fits(g, h) or fits(h, g))]
        base = min(short, key=lambda h: len(h.adds[0].vars))
        members = [h for h in short if h is base or fits(base, h)]
        if len(members) < 2:
            continue
        at = min(min(a.order for a in h.adds if id(a) in h.applies) for h in members)  # the GEMM's turn
        if any(_writes_between(items, *sorted((a.feeds.order, at)),
                               {x.tensor for x in a.feeds.plan.op.ins if isinstance(x, Access)})
               for h in members for a in h.adds):
            continue
        for h in members:
            h.rows = members
            taken.add(id(h))


def _components(adds: list, opnd) -> list:
    """The sums grouped by the connected components of their matmuls' operands (two matmuls
    sharing a stationary or a moving operand are in one), each in body order."""
    root: dict = {}

    def find(x):
        while root.setdefault(x, x) != x:
            x = root[x]
        return x
    for a in adds:
        root[find((0, opnd(a, 0)))] = find((1, opnd(a, 1)))
    comps: dict = {}
    for a in adds:
        comps.setdefault(find((0, opnd(a, 0))), []).append(a)
    return list(comps.values())


def _operand_key(a: Access, vars_: tuple, private: dict):
    """An operand access as the elements it reads over the loops `vars_` (by position, not name)."""
    mine = private.get(a.tensor, ())
    return (a.tensor, a.offset.const, tuple(a.offset.coeff(v) for v in vars_),
            tuple(sorted((v, c) for v, c in a.offset.terms if v not in vars_)), a.pattern,
            tuple(v in mine for v in vars_), a.scalar, a.scalar_scale)


def _unwritten_between(items: list, part: list) -> bool:
    """Whether no instruction between the first and the last of the group's matmuls and sums
    writes a tensor one of its matmuls reads."""
    orders = [it.order for a in part for it in (a, a.feeds)]
    read = {x.tensor for a in part for x in a.feeds.plan.op.ins if isinstance(x, Access)}
    return not _writes_between(items, min(orders), max(orders), read)


def _writes_between(items: list, lo: int, hi: int, tensors: set) -> bool:
    """Whether an item from body position lo to hi writes one of `tensors` (a forwarded load
    writes nothing: its tile is read at the source, which the nest does not write; a fused
    matmul writes only its dead PSUM tile)."""
    return any(lo <= it.order <= hi and not it.skip and not it.fused
               and any(o.tensor in tensors for o in it.plan.op.outs) for it in items)


def _make_group(part: list, opnd) -> None:
    sts, mvs, cell = {}, {}, {}
    for a in part:
        i = sts.setdefault(opnd(a, 0), len(sts))
        j = mvs.setdefault(opnd(a, 1), len(mvs))
        cell[id(a)] = (i, j)
    first_st = {i: a for a in reversed(part) for i in [cell[id(a)][0]]}
    first_mv = {j: a for a in reversed(part) for j in [cell[id(a)][1]]}
    g = Group(part, [[(first_st[i], first_st[i].feeds.plan.op.ins[0])] for i in range(len(sts))],
               [[(first_mv[j], first_mv[j].feeds.plan.op.ins[1])] for j in range(len(mvs))], cell,
               {id(a) for a in part})
    for a in part:
        a.group = g
    return g


def _stack(items: list, groups: list, private: dict) -> None:
    """Groups of one shape whose cells add into the same elements (the unrolled copies of a
    loop over the contraction, each summing its part into one accumulator) become one: their
    GEMM stacks the parts along K and each cell's sum lands once, at the cell's last add. Legal
    when nothing but the group's own instructions touches an accumulator between its cell's
    first and last add, and nothing writes a matmul's operands between it and the GEMM (at the
    first of the cells' last adds)."""
    def dsts(g):
        by = {c: a for a in g.adds for c in [g.cell[id(a)]]}
        return tuple(_operand_key(by[c].plan.op.outs[0], by[c].vars, private) for c in sorted(by))

    buckets: dict = {}
    for g in groups:
        if len(g.adds) == len(g.sts) * len(g.mvs):
            buckets.setdefault((len(g.sts), len(g.mvs), dsts(g)), []).append(g)
    for gs in buckets.values():
        if len(gs) < 2:
            continue
        cells: dict = {}
        for g in gs:
            for a in g.adds:
                cells.setdefault(g.cell[id(a)], []).append(a)
        members = {id(it) for g in gs for a in g.adds for it in (a, a.feeds)}
        at = min(max(a.order for a in cell) for cell in cells.values())  # the GEMM's turn
        others = [it for it in items if id(it) not in members and not it.skip and not it.fused]
        ok = True
        for a in (a for g in gs for a in g.adds):  # operands as at each matmul
            read = {x.tensor for x in a.feeds.plan.op.ins if isinstance(x, Access)}
            ok = ok and not _writes_between(others, *sorted((a.feeds.order, at)), read)
        for cell in cells.values():  # accumulators no one else sees between a cell's adds
            t = cell[0].plan.op.outs[0].tensor
            lo, hi = min(a.order for a in cell), max(a.order for a in cell)
            ok = ok and not any(lo <= it.order <= hi and _touches(it, t) for it in others)
            ok = ok and not any(lo <= it.order <= hi and any(x.tensor == t for x in it.plan.op.ins
                                                             if isinstance(x, Access))
                                for it in items if it.fused and id(it) not in members)
        if not ok:
            continue
        adds = sorted((a for g in gs for a in g.adds), key=lambda a: a.order)
        merged = Group(adds, [sum((g.sts[i] for g in gs), []) for i in range(len(gs[0].sts))],
                        [sum((g.mvs[j] for g in gs), []) for j in range(len(gs[0].mvs))],
                        {id(a): g.cell[id(a)] for g in gs for a in g.adds},
                        {id(max(cell, key=lambda a: a.order)) for cell in cells.values()})
        for a in adds:
            a.group = merged


def _touches(it, t: str) -> bool:
    """Whether an item reads or writes tensor t other than as a sum into it (sums into the same
    elements may run in another order: reordered float32 sums)."""
    op = it.plan.op
    if t not in tensors_touched(op):
        return False
    return not (it.accum and op.outs[0].tensor == t and len(op.outs) == 1
                and all(x.tensor != t for x in op.ins if isinstance(x, Access) and x != op.outs[0]))


ADDED = object()  # a sum whose product its cell's last add adds (_stack)


def product_of(add, done: dict):
    """The product feeding `add` out of its group's one GEMM (made at the group's first applying
    add, where group_matmuls checked what it reads; kept in `done`); ADDED when another add of its
    cell adds it; None when the group's operands do not line up (each matmul alone then)."""
    g = add.group
    got = done[id(g)]
    if got is None:
        return None
    if id(add) not in g.applies:
        return ADDED
    if callable(got):
        got()  # (sets the products of g and of the groups that share its GEMM: _runner)
        got = done[id(g)]
    out, mo, no = got
    i, j = g.cell[id(add)]
    return out[..., mo[i]:mo[i + 1], no[j]:no[j + 1]]


def one_add(sim, g: Group, got, outs_of: dict, ordered: dict, views) -> bool:
    """Every cell's product of group g added into its accumulator in one pass, when their views
    (SBUF float32, sums as `into` does them) tile one strided view: the stationary operands'
    cells a uniform step apart, the moving operands' side by side along the last axis (the
    ragged variants of one tile: one dense pass instead of one strided pass per variant).
    A tile of zeros not yet filled that the view covers whole is the products then: they are
    kept (nest_views.Views.products), the tile never filled, and written only if something other
    than a GEMM's operand needs them. False (nothing done) otherwise."""
    out, mo, no = got
    app = [a for a in g.adds if id(a) in g.applies]
    cells = {}
    for a in app:
        dst, mask = outs_of[id(a)][0]
        if not (a.accum and a.rule.into is not None and dst.dtype == np.float32 and not a.plan.is_matmul
                and mask is None and a.plan.op.outs[0].tensor not in ordered):
            return False
        cells[g.cell[id(a)]] = dst
    ni, nj = len(g.sts), len(g.mvs)
    Ms, Ns = np.diff(mo).tolist(), np.diff(no).tolist()
    if len(cells) != ni * nj or len(set(Ms)) != 1 or out.shape[:-2] != cells[(0, 0)].shape[:-2]:
        return False
    v0 = cells[(0, 0)]
    step = address(cells[(1, 0)]) - address(v0) if ni > 1 else 0
    for (i, j), v in cells.items():
        if (v.strides != v0.strides or v.shape[:-2] != v0.shape[:-2] or v.shape[-2:] != (Ms[i], Ns[j])
                or address(v) != address(v0) + i * step + no[j] * v0.strides[-1]):
            return False
    shape = v0.shape[:-2] + (ni, Ms[0], no[-1])
    strides = v0.strides[:-2] + (step, v0.strides[-2], v0.strides[-1])
    if not _disjoint(shape, strides, v0.itemsize):
        return False
    dst = np.lib.stride_tricks.as_strided(v0, shape, strides)  # the union of the cells' views
    terms = out.reshape(shape)  # (rows: the stationary operands' blocks, each Ms[0] rows)
    names = {a.plan.op.outs[0].tensor for a in app}
    name = next(iter(names))
    if len(names) == 1 and name in views.unfilled and dst.size == views.priv[name][0].size:
        views.unfilled.discard(name)  # (the cells are disjoint views of its array: size says whole)
        views.products[name] = (dst, terms)  # written when something other than a GEMM needs them
        return True
    views.zero(names)
    order = _inner_run_order(dst, terms)
    if order is not None:
        dst, terms = dst.transpose(order), terms.transpose(order)
    halves(sim, lambda r, d: np.add(d, r(0), out=d), lambda _: terms, dst, True)  # (disjoint: any axis splits)
    return True


def _inner_run_order(dst: np.ndarray, terms: np.ndarray):
    """The axes of dst += terms in terms' memory order (outermost first), where terms' contiguous
    axis is longer than dst's: a short innermost run of dst (E_write_1's few m tiles interleaved
    along the free axis) made the loop numpy chose touch every line of dst once per tile (mm2
    --scale 8: 1.7 ms, 0.8 in terms' order). None: numpy's own order."""
    inner = lambda x: min(range(x.ndim), key=lambda k: (abs(x.strides[k]) if x.shape[k] > 1 else np.inf))
    i, j = inner(dst), inner(terms)
    if i == j or dst.shape[i] >= terms.shape[j] or abs(terms.strides[j]) != terms.itemsize:
        return None
    return sorted(range(dst.ndim), key=lambda k: -abs(terms.strides[k]) if dst.shape[k] > 1 else -np.inf)


def _disjoint(shape: tuple, strides: tuple, item: int) -> bool:
    """Whether a strided view touches no element twice (sufficient: by increasing step, each step
    clears the extent of the smaller ones)."""
    extent = item
    for step, n in sorted((abs(s), n) for s, n in zip(strides, shape) if n > 1):
        if step < extent:
            return False
        extent += step * (n - 1)
    return True


def check_groups(sim, nest, done: dict, mult, outs_of: dict, operands: gemm.EntryArrays) -> None:
    """Each group's GEMM, to run (a function) or None where its operands do not line up: decided
    before any of its adds runs (one that adds nothing must know whether its product comes)."""
    view = lambda a, x: done[id(a.feeds)][id(x)]
    for it in nest.items:
        g = it.group
        if g is not None and id(g) not in done:
            done.update(_gemm_of(sim, g, view, done, mult, outs_of, operands))


def _gemm_of(sim, g: Group, view, done: dict, mult, outs_of: dict, operands: gemm.EntryArrays) -> dict:
    """{id(h): a function that runs the GEMM and puts each group's products in done[id(h)], or
    None where h's does not line up} for g and the groups that share its GEMM (Group.rows); each
    group's own GEMM where one for all does not line up."""
    if g.rows is not None:
        fn = _group_gemm(sim, g.rows, view, mult, outs_of, operands)
        if fn is not None:
            return {id(h): _runner(fn, g.rows, done) for h in g.rows}
    got = {}
    for h in g.rows or [g]:
        fn = _group_gemm(sim, [h], view, mult, outs_of, operands)
        got[id(h)] = None if fn is None else _runner(fn, [h], done)
    return got


def _runner(fn, groups: list, done: dict):
    """What done[id(h)] holds until the GEMM runs: a call that runs fn and puts each group's
    products (fn's list, one per group) in its place."""
    def run():
        for h, x in zip(groups, fn()):
            done[id(h)] = x
    return run


def forward_products(sim, it, g: Group, done: dict, views, mult, outs_of: dict,
                     operands: gemm.EntryArrays) -> set:
    """Group g's GEMM, about to run, reads the kept products of a tile (nest_views.Views.products)
    in place of the tile, where every view it takes of that tile is a view of the products (_product_view):
    mm2's E GEMMs read Ct's products, laid out for the GEMM that made them, and Ct is never
    written. Returns those tiles (a tile with a view that does not map is written first, as
    before)."""
    every = [p for h in g.rows or [g] for p in h.sts + h.mvs]
    kept = {x.tensor for parts in every for _, x in parts if x.tensor in views.products}
    moved: dict = {}
    for parts in every:
        for a, x in parts:
            if x.tensor in kept:
                v = _product_view(done[id(a.feeds)][id(x)], *views.products[x.tensor])
                if v is None:
                    kept.discard(x.tensor)
                moved[id(a), id(x)] = v
    if kept:
        view = lambda a, x: moved[id(a), id(x)] if x.tensor in kept else done[id(a.feeds)][id(x)]
        got = _gemm_of(sim, g, view, done, mult, outs_of, operands)
        if any(fn is None for fn in got.values()):  # (the tiles written instead: the GEMMs checked read them)
            return set()
        done.update(got)
    return kept


def _product_view(v: np.ndarray, tile: np.ndarray, terms: np.ndarray):
    """View v of a tile, as the same elements of `terms`: the tile's values, in the shape of
    `tile`, a strided view that covers the tile's array once. tile's axes, merged where both
    views allow, are the digits of a mixed radix over the array's bytes; v's start and each of
    its steps, taken apart into those digits, index terms. None where v's steps carry from one
    digit into the next."""
    digits: list = []  # [step in the tile, length, step in terms], smallest step first
    for k in sorted((k for k in range(tile.ndim) if tile.shape[k] > 1), key=lambda k: tile.strides[k]):
        s, n, t = tile.strides[k], tile.shape[k], terms.strides[k]
        if digits and digits[-1][0] * digits[-1][1] == s and digits[-1][2] * digits[-1][1] == t:
            digits[-1][1] *= n
        else:
            digits.append([s, n, t])
    size = tile.itemsize
    for s, n, _ in digits:
        if s != size:  # (not the whole array, once, in steps of the element: no mixed radix)
            return None
        size *= n
    rest = address(v) - address(tile)
    if v.dtype != tile.dtype or not 0 <= rest < size:
        return None
    start = []
    for s, _, _ in reversed(digits):
        q, rest = divmod(rest, s)
        start.append(q)
    start.reverse()
    if rest:
        return None
    reach, strides = list(start), []
    for n, r in zip(v.shape, v.strides):
        if n == 1 or r == 0:  # (a loop the view does not move with)
            strides.append(0)
            continue
        j = next((j for j in reversed(range(len(digits))) if digits[j][0] <= r), None)
        if j is None or r % digits[j][0]:
            return None
        c = r // digits[j][0]
        reach[j] += c * (n - 1)
        if reach[j] >= digits[j][1]:
            return None
        strides.append(c * digits[j][2])
    out = view_at(terms, address(terms) + sum(q * t for q, (_, _, t) in zip(start, digits)), v.shape,
                  tuple(strides), v.dtype)
    out.flags.writeable = False
    return out


def _copy(sim, dst: np.ndarray, src: np.ndarray) -> None:
    halves(sim, lambda r, d: np.copyto(d, r(0)), lambda _: src, dst, True)


def _transposed(g: Group, outs_of: dict) -> bool:
    first = next(a for a in g.adds if id(a) in g.applies)
    dst = outs_of[id(first)][0][0]
    return dst.ndim >= 2 and dst.shape[-2] > 1 and abs(dst.strides[-2]) < abs(dst.strides[-1])


def _group_gemm(sim, groups: list, view, mult, outs_of: dict, operands: gemm.EntryArrays):
    """One GEMM (gemm.grouped) for `groups`, a group alone or those sharing its GEMM
    (Group.rows), over the operand views view(add, access): the shortest group's moving operands,
    every group's stationary ones (the loops beyond the shortest group's as extra axes of their
    views); a function returning each group's products. None where another group's moving views
    differ from those, or the groups' products would be laid out differently. The products are
    laid out as the first sum's destination is: M contiguous there (a tile a matmul reads, stored
    partition-innermost) makes the GEMM compute the transposed product."""
    base = min(groups, key=lambda h: len(h.adds[0].vars))
    nlead = len(base.adds[0].vars)
    op = base.adds[0].feeds.plan.op
    mvs = [[view(a, x) for a, x in parts] for parts in base.mvs]
    sts, subs = [], []
    for h in groups:
        e = len(h.adds[0].vars) - nlead
        for parts, want in zip(h.mvs, mvs):
            for (a, x), w in zip(parts, want):
                v = view(a, x)
                if any(n > 1 and s for n, s in zip(v.shape[nlead:nlead + e], v.strides[nlead:nlead + e])):
                    return None
                v = v[(slice(None),) * nlead + (0,) * e]
                if not same_view(v, w):
                    return None
        views = [[view(a, x) for a, x in parts] for parts in h.sts]
        sts += views
        subs.append((len(h.sts), views[0][0].shape[nlead:nlead + e]))
    if len({_transposed(h, outs_of) for h in groups}) > 1:
        return None
    return gemm.grouped(sts, mvs, nlead, base.adds[0].reduce, mult, 2 if op.attr("double_row") else 1,
                        partial(_copy, sim), _transposed(base, outs_of), operands, subs=subs)
