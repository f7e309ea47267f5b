"""Fused matmuls of a batched loop nest joined into GEMMs (simulator/batched.py plans a nest,
then asks which of its matmuls can share one).

A matmul computed inside the sum it feeds (batched._fuse) is one item here. Items over loops of
the same trips whose operands pair up every distinct stationary operand with every distinct
moving one are a Group: one GEMM, the operands side by side (group_matmuls; the ragged variants of
a matmul the tracer peels, the unrolled copies of a loop body). Groups of one shape whose products
add into the same elements are one group stacked along the contraction, each sum added once
(_stack). Groups that read the same moving operands over loops that extend one another are one
GEMM with their rows concatenated (_rowsets: a loop of row tiles and its peeled tail). Every
joining is legal only where nothing writes what a matmul reads between the matmul and the GEMM's
turn (_writes_between), which is decided here from the body order alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Access
from ..ir.analysis import tensors_touched


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
    # accumulators in between): then, where their views tile one strided view, one pass (batched._one_add)
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
        if mm is None or mm.rule.grouped is None:
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
    summed) run as one GEMM with their rows concatenated (matmul._matmul_grouped's `subs`): mm2's
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
