"""Communication between ranks (NeuronCores with their own SBUF and PSUM):
`nki.collectives` (all_reduce, all_gather, reduce_scatter, all_to_all,
collective_permute, ...) and the two-core `nisa.sendrecv` / `nisa.core_barrier`.

Each definition's `collective` rule computes one rank's outputs from the
inputs every rank of its group contributed; the simulators meet the other
ranks through a communicator (simulator/comm.py) to gather those inputs. A
replica group is a tuple of rank lists (None: every rank is one group)."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import NkiccError
from ..nodes import Access, Op
from . import alu, enums
from .checks import free, tensor
from .core import CostContext, Emit, get, instruction, require_generation
from .dma import queue_options

_REDUCE = ("add", "minimum", "maximum")


def _tensors(xs, what: str) -> list:
    try:
        out = [tensor(x, what) for x in xs]
    except TypeError:
        raise NkiccError("E103", f"{what} must be a list of tensors") from None
    if not out:
        raise NkiccError("E103", f"{what} is empty")
    return out


def _same_space(ts, what: str) -> None:
    onchip = {t.decl.on_chip for t in ts}
    if len(onchip) > 1:
        raise NkiccError("E120", f"{what}: all tensors must be on HBM or all on SBUF", None,
                         "stage the SBUF data through HBM (or the other way round)")
    if any(t.buffer == "psum" for t in ts):
        raise NkiccError("E120", f"{what} cannot use PSUM tensors", None, "copy to SBUF first")
    if True in onchip and len(ts) > 2:
        raise NkiccError("E120", f"{what}: several tensors at once (coalesced) only on HBM")


def groups_attr(replica_group):
    """The replica group as plain data: a tuple of rank tuples, or None (all ranks)."""
    lists = getattr(replica_group, "rank_lists", replica_group)
    if lists is None:
        return None
    try:
        groups = tuple(tuple(int(r) for r in g) for g in lists)
    except TypeError:
        raise NkiccError("E103", f"replica_group must be a ReplicaGroup or a list of rank lists, "
                                 f"got {replica_group!r}") from None
    seen = [r for g in groups for r in g]
    if len(seen) != len(set(seen)) or any(r < 0 for r in seen):
        raise NkiccError("E103", f"replica group {[list(g) for g in groups]} repeats a rank or has a negative one")
    return groups


# the instructions between the cores of one logical NeuronCore: their groups name cores, not ranks
CORE_LEVEL = frozenset({"sendrecv", "core_barrier"})


def meets_others(opcode: str, groups) -> bool:
    """Whether an instruction (by opcode and its `groups` attribute) waits for another core or
    rank: a collective, sendrecv or core_barrier whose group is not just this one."""
    return get(opcode).collective is not None and groups != "self"


def group_of(op: Op, rank: int, size: int) -> tuple[int, ...]:
    """The ranks `rank` exchanges with in this op (the cores, for the CORE_LEVEL ones)."""
    groups = op.attr("groups")
    if groups is None:
        return tuple(range(size))
    if groups == "self":
        return (rank,)
    if op.opcode == "core_barrier" and size == 1:
        return (rank,)  # one core (no multi-core launch): nobody to wait for
    for g in groups:
        if rank in g:
            if max(g) >= size:
                if op.opcode in CORE_LEVEL:
                    raise NkiccError("E191", f"{op.opcode}: core {max(g)} of a launch of {size} core(s)", op.loc,
                                     f"launch the kernel on {max(g) + 1} cores (kernel[{max(g) + 1}])")
                raise NkiccError("E191", f"{op.opcode}: replica group {list(g)} names rank {max(g)} of a "
                                         f"{size}-rank run", op.loc, f"run with at least {max(g) + 1} ranks")
            return g
    raise NkiccError("E191", f"{op.opcode}: rank {rank} is in no group of the replica group "
                             f"{[list(g) for g in groups]}", op.loc, "list every rank in one group")


def _bytes(op: Op, decls) -> int:
    return sum(a.count * dtypes.itemsize(a.dtype or decls[a.tensor].dtype) for a in op.outs)


def _ring_ns(factor):
    """A ring over G ranks moves factor(G) x the output bytes through each link."""
    def cost(op: Op, ctx: CostContext) -> float:
        groups = op.attr("groups")
        g = max(len(x) for x in groups) if groups else ctx.ranks
        t = ctx.table
        return t.collective_fixed_ns + factor(max(g, 1)) * _bytes(op, ctx.decls) / t.link_bytes_per_ns
    return cost


def payload(op: Op, read) -> list:
    """What this rank contributes: copies of its inputs (the other ranks'
    threads read them after this one has moved on), floats in fp32 and integers
    in their own dtype: fp32 holds integers only to 2^24, and packed MX data
    (uint32 storage) must arrive bit for bit."""
    if op.opcode == "core_barrier":  # (its input names the tensor it orders: nothing is sent)
        return []
    out = []
    for a in op.ins:
        if isinstance(a, Access):
            v = read(a)
            out.append(np.array(v, dtype=v.dtype if np.asarray(v).dtype.kind in "iub" else np.float32))
    return out


def _combine(name: str, arrays):
    out = arrays[0]
    for x in arrays[1:]:
        out = alu.BINARY[name](out, x)
    return out


def _all_reduce(op: Op, inputs, me: int, group) -> list:
    return [(i, _combine(op.attr("op"), [inputs[r][i] for r in group])) for i in range(len(op.outs))]


def _priority(dsts, priority, what: str) -> None:
    """A collective's DMA priority, as a DMA's (NeuronCore-v4 and newer)."""
    queue_options(dsts[0].generation, priority, enums.dge_mode.unknown, f"nki.collectives.{what}")


def _check_pairs(srcs, dsts, what: str, shapes=True) -> None:
    if len(srcs) != len(dsts):
        raise NkiccError("E140", f"{what}: {len(srcs)} sources for {len(dsts)} destinations")
    for s, d in zip(srcs, dsts):
        if shapes and s.access.count != d.access.count:
            raise NkiccError("E140", f"{what}: source {list(s.shape)} and destination {list(d.shape)} differ")


@instruction(family="collectives", compute=None, engine="dma", collective=_all_reduce, module="collectives",
             cost=_ring_ns(lambda g: 2 * (g - 1) / g), traffic=_bytes, free_limited=False)
def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """dsts[i] = op over the group's ranks of srcs[i] (nl.add, nl.minimum, nl.maximum), on every rank."""
    srcs, dsts = _tensors(srcs, "all_reduce srcs"), _tensors(dsts, "all_reduce dsts")
    _priority(dsts, priority, "all_reduce")
    _same_space(srcs + dsts, "all_reduce")
    _check_pairs(srcs, dsts, "all_reduce")
    return Emit(dsts, srcs, {"op": alu.op_name(op, _REDUCE, "all_reduce"), "groups": groups_attr(replica_group)})


