"""The Tensor Engine: matrix multiply and transpose through the PE array."""
from __future__ import annotations

import math

import numpy as np

from ..errors import NkiccError
from ..nodes import Access, Op
from . import enums
from .checks import free, on_chip, tensor
from .core import Batched, CostContext, Emit, free_size, instruction, partitions, require_generation
from .enums import matmul_perf_mode
from .values import address, as_tiles, f32, same_view, view_at

_FP32 = ("float32", "tfloat32")
_FP8 = ("float8_e4m3", "float8_e5m2")
_DTYPES = _FP8 + ("bfloat16", "float16", "tfloat32", "float32")
# NeuronCore-v4 adds OCP fp8 (e4m3fn) operands and a bfloat16 PSUM result
_V4_DTYPES = _DTYPES + ("float8_e4m3fn",)


def _matmul(op: Op, read):
    # contiguous copies: BLAS picks its kernel (and so the rounding) from the
    # operands' strides and alignment, which differ between simulators' layouts
    st = np.ascontiguousarray(as_tiles(f32(read(op.ins[0]))))
    mv = np.ascontiguousarray(as_tiles(f32(read(op.ins[1]))))
    if op.attr("double_row"):  # [K, 2, X] operands contract over (partition, first free index)
        st, mv = st.reshape(st.shape[0] * 2, -1), mv.reshape(mv.shape[0] * 2, -1)
    return [(0, st.T @ mv)]


def moving_axes(x: np.ndarray, nlead: int) -> list:
    """The leading loop axes of a batched operand view along which it changes (not broadcast)."""
    return [i for i in range(nlead) if x.shape[i] > 1 and x.strides[i] != 0]


def _matmul_batched(op: Op, read, nlead: int, reduce: tuple, gemm=np.matmul) -> list:
    """Many matmuls as few GEMMs. A loop axis along which only one operand moves joins that
    operand's free axis (M or N); one along which both move stacks GEMMs, or, in `reduce` (a
    PSUM accumulation over a loop), joins the contraction (K * trips); one along which neither
    moves repeats the product. With no axis of the stacking kind, that is a single GEMM.
    `gemm(a, b)`: how the simulator multiplies ([stack,] M, K) by ([stack,] K, N)."""
    st, mv = read(op.ins[0]), read(op.ins[1])
    rows = 2 if op.attr("double_row") else 1  # double-row: the pair of rows joins the contraction
    got = _matmul_grouped([st], [mv], nlead, reduce, gemm, rows)
    if got is None:  # a sum along which one operand is constant: rare
        return _matmul_stacked(st, mv, nlead, reduce, rows)
    return [(0, got()[0])]


def _matmul_grouped(sts: list, mvs: list, nlead: int, reduce: tuple, gemm=np.matmul, rows: int = 1,
                    copy=np.copyto, transposed: bool = False, operand=None, subs: list | None = None):
    """The products of every stationary view in `sts` with every moving view in `mvs` (each with
    `nlead` leading loop axes, as _matmul_batched reads them) as one GEMM: the stationaries side
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
        return None  # (a sum of one product repeated: _matmul_stacked)
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
    """_matmul_grouped's products, once its checks passed: [(out, M offsets, N offsets)] per group
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


def _matmul_stacked(st, mv, nlead: int, reduce: tuple, rows: int = 1) -> list:
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
    return [(0, np.matmul(st.swapaxes(-1, -2), mv))]


def _fp32_factor(op: Op, ctx: CostContext) -> int:
    fp32 = any((a.dtype or ctx.decls[a.tensor].dtype) == "float32" for a in op.ins[:2])
    return ctx.table.matmul_fp32_factor if fp32 else 1


