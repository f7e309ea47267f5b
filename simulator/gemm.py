"""Many matmuls as few GEMMs: the batched path's matrix products.

simulator/batched.py runs a loop nest's instructions for all its iterations at
once; a matmul's iterations (nc_matmul's `batched` rule hands their stationary
and moving views to `products`) become one GEMM or a few. A loop axis along
which only one operand moves joins that operand's free axis (M or N), one
along which both move stacks GEMMs or, where the destination sums over it,
joins the contraction (K * trips). matmul_groups.py decides which matmuls of a
nest share one GEMM (`grouped`: every stationary operand with every moving
one, the parts of a sum along K, groups' rows concatenated), and runs it. Here:
the operands copied into GEMM order in as few copies as their sources allow,
or read where they already lie (_in_place); the product through BLAS
(`multiply`: its own threads for a large GEMM while a core is spare); and the
float32 arrays an entry's GEMMs take from the simulator's scratch pool
(EntryArrays).

Why here and not in ir/ops: ir/ops/matmul.py defines what nc_matmul computes,
one instruction at a time and many at once (its rule: which views, double-row
pairs of rows joining the contraction). How those products are laid out as
GEMMs - which copies, which strides BLAS reads in place, which operands an
entry makes once, how many threads - is how this simulator executes them,
tuned to numpy and BLAS on views of its own memory, and it uses the
simulator's scratch pool and CPU share. So it lives in the simulator, beside
matmul_groups.py, and ir keeps to numpy alone.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.ops.values import address, f32, same_view, view_at
from ._blas import default_blas
from .cpushare import CpuShare

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy < 2
    from numpy import byte_bounds

# BLAS threads for a GEMM of at least this many flops, while a core is spare (cpushare.py): below it a
# multi-threaded OpenBLAS lost 2-10x on this shared 2-vCPU machine (mm2 --scale 8: 30 MFLOP stacked
# GEMMs 62 s against 3.9 s, before the spare-core check). With the check, 0.35-0.41 GFLOP GEMMs take
# 1.4-1.6 ms on two threads against 2.6-2.9 ms on one, and mm2 --scale 8 ran 2-5% faster than with
# 1 GFLOP here (same process, alternating runs). Row bands on two Python threads with one BLAS thread
# each were no faster at load 1-4 (0.34 s against 0.33 s) and were dropped.
THREADED_GEMM_FLOP = 1 << 28


def moving_axes(x: np.ndarray, nlead: int) -> list:
    """The leading loop axes of a batched operand view along which it changes (not broadcast)."""
    return [i for i in range(nlead) if x.shape[i] > 1 and x.strides[i] != 0]


def products(st: np.ndarray, mv: np.ndarray, nlead: int, reduce: tuple, rows: int = 1,
             gemm=np.matmul) -> np.ndarray:
    """The products of stationary views st with moving views mv (each with `nlead` leading loop
    axes before its (K, free) tile), summed over the loop axes in `reduce` (a PSUM accumulation
    over a loop), as few GEMMs. A loop axis along which only one operand moves joins that
    operand's free axis (M or N); one along which both move stacks GEMMs, or, in `reduce`, joins
    the contraction (K * trips); one along which neither moves repeats the product. With no axis
    of the stacking kind, that is a single GEMM. `rows` 2: double-row mode, the pair of rows
    joins the contraction. `gemm(a, b)`: how the simulator multiplies ([stack,] M, K) by
    ([stack,] K, N)."""
    got = grouped([st], [mv], nlead, reduce, gemm, rows)
    if got is None:  # a sum along which one operand is constant: rare
        return _stacked(st, mv, nlead, reduce, rows)
    return got()[0]


def grouped(sts: list, mvs: list, nlead: int, reduce: tuple, gemm=np.matmul, rows: int = 1,
            copy=np.copyto, transposed: bool = False, operand=None, subs: list | None = None):
    """The products of every stationary view in `sts` with every moving view in `mvs` (each with
    `nlead` leading loop axes, as `products` takes them) as one GEMM: the stationaries side
    by side along M, the movings along N (the copies into GEMM order that one product makes
    anyway). An entry may also be a list of views, the parts of a sum (every entry the same
    number): product (i, j) is then the sum over p of sts[i][p] with mvs[j][p], the parts stacked
    along the contraction. Returns (out, M offsets, N offsets): out has the kept loop axes then
    (sum M, sum N), product (i, j) is out[..., M offsets[i]:M offsets[i + 1], N offsets[j]:N
    offsets[j + 1]]. What it returns is a function of no arguments that reads the views and
    computes that (the checks need only their shapes: a caller may check before the operands
    hold their values); or None when the operands do not move along the same loop axes, one is
    constant along a summed axis, or the parts do not line up. `copy(dst, src)`: how the simulator
    copies operands into their GEMM blocks. `transposed`: out is a view of an array laid out
    (N, M), the product computed as mv.T @ st.T (for a destination that stores M contiguously,
    so that adding the product into it reads and writes both in memory order).

    `subs`: the stationaries are the rows of several such groups that share the moving operands
    ([(how many of sts, the sizes of its extra loop axes)], in order): a group's views have its
    extra loop axes after the nlead common ones, loops that only its stationaries move along
    (mm2's E: the multi-buffered m1 loop of four row tiles, beside its peeled last two). Their
    rows are concatenated inside the common loop axes, and the function returns one (out, M
    offsets, N offsets) per group, out with that group's kept loop axes, extra ones included."""
    given, subs = subs is not None, subs or [(len(sts), ())]
    extras = [len(e) for n, e in subs for _ in range(n)]
    sts = [x if isinstance(x, list) else [x] for x in sts]
    mvs = [x if isinstance(x, list) else [x] for x in mvs]
    nparts = len(sts[0])
    sizes = sts[0][0].shape[:nlead]
    ms, mm = moving_axes(sts[0][0], nlead), moving_axes(mvs[0][0], nlead)
    if (any(len(xs) != nparts for xs in sts + mvs) or any(moving_axes(x, nlead) != ms for xs in sts for x in xs)
            or any(moving_axes(x, nlead) != mm for xs in mvs for x in xs)
            or any((i in ms) != (i in mm) or (i not in ms and sizes[i] > 1) for i in reduce)
            or any(x.shape[nlead:nlead + e] != sub[1] for xs, e, sub in
                   zip(sts, extras, [s for s in subs for _ in range(s[0])]) for x in xs)):
        return None  # (a sum of one product repeated: _stacked)
    # each tile as (K, free): K its partitions (x2 in double-row mode)
    k_free = lambda x, e=0: (x.shape[nlead + e] * rows, math.prod(x.shape[nlead + e:]) // (x.shape[nlead + e] * rows))
    Ks = [k_free(x, extras[0])[0] for x in sts[0]]
    Ms = [k_free(xs[0], e)[1] for xs, e in zip(sts, extras)]
    Ns = [k_free(xs[0])[1] for xs in mvs]
    if (any(k_free(x, e) != (k, k_free(xs[0], e)[1]) for xs, e in zip(sts, extras) for x, k in zip(xs, Ks))
            or any(k_free(x) != (k, k_free(xs[0])[1]) for xs in mvs for x, k in zip(xs, Ks))):
        return None
    if (len(subs) > 1 or extras[0]) and _free_contiguous(sts[0][0], nlead + extras[0]):
        return None  # (rows joined only in the (M, K) layout)
    run = lambda: _grouped_gemm(sts, mvs, nlead, reduce, gemm, rows, ms, mm, Ks, Ms, Ns, copy, transposed,
                                operand or _new_operand, subs)
    return run if given else lambda: run()[0]


def _free_contiguous(tile: np.ndarray, n: int) -> bool:
    """Whether a (K, free) tile view (after n loop axes) stores its free axis contiguously and
    its K axis not."""
    k, f = tile.shape[n:n + 2]
    sk, sf = tile.strides[n:n + 2]
    return f > 1 and sf == tile.itemsize and (k == 1 or abs(sk) != tile.itemsize)


def _new_operand(shape: tuple, layout: tuple, sources: list, fill) -> np.ndarray:
    """A GEMM operand: a new float32 array of `shape`, which fill(array) fills from `sources`
    (the views it is made of) as `layout` says; a simulator may instead hand back one it made
    from the same sources, unchanged since."""
    return fill(np.empty(shape, np.float32))


def _grouped_gemm(sts, mvs, nlead, reduce, gemm, rows, ms, mm, Ks, Ms, Ns, copy, transposed, operand, subs):
    """`grouped`'s products, once its checks passed: [(out, M offsets, N offsets)] per group
    of `subs`."""
    sizes = sts[0][0].shape[:nlead]
    ns, nm = len(ms), len(mm)
    extras = [len(e) for n, e in subs for _ in range(n)]

    def tiles(x, moving, n, e=0):  # the broadcast axes dropped before any copy, each tile as (K, free)
        x = f32(x[tuple(slice(None) if i in moving else 0 for i in range(nlead))])
        return x.reshape(x.shape[:n + e] + (x.shape[n + e] * rows, -1))

    sts = [[tiles(x, ms, ns, e) for x in xs] for xs, e in zip(sts, extras)]
    mvs = [[tiles(x, mm, nm) for x in xs] for xs in mvs]
    M, N = sum(Ms), sum(Ns)
    both = [i for i in ms if i in mm and i not in reduce]
    only_st = [i for i in ms if i not in mm]
    only_mv = [i for i in mm if i not in ms]
    red = [i for i in reduce if i in ms]  # (a summed axis of one iteration adds nothing)
    ps, pm = {a: k for k, a in enumerate(ms)}, {a: k for k, a in enumerate(mm)}
    stack = [sizes[i] for i in both]
    rks = [math.prod(sizes[i] for i in red) * k for k in Ks]
    # a stationary operand whose tiles store M (their free axis) contiguously is copied as (K, M),
    # as the moving one is as (K, N): in its sources' order (a copy that transposes 4-byte elements
    # runs at a third of the rate or less); otherwise as (M, K)
    st_km = _free_contiguous(sts[0][0], ns + extras[0])
    if st_km:
        sts = [[x.transpose([ps[i] for i in both + red] + [ns] + [ps[i] for i in only_st] + [ns + 1]) for x in xs]
               for xs in sts]
    else:  # (a group's extra loop axes, each after the common ones: ns, ns + 1, ...)
        sts = [[x.transpose([ps[i] for i in both + only_st] + [ns + k for k in range(e)] + [ns + e + 1]
                            + [ps[i] for i in red] + [ns + e]) for x in xs] for xs, e in zip(sts, extras)]
    mvs = [[x.transpose([pm[i] for i in both + red] + [nm] + [pm[i] for i in only_mv] + [nm + 1]) for x in xs]
           for xs in mvs]
    lead = [sizes[i] for i in both + only_st]
    nrows = [math.prod(e) * sum(Ms[k:k + n]) for (n, e), k in zip(subs, np.cumsum([0] + [n for n, _ in subs]))]
    split = None  # the contraction's parts, where the stationary ones lie in memory as GEMM operands
    if len(sts) == len(mvs) == len(sts[0]) == 1:  # one product: its reshape copies only when it must
        st = (sts[0][0].reshape(stack + [rks[0], -1]).swapaxes(-1, -2) if st_km
              else sts[0][0].reshape(stack + [-1, rks[0]]))
        mv = mvs[0][0].reshape(stack + [rks[0], -1])
    else:  # one copy of every operand into its block of the GEMM's operands
        if st_km:  # blocks by part, then stationary operand
            at = (len(stack), len(stack) + 1 + len(only_st), tuple(rks), tuple(Ms))
            sts = [list(p) for p in zip(*sts)]
            st = operand(tuple(stack + [sum(rks)] + [sizes[i] for i in only_st] + [M]), ("st, K first",) + at,
                         [x for xs in sts for x in xs], lambda out: _blocks(sts, out, *at, copy))
            st = st.reshape(stack + [sum(rks), -1]).swapaxes(-1, -2)
        else:
            split = _in_place(sts, lead + [sum(nrows)], subs, Ms, rks, stack)
            if split is None:
                st = operand(tuple(lead + [sum(nrows), sum(rks)]), ("st", len(lead), tuple(Ms), tuple(rks), tuple(subs)),
                             [x for xs in sts for x in xs], lambda out: _row_blocks(sts, out, subs, Ms, rks, copy))
                st = st.reshape(stack + [-1, sum(rks)])
        at = (len(stack), len(stack) + 1 + len(only_mv), tuple(rks), tuple(Ns))
        mvs = [list(p) for p in zip(*mvs)]
        mv = operand(tuple(stack + [sum(rks)] + [sizes[i] for i in only_mv] + [N]), ("mv",) + at,
                     [x for xs in mvs for x in xs], lambda out: _blocks(mvs, out, *at, copy))
        mv = mv.reshape(stack + [sum(rks), -1])
    if split is not None:  # one GEMM per part, summed (mm2: E's from each multi-buffer copy's C products)
        ks = np.cumsum([0] + rks).tolist()
        out = None
        for part, k0, k1 in zip(split, ks, ks[1:]):
            got = _gemm(gemm, part, mv[..., k0:k1, :], transposed)
            out = got if out is None else np.add(out, got, out=out)
    else:
        out = _gemm(gemm, st, mv, transposed)
    out = out.reshape(stack + [sizes[i] for i in only_st] + [sum(nrows)] + [sizes[i] for i in only_mv] + [N])
    # each group's rows, to the destination's order: the kept loop axes (its extra ones last), then (M, N)
    got, r, k = [], 0, 0
    n_axis = len(stack) + len(only_st)
    for (n, e), nr in zip(subs, nrows):
        x = out[(slice(None),) * n_axis + (slice(r, r + nr),)]
        x = x.reshape(x.shape[:n_axis] + tuple(e) + (nr // max(math.prod(e), 1),) + x.shape[n_axis + 1:])
        extra = [nlead + t for t in range(len(e))]
        cur = both + only_st + extra + ["M"] + only_mv + ["N"]
        keep = [i for i in range(nlead) if i not in reduce] + extra
        x = x.transpose([cur.index(i) for i in keep if i in cur] + [cur.index("M"), cur.index("N")])
        repeat = [q for q, i in enumerate(keep) if i not in cur]
        if repeat:
            x = np.broadcast_to(np.expand_dims(x, repeat), tuple(sizes[i] if i < nlead else e[i - nlead]
                                                                 for i in keep) + x.shape[-2:])
        got.append((x, np.cumsum([0] + Ms[k:k + n]).tolist(), np.cumsum([0] + Ns).tolist()))
        r, k = r + nr, k + n
    return got


def _gemm(gemm, st, mv, transposed: bool):
    if transposed:  # BLAS reads the transposed operands in place
        return gemm(mv.swapaxes(-1, -2), st.swapaxes(-1, -2)).swapaxes(-1, -2)
    return gemm(st, mv)


def _row_blocks(sts: list, out: np.ndarray, subs: list, Ms: list, rks: list, copy=np.copyto) -> np.ndarray:
    """`out` (lead..., rows, K) filled with the stationary blocks in the (M, K) layout: group by
    group of `subs` down the rows, each group's rows its extra loop axes then its stationaries
    side by side; the parts side by side along K. One group without extra axes: _blocks."""
    n = out.ndim - 2
    if len(subs) == 1 and not subs[0][1]:
        return _blocks(sts, out, n, n + 1, tuple(Ms), tuple(rks), copy)
    r, k = 0, 0
    for cnt, e in subs:
        m = sum(Ms[k:k + cnt])
        region = out[(slice(None),) * n + (slice(r, r + math.prod(e) * m),)]
        region = region.reshape(region.shape[:n] + tuple(e) + (m, region.shape[-1]))
        _blocks(sts[k:k + cnt], region, n + len(e), n + len(e) + 1, tuple(Ms[k:k + cnt]), tuple(rks), copy)
        r, k = r + math.prod(e) * m, k + cnt
    return out


def _in_place(sts: list, rows: list, subs: list, Ms: list, rks: list, stack: list):
    """The stationary operand, one (stack..., rows, K part) view per part of the contraction, where
    each part's blocks already lie in one array exactly as _row_blocks would copy them into an
    operand of shape rows + [K part] (mm2's E: the rows of C's products, each multi-buffer copy of
    the n0 body its own array): a GEMM per part reads them there, no copy. None where any part's
    do not."""
    views = []
    n = len(rows) - 1
    for p, k in enumerate(rks):
        first = sts[0][p]  # (lead..., [extra...], M, red..., K)
        if first.dtype != np.float32:
            return None
        try:
            view = view_at(first, address(first), tuple(rows) + (k,),
                           first.strides[:n] + (_row_step(sts, p, n, subs), first.strides[-1]))
        except (ValueError, TypeError):
            return None
        same = [True]

        def check(dst, src):
            same[0] = same[0] and same_view(dst, src)
        _row_blocks([[xs[p]] for xs in sts], view, subs, Ms, (k,), check)
        if not same[0]:
            return None
        try:
            views.append(np.reshape(view, stack + [-1, k], copy=False))
        except (ValueError, TypeError):
            return None
        views[-1].flags.writeable = False
    return views


def _row_step(sts: list, p: int, n: int, subs: list) -> int:
    """Bytes from the first row of part p's stationary operand to the second, in _row_blocks's
    order (a group's extra loop axes outermost, then its blocks' M rows side by side), as the
    blocks lie (one-row blocks: their own M stride says nothing); 0 where there is one row."""
    rows = []
    k = 0
    for cnt, e in subs:
        for ext in np.ndindex(*e):
            for xs in sts[k:k + cnt]:
                x = xs[p]
                base = address(x) + sum(i * step for i, step in zip(ext, x.strides[n:n + len(e)]))
                rows.extend(base + r * x.strides[n + len(e)] for r in range(min(x.shape[n + len(e)], 2)))
                if len(rows) > 1:
                    return rows[1] - rows[0]
        k += cnt
    return 0


def _blocks(blocks: list, out: np.ndarray, axis_u: int, axis_v: int, sizes_u: list, sizes_v: list,
            copy=np.copyto) -> np.ndarray:
    """`out` (C-ordered float32) filled with blocks[u][v], block (u, v) at offset
    sum(sizes_u[:u]) along axis_u and sum(sizes_v[:v]) along axis_v (each block's own shape has
    the contraction axis split into its loop axes and K: a view of the target's block)."""
    shape = out.shape
    ou, ov = np.cumsum([0, *sizes_u]), np.cumsum([0, *sizes_v])
    sel = [slice(None)] * len(shape)
    for u, row in enumerate(blocks):
        v = 0
        while v < len(row):
            w, x = _run_of_blocks(out, sel, axis_u, axis_v, ou[u], ou[u + 1], ov, row, v)
            sel[axis_u], sel[axis_v] = slice(ou[u], ou[u + 1]), slice(ov[v], ov[w])
            block = out[tuple(sel)].reshape(x.shape)
            assert np.may_share_memory(block, out)  # splitting one axis of a slice is always a view
            copy(block, x)
            v = w
    return out


def _run_of_blocks(out, sel, axis_u, axis_v, u0, u1, ov, row, v):
    """(w, source): blocks v..w-1 of a row copied as one, where each next block's source
    continues the one before along one of its axes (At's m tiles of 128, 128 and 44 columns: one
    copy of 300-element runs instead of three shorter ones) and their target is one view in that
    shape; else (v + 1, row[v])."""
    x, sel = row[v], list(sel)
    for ax in range(x.ndim):
        w, n = v + 1, x.shape[ax]
        while w < len(row):
            y = row[w]
            if (y.strides != x.strides or y.dtype != x.dtype or y.shape[:ax] + y.shape[ax + 1:] != x.shape[:ax] + x.shape[ax + 1:]
                    or x.strides[ax] <= 0 or address(y) != address(x) + n * x.strides[ax]):
                break
            n, w = n + y.shape[ax], w + 1
        if w > v + 1:
            sel[axis_u], sel[axis_v] = slice(u0, u1), slice(ov[v], ov[w])
            shape = x.shape[:ax] + (n,) + x.shape[ax + 1:]
            try:  # the target, split into that shape as a view, must hold each block where its own does
                target = np.reshape(out[tuple(sel)], shape, copy=False)
            except (ValueError, TypeError):
                continue
            at, same = 0, True
            for k in range(v, w):
                sel[axis_v] = slice(ov[k], ov[k + 1])
                own = out[tuple(sel)].reshape(row[k].shape)
                part = target[(slice(None),) * ax + (slice(at, at + row[k].shape[ax]),)]
                same = same and same_view(own, part)
                at += row[k].shape[ax]
            if same:
                return w, np.lib.stride_tricks.as_strided(x, shape, x.strides, writeable=False)
    return v + 1, x


def _stacked(st, mv, nlead: int, reduce: tuple, rows: int = 1) -> np.ndarray:
    """One GEMM per iteration left after the sum; the axes in `reduce` join the contraction. Along
    a summed axis where only one operand moves, that one is summed first (sum over r of s @ m_r is
    s @ (sum over r of m_r)): no copy of the constant operand, one product instead of one per r."""
    st_moves, mv_moves = moving_axes(st, nlead), moving_axes(mv, nlead)
    first = tuple(i for i in reduce if (i in st_moves) != (i in mv_moves))
    one = lambda x, i: x[(slice(None),) * i + (slice(0, 1),)]
    for i in first:  # (both keep the axis, of length 1: it still joins the contraction)
        if i in st_moves:
            st, mv = f32(st).sum(axis=i, keepdims=True, dtype=np.float32), one(mv, i)
        else:
            st, mv = one(st, i), f32(mv).sum(axis=i, keepdims=True, dtype=np.float32)
    st, mv = f32(st), f32(mv)
    st = st.reshape(st.shape[:nlead] + (st.shape[nlead] * rows, -1))
    mv = mv.reshape(mv.shape[:nlead] + (mv.shape[nlead] * rows, -1))
    if reduce:  # the reduced loop axes next to the partition (K) axis, then merged into it
        keep = [i for i in range(nlead) if i not in reduce]
        order = keep + list(reduce) + [nlead, nlead + 1]
        st, mv = st.transpose(order), mv.transpose(order)
        lead = tuple(st.shape[i] for i in range(len(keep)))
        st = st.reshape(lead + (-1, st.shape[-1]))
        mv = mv.reshape(lead + (-1, mv.shape[-1]))
    return np.matmul(st.swapaxes(-1, -2), mv)


class EntryArrays:
    """The float32 arrays one nest entry takes from the simulator's scratch pool (GEMM products,
    `new`; GEMM operands, called as _new_operand's contract), all given back when the
    entry ends (`release`). One view already of an operand's shape is the operand (no copy); an
    operand made only of views of inputs the kernel never writes is made once per entry (the At
    block that mm2's two multi-buffer copies of the n0 body both read)."""

    def __init__(self, sim):
        self.sim, self.taken = sim, []
        self.steady = [byte_bounds(sim.hbm[name]) for name in sim.read_only]  # those inputs' bytes
        self.made: dict = {}

    def new(self, shape: tuple) -> np.ndarray:
        out = self.sim.scratch.take(shape, np.float32)
        self.taken.append(out)
        return out

    def release(self) -> None:
        for x in self.taken:
            self.sim.scratch.give(x)
        self.taken, self.made = [], {}

    def _steady(self, x: np.ndarray) -> bool:
        lo, hi = byte_bounds(x)
        return any(a <= lo and hi <= b for a, b in self.steady)

    def __call__(self, shape: tuple, layout: tuple, sources: list, fill) -> np.ndarray:
        if len(sources) == 1:  # BLAS reads it in place
            try:
                return np.reshape(sources[0], shape, copy=False)
            except (ValueError, TypeError):  # (TypeError: numpy < 2.1 has no copy=)
                pass
        key = None
        if self.steady and all(self._steady(x) for x in sources):
            key = (shape, layout, tuple((address(x), x.shape, x.strides) for x in sources))
            if key in self.made:
                return self.made[key]
        out = fill(self.new(shape))
        if key is not None:
            self.made[key] = out
        return out


def multiply(a: np.ndarray, b: np.ndarray, spare=None, arrays: EntryArrays | None = None) -> np.ndarray:
    """a @ b for the batched path: BLAS's own threads for a GEMM of THREADED_GEMM_FLOP or more (a
    whole loop nest's product) while a core is to spare (`spare()`, a CpuShare's by default), else
    one thread (the simulator runs under one BLAS thread). With `arrays`, the product lands in one
    of the entry's scratch arrays."""
    flop = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * math.prod(a.shape[:-2])
    out = None
    if arrays is not None and a.dtype == b.dtype == np.float32:
        out = arrays.new(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]))
    if flop >= THREADED_GEMM_FLOP and (spare or CpuShare().spare)():
        with default_blas():
            return np.matmul(a, b, out=out)
    return np.matmul(a, b, out=out)