def _split(x: np.ndarray, n: int, dim: int, what: str) -> list:
    if x.shape[dim] % n:
        raise NkiccError("E140", f"{what}: dimension {dim} of size {x.shape[dim]} does not split into {n} ranks")
    return np.split(x, n, axis=dim)


def _all_gather(op: Op, inputs, me: int, group) -> list:
    dim = op.attr("dim")
    return [(i, np.concatenate([inputs[r][i] for r in group], axis=dim)) for i in range(len(op.outs))]


def _dim(collective_dim, ts, what: str) -> int:
    d = int(collective_dim)
    if not all(0 <= d < len(t.shape) for t in ts):
        raise NkiccError("E103", f"{what} collective_dim {d} is not a dimension of its tensors")
    return d


@instruction(family="collectives", compute=None, engine="dma", collective=_all_gather, module="collectives",
             cost=_ring_ns(lambda g: (g - 1) / g), traffic=_bytes, free_limited=False)
def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """dsts[i] = the group's srcs[i] concatenated along collective_dim, in rank order."""
    srcs, dsts = _tensors(srcs, "all_gather srcs"), _tensors(dsts, "all_gather dsts")
    _priority(dsts, priority, "all_gather")
    _same_space(srcs + dsts, "all_gather")
    _check_pairs(srcs, dsts, "all_gather", shapes=False)
    groups = groups_attr(replica_group)
    dim = _dim(collective_dim, srcs, "all_gather")
    for s, d in zip(srcs, dsts):
        if groups is not None and d.access.count != s.access.count * len(groups[0]):
            raise NkiccError("E140", f"all_gather of {list(s.shape)} over {len(groups[0])} ranks needs a "
                                     f"destination {len(groups[0])} times larger, got {list(d.shape)}")
    return Emit(dsts, srcs, {"dim": dim, "groups": groups})