def load_stationary(op: Op, ctx: CostContext) -> float:
    """LoadStationary: a MultiplyMoving of the stationary's free size, max(64, M) cycles (x4 for
    fp32), at the Fast LoadStationary rate (ARCH1). Run in the background while the matmul before it
    multiplies, it costs only where the matmul waits for its operands."""
    t = ctx.table
    rows = 2 if op.attr("double_row") else 1
    return max(t.matmul_min_rows, free_size(op.ins[0]) // rows) * _fp32_factor(op, ctx) / t.load_stationary_speedup


def _matmul_cost(op: Op, ctx: CostContext) -> float:
    """The LoadStationary, then the MultiplyMoving: max(min(64, M), N) cycles for 2-byte and fp8
    inputs, x4 for fp32. FP8 double-row mode multiplies two rows per cycle: a [K, 2, N] moving
    tile streams in N cycles, twice the rate (ARCH2, Tensor Engine performance modes)."""
    t = ctx.table
    st, mv = op.ins[0], op.ins[1]
    rows = 2 if op.attr("double_row") else 1
    cycles = max(min(t.matmul_min_rows, free_size(st) // rows), free_size(mv) // rows) * _fp32_factor(op, ctx)
    return ctx.ns(ctx.fixed_cycles(op) + load_stationary(op, ctx) + cycles)


def _sbuf_to_psum(op: Op, decls) -> None:
    bufs = [decls[a.tensor].buffer for a in op.ins if isinstance(a, Access)]
    if decls[op.outs[0].tensor].buffer != "psum" or bufs[:2] != ["sbuf", "sbuf"]:
        raise NkiccError("E131", "nc_matmul reads SBUF and writes PSUM", op.loc, "move the operands")


# free_limited=False: nc_matmul's own tile limits (N <= 512, 4096 or 8192) are the tighter ones
@instruction(family="matmul", compute=_matmul, engine="pe", cost=_matmul_cost, background=load_stationary,
             verify=_sbuf_to_psum,
             accumulates=lambda op: op.attr("accumulate") is not False, free_limited=False,
             batched=Batched(_matmul_batched, lambda op: op.attr("accumulate") is not False, sums=True,
                             grouped=_matmul_grouped))
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None,
              **_hw_hints):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor Engine.
    accumulate=False overwrites, True adds, None: the first write to a PSUM
    location overwrites and later writes add. perf_mode=double_row (fp8,
    NeuronCore-v3 and newer) contracts [K, 2, M] with [K, 2, N] over the
    partitions and the first free dimension at twice the rate. dst is float32
    PSUM (or bfloat16 on NeuronCore-v4)."""
    dst = tensor(dst, "nc_matmul dst")
    st = tensor(stationary, "nc_matmul stationary")
    mv = tensor(moving, "nc_matmul moving")
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.buffer != "sbuf":
            raise NkiccError("E131", f"nc_matmul {what} must be in SBUF, {t.shown} is in {t.buffer}", None,
                             "copy it to SBUF with nisa.tensor_copy")
    if dst.buffer != "psum":
        raise NkiccError("E131", f"nc_matmul dst must be in PSUM, {dst.shown} is in {dst.buffer}", None,
                         "allocate the result with buffer=nl.psum")
    generation = dst.generation
    double = enums.member_name(perf_mode, matmul_perf_mode, "perf_mode") == "double_row"
    rows = 1
    if double:
        require_generation(generation, 3, "nc_matmul perf_mode=double_row (FP8 double-row mode)")
        if len(tile_size or ()) == 2 and tile_size[1] < 128:
            raise NkiccError("E103", "nc_matmul perf_mode=double_row cannot be combined with column tiling "
                                     f"(tile_size={tuple(tile_size)})", None, "drop tile_size or the perf_mode")
        if any(len(t.shape) < 3 or t.shape[1] != 2 for t in (st, mv)):
            raise NkiccError("E130", f"nc_matmul perf_mode=double_row takes [K, 2, M] and [K, 2, N] operands, got "
                                     f"{list(st.shape)} and {list(mv.shape)}", None,
                             "split the contraction over the partitions and a first free dimension of 2")
        rows = 2
    k, m, k2, n = st.shape[0], free(st) // rows, mv.shape[0], free(mv) // rows
    if k != k2:
        raise NkiccError("E130", f"nc_matmul contraction mismatch: stationary has {k} partitions, moving {k2}",
                         None, "both operands carry the contraction (K) dimension on partitions")
    # the moving tile's free size fills one PSUM bank; on NeuronCore-v4 up to all 8 of them
    n_max = 512 if generation < 4 else (8192 if dst.decl.dtype == "bfloat16" else 4096)
    if k > 128 or m > 128 or n > n_max:
        raise NkiccError("E130", f"nc_matmul tile too large: K={k} (<=128), M={m} (<=128), N={n} (<={n_max})", None,
                         f"tile the matmul: K and M by 128, N by {n_max}")
    if dst.shape[0] != m or free(dst) != n:
        raise NkiccError("E130", f"nc_matmul dst has shape {list(dst.shape)}, expected [{m}, {n}]", None,
                         "dst is [M, N] for stationary [K, M] and moving [K, N]")
    dtypes_here = _V4_DTYPES if generation >= 4 else _DTYPES
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.decl.dtype == "float8_e4m3fn" and generation < 4:
            require_generation(generation, 4, f"nc_matmul with a float8_e4m3fn {what}")
        if t.decl.dtype not in dtypes_here:
            raise NkiccError("E132", f"nc_matmul {what} is {t.decl.dtype}; the Tensor Engine multiplies "
                                     f"{', '.join(dtypes_here)}", None, "cast it with nisa.tensor_copy first")
        if double and t.decl.dtype not in _FP8 + ("float8_e4m3fn",):
            raise NkiccError("E132", f"nc_matmul perf_mode=double_row multiplies fp8 operands; {what} is "
                                     f"{t.decl.dtype}", None, "cast both operands to float8_e4m3 or float8_e5m2")
    if (st.decl.dtype in _FP32) != (mv.decl.dtype in _FP32):
        raise NkiccError("E132", f"nc_matmul mixes {st.decl.dtype} and {mv.decl.dtype}", None,
                         "an fp32/tfloat32 operand needs an fp32/tfloat32 partner")
    if {st.decl.dtype, mv.decl.dtype} == {"float8_e4m3", "float8_e4m3fn"}:
        raise NkiccError("E132", "nc_matmul mixes the legacy float8_e4m3 and the OCP float8_e4m3fn", None,
                         "use one of the two for both operands")
    if dst.decl.dtype == "bfloat16":
        require_generation(generation, 4, "nc_matmul into a bfloat16 PSUM tile")
    elif dst.decl.dtype != "float32":
        raise NkiccError("E132", f"nc_matmul dst is {dst.decl.dtype}; the Tensor Engine accumulates into float32 "
                                 "PSUM (bfloat16 too on NeuronCore-v4)", None, "declare the PSUM tile nl.float32")
    if accumulate not in (None, True, False):
        raise NkiccError("E103", "nc_matmul accumulate must be None, True or False")
    attrs = {"accumulate": accumulate, **({"double_row": True} if double else {})}
    return Emit([dst], [st, mv], attrs)


def _transpose(op: Op, read):
    return [(0, as_tiles(f32(read(op.ins[0]))).T)]


def _transpose_engine(op: Op, decls) -> str:
    # into SBUF it is the Vector Engine's 32x32 transpose
    return "dve" if decls[op.outs[0].tensor].buffer == "sbuf" else "pe"


def _transpose_cost(op: Op, ctx: CostContext) -> float:
    if ctx.engine != "pe":
        return ctx.ns(ctx.fixed_cycles(op) + max(ctx.table.elementwise_min, free_size(op.outs[0])))
    src = op.ins[0]
    return ctx.ns(ctx.fixed_cycles(op) + max(partitions(src), min(ctx.table.matmul_min_rows, free_size(src))))


@instruction(family="matmul", compute=_transpose, engine=_transpose_engine, cost=_transpose_cost)
def nc_transpose(dst, data, engine=enums.engine.unknown, name=None, **_hw_hints):
    """dst = data.T: on the Tensor Engine (<= 128 x 128, into PSUM) or the
    Vector Engine (<= 32 x 32, into SBUF); dst's buffer decides, and engine,
    where given, must agree with it."""
    dst, data = tensor(dst, "nc_transpose dst"), tensor(data, "nc_transpose data")
    on_chip(data, "nc_transpose data")
    on_chip(dst, "nc_transpose dst")
    p, f = data.shape[0], free(data)
    if dst.shape[0] != f or free(dst) != p:
        raise NkiccError("E140", f"nc_transpose of [{p}, {f}] needs dst [{f}, {p}], got {list(dst.shape)}")
    if f > 128:
        raise NkiccError("E130", f"nc_transpose of {f} free elements; at most 128")
    unit = enums.engine_choice(engine, (None, "pe", "dve"), "nc_transpose")
    if unit is not None and unit != ("pe" if dst.buffer == "psum" else "dve"):
        raise NkiccError("E103", f"nc_transpose on the {enums.UNIT_ENGINES[unit]} engine writes "
                                 f"{'PSUM' if unit == 'pe' else 'SBUF'}, dst {dst.name} is in {dst.buffer}", None,
                         "the Tensor Engine transposes into a PSUM tile, the Vector Engine (32 x 32) into SBUF")
    if dst.buffer != "psum" and (p > 32 or f > 32):
        raise NkiccError("E130", f"nc_transpose of [{p}, {f}] into {dst.buffer} runs on the Vector Engine, "
                                 f"which transposes at most 32 x 32", None,
                         "transpose on the Tensor Engine into a PSUM tile, or in 32 x 32 blocks")
    return Emit([dst], [data])