def _reduce_scatter(op: Op, inputs, me: int, group) -> list:
    dim, k = op.attr("dim"), group.index(me)
    out = []
    for i in range(len(op.outs)):
        total = _combine(op.attr("op"), [inputs[r][i] for r in group])
        out.append((i, _split(total, len(group), dim, "reduce_scatter")[k]))
    return out


@instruction(family="collectives", compute=None, engine="dma", collective=_reduce_scatter, module="collectives",
             cost=_ring_ns(lambda g: g - 1), traffic=_bytes, free_limited=False)
def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None):
    """dsts[i] on the k-th rank of a group = the k-th of G equal pieces (along
    collective_dim) of op over the group's srcs[i]."""
    srcs, dsts = _tensors(srcs, "reduce_scatter srcs"), _tensors(dsts, "reduce_scatter dsts")
    _priority(dsts, priority, "reduce_scatter")
    _same_space(srcs + dsts, "reduce_scatter")
    _check_pairs(srcs, dsts, "reduce_scatter", shapes=False)
    return Emit(dsts, srcs, {"op": alu.op_name(op, _REDUCE, "reduce_scatter"),
                             "dim": _dim(collective_dim, srcs, "reduce_scatter"),
                             "groups": groups_attr(replica_group)})


def _all_to_all(op: Op, inputs, me: int, group) -> list:
    dim, k = op.attr("dim"), group.index(me)
    return [(i, np.concatenate([_split(inputs[r][i], len(group), dim, "all_to_all")[k] for r in group], axis=dim))
            for i in range(len(op.outs))]


@instruction(family="collectives", compute=None, engine="dma", collective=_all_to_all, module="collectives",
             cost=_ring_ns(lambda g: (g - 1) / g), traffic=_bytes, free_limited=False)
def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Each rank splits srcs[i] into G pieces along collective_dim and sends
    the k-th to the group's k-th rank, which concatenates what it receives."""
    srcs, dsts = _tensors(srcs, "all_to_all srcs"), _tensors(dsts, "all_to_all dsts")
    _priority(dsts, priority, "all_to_all")
    if any(t.decl.on_chip for t in srcs + dsts):
        raise NkiccError("E120", "all_to_all tensors must be on HBM")
    _check_pairs(srcs, dsts, "all_to_all")
    return Emit(dsts, srcs, {"dim": _dim(collective_dim, srcs, "all_to_all"), "groups": groups_attr(replica_group)})


# --- variable-length collectives: sizes in a uint32 metadata tensor, read at run time ---
# Metadata rows: 0 send counts, 1 send displacements (elements of the flat src), 2 receive
# counts (written by the collective unless recv_counts_known), 3 receive displacements
# (has_rdispls; else the chunk from the group's i-th rank lands at i * dst.size / G).

def _metadata(x: np.ndarray, op: Op, group) -> np.ndarray:
    rows = op.attr("rows")
    m = np.asarray(x).reshape(rows, -1)
    if m.shape[1] != len(group):
        raise NkiccError("E191", f"{op.opcode}: the metadata tensor has {m.shape[1]} columns but the replica group "
                                 f"{list(group)} has {len(group)} ranks", op.loc, "one column per rank of the group")
    return m.astype(np.int64)


def _place(op: Op, dst: np.ndarray, chunk: np.ndarray, at: int, slot: int | None, sender: int) -> None:
    n = chunk.size
    if at < 0 or at + n > dst.size or (slot is not None and n > slot):
        room = f"its slot of {slot}" if slot is not None and n > slot else f"dst ({dst.size} elements)"
        raise NkiccError("E170", f"{op.opcode}: the {n} elements from rank {sender} at offset {at} do not fit "
                                 f"{room}", op.loc, "check the counts and displacements in the metadata")
    dst[at:at + n] = chunk


def _chunk(op: Op, src: np.ndarray, displ: int, count: int, sender: int) -> np.ndarray:
    flat = src.reshape(-1)
    if count < 0 or displ < 0 or displ + count > flat.size:
        raise NkiccError("E170", f"{op.opcode}: rank {sender} sends elements [{displ}, {displ + count}) of a "
                                 f"{flat.size}-element src", op.loc, "check send counts and displacements")
    return flat[displ:displ + count]


def _exchange_v(op: Op, inputs, me: int, group, pick) -> list:
    """dst on rank `me`, the chunks of every sender placed; `pick(meta, i)` is
    the (count, displ) column the group's rank i's metadata gives for `me`."""
    if op.attr("groups") is None:  # all ranks: known only now
        _v_groups(op.opcode, group, op.attr("generation"), op.loc)
    mine = _metadata(inputs[me][1], op, group)
    dst = np.array(inputs[me][2], dtype=np.float32).reshape(-1)
    slot = None if op.attr("rdispls") else dst.size // len(group)
    counts = []
    k = group.index(me)
    for i, sender in enumerate(group):
        count, displ = pick(_metadata(inputs[sender][1], op, group), k)
        chunk = _chunk(op, inputs[sender][0], displ, count, sender)
        _place(op, dst, chunk, int(mine[3, i]) if op.attr("rdispls") else i * slot, slot, sender)
        counts.append(count)
    out = [(0, dst.reshape(np.shape(inputs[me][2])))]
    if op.attr("write_counts"):
        meta = mine.copy()
        meta[2, :] = counts
        out.append((1, meta.astype(np.float64).reshape(np.shape(inputs[me][1]))))
    return out


def _all_gather_v(op: Op, inputs, me: int, group) -> list:
    return _exchange_v(op, inputs, me, group, lambda m, k: (int(m[0, 0]), int(m[1, 0])))


def _all_to_all_v(op: Op, inputs, me: int, group) -> list:
    return _exchange_v(op, inputs, me, group, lambda m, k: (int(m[0, k]), int(m[1, k])))


# Where the variable-length collectives run today (the reference's "current limitations"): on
# NeuronCore-v3 and newer with two physical cores per logical one (LNC=2), a device holding
# DEVICE_RANKS ranks. all_gather_v: each rank-list is exactly the 4 ranks of one device, no
# recv_displs. all_to_all_v on a NeuronSwitch fabric (trn3): each rank-list is sequential whole
# devices, more than one of them; recv_displs allowed. all_to_all_v elsewhere (trn2): inter-node
# only, each rank-list holds the same-indexed rank of different nodes of NODE_RANKS ranks.
DEVICE_RANKS = 4
NODE_RANKS = 64  # trn2.48xlarge: 16 devices of 4 logical cores


def _v_groups(what: str, group, generation: int, loc=None) -> None:
    """E130 unless one rank-list of a variable-length collective is one the hardware runs."""
    g = list(group)
    if what == "all_gather_v":
        ok = len(g) == DEVICE_RANKS and g == list(range(g[0], g[0] + DEVICE_RANKS)) and g[0] % DEVICE_RANKS == 0
        need = f"exactly the {DEVICE_RANKS} ranks of one device (4k .. 4k+3)"
    elif generation >= 4:
        ok = len(g) > DEVICE_RANKS and len(g) % DEVICE_RANKS == 0 and g == list(range(g[0], g[0] + len(g))) \
            and g[0] % DEVICE_RANKS == 0
        need = f"whole devices of {DEVICE_RANKS} sequential ranks, more than one device"
    else:
        ok = len(g) > 1 and len({r % NODE_RANKS for r in g}) == 1 and len({r // NODE_RANKS for r in g}) == len(g)
        need = f"the same-indexed rank of different nodes ({NODE_RANKS} ranks per node; intra-node groups need trn3)"
    if not ok:
        raise NkiccError("E130", f"nki.collectives.{what} runs over rank-lists of {need}; got {g}", loc,
                         "to leave a rank out, keep it in the group and give it a send count of 0")


def _trace_v(what: str, srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
             priority) -> Emit:
    srcs, dsts = _tensors(srcs, f"{what} srcs"), _tensors(dsts, f"{what} dsts")
    _priority(dsts, priority, what)
    generation = dsts[0].generation if dsts else 3
    if has_rdispls and what == "all_gather_v":
        raise NkiccError("E160", "all_gather_v with has_rdispls=True is not supported (the chunk of the group's "
                                 "i-th rank lands at i * dst.size / G)", None, "pass has_rdispls=False")
    if has_rdispls:
        require_generation(generation, 4, f"nki.collectives.{what} with has_rdispls=True (NeuronSwitch)")
    if len(srcs) != 1 or len(dsts) != 1:
        raise NkiccError("E160", f"{what} takes exactly one tensor in srcs and in dsts")
    if any(t.decl.on_chip for t in srcs + dsts):
        raise NkiccError("E120", f"{what} srcs and dsts must be on HBM")
    meta = tensor(metadata_tensor, f"{what} metadata_tensor")
    if meta.decl.dtype != "uint32":
        raise NkiccError("E132", f"{what} metadata_tensor is {meta.decl.dtype}; it must be uint32", None,
                         "declare it with dtype nl.uint32")
    if meta.buffer == "psum":
        raise NkiccError("E120", f"{what} metadata_tensor must be in HBM or SBUF")
    rows = 4 if has_rdispls else 3
    shape = list(meta.shape)
    if (meta.decl.on_chip and (len(shape) != 3 or shape[0] != 1 or shape[1] != rows)) or \
            (not meta.decl.on_chip and (len(shape) != 2 or shape[0] != rows)):
        want = f"[1, {rows}, G] in SBUF" if meta.decl.on_chip else f"[{rows}, G] in HBM"
        raise NkiccError("E140", f"{what} metadata_tensor is {shape}; with has_rdispls={bool(has_rdispls)} it is "
                                 f"{want} (G ranks in the group)")
    groups = groups_attr(replica_group)
    for g in groups or ():
        _v_groups(what, g, generation)
    if groups is not None and any(len(g) != shape[-1] for g in groups):
        raise NkiccError("E140", f"{what} metadata_tensor has {shape[-1]} columns; the replica group "
                                 f"{[list(g) for g in groups]} needs one per rank of a group")
    outs = dsts + ([] if recv_counts_known else [meta])  # row 2 is written unless recv_counts_known
    # dst is read too: elements no chunk covers keep their values
    return Emit(outs, [srcs[0], meta, dsts[0]], {"rows": rows, "rdispls": bool(has_rdispls),
                                                 "write_counts": not recv_counts_known, "groups": groups,
                                                 "generation": generation})


@instruction(family="collectives", compute=None, engine="dma", collective=_all_gather_v, module="collectives",
             cost=_ring_ns(lambda g: (g - 1) / g), traffic=_bytes, free_limited=False, since=3)
def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Variable-length all-gather over flat element buffers (HBM, one tensor
    each): every rank sends the chunk src[send_displ : send_displ + send_count]
    (metadata rows 0 and 1, first column) to every rank of its group; the
    chunk of the group's i-th rank lands at dst[i * dst.size / G ...]. Row 2
    receives the counts unless recv_counts_known. metadata_tensor: uint32
    [3, G] in HBM or [1, 3, G] in SBUF. Elements no chunk covers keep their
    values; a chunk that does not fit is E170 at run time. Each rank-list is
    the 4 ranks of one device (LNC=2); has_rdispls=True is refused, as on the
    hardware."""
    return _trace_v("all_gather_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                    priority)


@instruction(family="collectives", compute=None, engine="dma", collective=_all_to_all_v, module="collectives",
             cost=_ring_ns(lambda g: (g - 1) / g), traffic=_bytes, free_limited=False, since=3)
def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Variable-length all-to-all over flat element buffers (HBM, one tensor
    each): rank s sends src[send_displs[k] : send_displs[k] + send_counts[k]]
    (metadata rows 1 and 0, column k) to the group's k-th rank, where the
    chunk from the group's i-th rank lands at dst[i * dst.size / G ...], or at
    recv_displs[i] (row 3) with has_rdispls. Row 2 receives the counts unless
    recv_counts_known; metadata_tensor as in all_gather_v."""
    return _trace_v("all_to_all_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                    priority)


def _permute(op: Op, inputs, me: int, group) -> list:
    sources = [s for s, t in op.attr("pairs") if t == me]
    if not sources:
        return [(0, inputs[me][1])]  # nothing arrives: dst keeps what it held
    return [(0, inputs[sources[0]][0])]


@instruction(family="collectives", compute=None, engine="dma", collective=_permute, module="collectives",
             cost=_ring_ns(lambda g: 1), traffic=_bytes, free_limited=False)
def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """For each (source, target) pair, target's dsts[0] = source's srcs[0];
    a rank that is no pair's target keeps its dst."""
    srcs, dsts = _tensors(srcs, "collective_permute srcs"), _tensors(dsts, "collective_permute dsts")
    _priority(dsts, priority, "collective_permute")
    if len(srcs) != 1 or len(dsts) != 1:
        raise NkiccError("E160", "collective_permute takes one tensor in each list (no coalescing yet)")
    if any(t.decl.on_chip for t in srcs + dsts):
        raise NkiccError("E120", "collective_permute tensors must be on HBM")
    _check_pairs(srcs, dsts, "collective_permute")
    try:
        pairs = tuple((int(s), int(t)) for s, t in source_target_pairs)
    except (TypeError, ValueError):
        raise NkiccError("E103", "source_target_pairs must be a list of (source, target) rank pairs") from None
    targets = [t for _, t in pairs]
    if len(targets) != len(set(targets)):
        raise NkiccError("E103", f"collective_permute: a rank receives from two sources in {list(pairs)}")
    ranks = tuple(sorted({r for p in pairs for r in p}))
    # dst is read too: a rank nothing is sent to keeps it
    return Emit(dsts, srcs + dsts, {"pairs": pairs, "groups": (ranks,)})


def _sendrecv(op: Op, inputs, me: int, group) -> list:
    return [(0, inputs[op.attr("recv_from")][0])]


def _sendrecv_ns(op: Op, ctx: CostContext) -> float:
    # between the two cores of a logical core, through their shared HBM: a DMA
    t = ctx.table
    return t.dma_fixed_ns + _bytes(op, ctx.decls) / t.dma_peak_bytes_per_ns()


@instruction(family="collectives", compute=None, engine="dma", collective=_sendrecv, cost=_sendrecv_ns,
             traffic=_bytes, free_limited=False, since=3)
def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=enums.dma_engine.dma, name=None):
    """Send src to send_to_rank's dst while receiving recv_from_rank's src into
    this core's dst (the two cores of a logical NeuronCore; SBUF tiles of one
    shape and dtype)."""
    src, dst = tensor(src, "sendrecv src"), tensor(dst, "sendrecv dst")
    for t, what in ((src, "src"), (dst, "dst")):
        if t.buffer != "sbuf":
            raise NkiccError("E120", f"sendrecv {what} must be in SBUF, {t.name} is in {t.buffer}")
    if src.decl.dtype != dst.decl.dtype or src.shape[0] != dst.shape[0] or free(src) != free(dst):
        raise NkiccError("E140", f"sendrecv src {src.decl.dtype}{list(src.shape)} and dst "
                                 f"{dst.decl.dtype}{list(dst.shape)} must match")
    enums.member_name(dma_engine, enums.dma_engine, "sendrecv dma_engine")  # (both move through HBM alike)
    to, frm = int(send_to_rank), int(recv_from_rank)
    if to not in (0, 1) or frm not in (0, 1):
        raise NkiccError("E103", f"sendrecv ranks are 0 or 1 (the cores of a logical NeuronCore), got "
                                 f"send_to_rank={to}, recv_from_rank={frm}")
    return Emit([dst], [src], {"send_to": to, "recv_from": frm, "pipe": int(pipe_id), "groups": ((0, 1),)})


def _barrier(op: Op, inputs, me: int, group) -> list:
    return []


def _barrier_ns(op: Op, ctx: CostContext) -> float:
    return ctx.table.dma_fixed_ns  # a semaphore round trip (estimate)


@instruction(family="collectives", compute=None, engine="pool", collective=_barrier, cost=_barrier_ns,
             since=3)
def core_barrier(data, cores, engine=enums.engine.gpsimd, name=None):
    """Every core of `cores` (only (0, 1)) waits here until all have arrived:
    their writes to the shared HBM tensor `data` are then visible to all."""
    data = tensor(data, "core_barrier data")
    if data.decl.buffer == "psum":  # (library kernels also order an SBUF tile this way, e.g. a loop counter)
        raise NkiccError("E120", "core_barrier data must be an HBM or SBUF tensor")
    cores = tuple(int(c) for c in cores)
    if cores != (0, 1):
        raise NkiccError("E160", f"core_barrier supports cores=(0, 1) only, got {list(cores)}")
    # it orders the cores' accesses to data: it reads and writes it as far as the schedule is concerned
    return Emit([data], [data], {"groups": (cores,)})


def _rank(op: Op, inputs, me: int, group) -> list:
    return [(0, np.array([[me]], dtype=np.float64))]


def _register_ns(op: Op, ctx: CostContext) -> float:
    return ctx.ns(ctx.table.fixed_cycles)


@instruction(family="collectives", compute=None, engine="pool", collective=_rank, cost=_register_ns, public=False)
def rank_register(dst):
    """dst (a register) = this rank's id; emitted by nki.collectives.rank_id()."""
    return Emit([dst], [], {"groups": "self"})


def _ring(group, me: int, steps: int = 1) -> int:
    return group[(group.index(me) - steps) % len(group)]


def _permute_implicit(op: Op, inputs, me: int, group) -> list:
    pred = _ring(group, me)
    if op.attr("op") is None:
        return [(c, inputs[pred][c]) for c in range(len(op.outs))]
    n = len(op.outs)
    return [(c, alu.BINARY[op.attr("op")](inputs[pred][c], inputs[pred][n + c])) for c in range(n)]


def _channels(lists, what: str) -> list:
    try:
        chans = [list(c) for c in lists]
    except TypeError:
        raise NkiccError("E103", f"{what} must be a list (one per channel) of one-tensor lists") from None
    if any(len(c) != 1 for c in chans):
        raise NkiccError("E160", f"{what}: one tensor per channel (no coalescing yet)")
    return [tensor(c[0], what) for c in chans]


@instruction(family="collectives", compute=None, engine="dma", collective=_permute_implicit, module="collectives",
             cost=_ring_ns(lambda g: 1), traffic=_bytes, free_limited=False)
def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=[0], priority=None,
                                name=None):
    """Each rank of a ring (the replica group's order) sends srcs_by_channel[c]
    to its successor and receives its predecessor's into dsts_by_channel[c]."""
    srcs = _channels(srcs_by_channel, "collective_permute_implicit srcs_by_channel")
    dsts = _channels(dsts_by_channel, "collective_permute_implicit dsts_by_channel")
    _priority(dsts, priority, "collective_permute_implicit")
    _check_pairs(srcs, dsts, "collective_permute_implicit")
    return Emit(dsts, srcs, {"op": None, "groups": groups_attr(replica_group)})


@instruction(family="collectives", compute=None, engine="dma", collective=_permute_implicit, module="collectives",
             cost=_ring_ns(lambda g: 1), traffic=_bytes, free_limited=False)
def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=[0], priority=None, name=None):
    """As collective_permute_implicit, sending op(srcs0[c], srcs1[c]): each rank
    receives its predecessor's reduced pair."""
    s0 = _channels(srcs0_by_channel, "collective_permute_implicit_reduce srcs0_by_channel")
    s1 = _channels(srcs1_by_channel, "collective_permute_implicit_reduce srcs1_by_channel")
    dsts = _channels(dsts_by_channel, "collective_permute_implicit_reduce dsts_by_channel")
    _priority(dsts, priority, "collective_permute_implicit_reduce")
    _check_pairs(s0, dsts, "collective_permute_implicit_reduce")
    _check_pairs(s1, dsts, "collective_permute_implicit_reduce")
    return Emit(dsts, s0 + s1, {"op": alu.op_name(op, _REDUCE, "collective_permute_implicit_reduce"),
                                "groups": groups_attr(replica_group)})


def _processing_rank(op: Op, inputs, me: int, group) -> list:
    return [(0, np.array([[_ring(group, me, op.attr("iteration"))]], dtype=np.float64))]


@instruction(family="collectives", compute=None, engine="pool", collective=_processing_rank, cost=_register_ns,
             public=False)
def processing_rank_register(dst, iteration, replica_group):
    """dst (a register) = the rank whose data a ring holds here after `iteration` steps."""
    return Emit([dst], [], {"iteration": int(iteration), "groups": groups_attr(replica_group)})
