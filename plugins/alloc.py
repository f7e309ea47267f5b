"""alloc: SBUF and PSUM addresses from liveness on the rolled IR, spilling when
the kernel needs more than the target has.

Liveness comes from loop structure, never from unrolling: statements are
numbered in program order, a loop spans the numbers of its body, and a tensor
allocated in a block lives from its allocation to its last use in that block
(a use inside a nested loop keeps it live to the end of that loop, all
iterations). Tensors whose live ranges overlap get disjoint bytes in every
partition; PSUM tiles never straddle a 2 KiB bank.

Over capacity, the allocator first moves each allocation down to the first
use of its tensor (alloc_sink.py: tiles made ahead of the loops that use
them then share bytes, PSUM banks included), then writes element-wise
results over the input that dies at them (alloc_coalesce.py), then shortens
live ranges: straight-line
blocks (the iterations of loops traced concretely, where a kernel keeps tiles
in Python lists) are reordered demand-first (live_order.py), each load issued
a few compute steps ahead of its use, and the new order is kept where it
lowers the peak. What still does not fit is spilled: the tensors live where
the most bytes are live (where placement failed, while that is under the
capacity) whose eviction moves the fewest bytes per byte freed (uses x
executions x view size), as many per round as the excess there needs. An SBUF
tile that is a copy of input memory nothing writes (one DMA fills it whole,
every use reads it whole) is rematerialised: the fill goes and each use loads
its own short-lived tile from the input. Any other SBUF tensor gets an HBM
home and DMA around each compute use (DMAs read the home directly); a PSUM tensor gets an SBUF home, its matmuls write a small PSUM
tile that is then added or copied in. The spill DMAs are ordinary
instructions, so the simulator's time includes them. The report says what
was done (notes "what_alloc_did", "live_ranges_shortened", "spills").
"""
from __future__ import annotations

import dataclasses
import itertools

from nkicc.ir import Access, Affine, Alloc, Block, Loop, NkiccError, Op, TensorDecl
from nkicc.ir.analysis import tensors_touched
from nkicc.ir.rewrite import map_stmts
from nkicc.ir.dtypes import itemsize
from nkicc.pass_api import Pass, hookimpl

from . import live_order
from .alloc_coalesce import coalesce
from .alloc_sink import sink_allocs

ALIGN = 64
MAX_SPILLS = 64  # rounds of eviction, each as many tensors as the excess needs


def row_major(shape):
    pairs, stride = [], 1
    for d in reversed(shape):
        pairs.append((stride, d))
        stride *= d
    return tuple(reversed(pairs))


def partition_bytes(decl: TensorDecl) -> int:
    n = itemsize(decl.dtype)
    for d in decl.shape[1:]:
        n *= d
    return n


# --- liveness ------------------------------------------------------------------------

class _Numbering:
    """Program-order numbers of statements, loop spans, and for each op its
    chain of enclosing loops with their trip counts."""

    def __init__(self, kernel) -> None:
        self.counter = itertools.count()
        self.alloc_at: dict[str, tuple[int, tuple]] = {}   # tensor -> (number, enclosing loop chain)
        self.uses: dict[str, list[tuple[int, tuple]]] = {}
        self.loop_end: dict[str, int] = {}
        self.loop_start: dict[str, int] = {}
        self.walk(kernel.body, ())

    def walk(self, block: Block, chain: tuple) -> None:
        for s in block.stmts:
            n = next(self.counter)
            if isinstance(s, Alloc):
                self.alloc_at.setdefault(s.tensor, (n, chain))
            elif isinstance(s, Op):
                for name in tensors_touched(s):
                    self.uses.setdefault(name, []).append((n, chain))
            else:
                self.loop_start[s.var] = n
                self.walk(s.body, chain + (s,))
                self.loop_end[s.var] = next(self.counter)

    def live_range(self, tensor: str) -> tuple[int, int]:
        start, chain = self.alloc_at[tensor]
        end = start
        for n, use_chain in self.uses.get(tensor, ()):
            if use_chain[:len(chain)] == chain:
                # inside the allocating block: to the end of the child loop holding the use
                end = max(end, self.loop_end[use_chain[len(chain)].var] if len(use_chain) > len(chain) else n)
            else:
                # used outside the block it was allocated in (dynamic loops reuse one allocation):
                # live over the outermost loop it left, and up to the use
                common = 0
                while common < min(len(chain), len(use_chain)) and chain[common] == use_chain[common]:
                    common += 1
                start = min(start, self.loop_start[chain[common].var])
                end = max(end, n, self.loop_end[chain[common].var])
        return start, end


# --- address assignment -------------------------------------------------------------------

def _place(items, capacity: int, bank: int | None, rotate: bool = False):
    """First-fit over live ranges. items: (name, size, start, end). Returns
    (addresses, name that did not fit or None, peak bytes). `rotate` (PSUM):
    each tile is looked for from the bank after the one placed before it,
    wrapping round, so that consecutive short-lived tiles (a matmul group's
    accumulator, one per iteration of a traced loop) take turns over the
    banks. First-fit gives each one the bank the one before it just left, and
    the next group's first matmul then waits for whatever reads the previous
    result out of PSUM (a write after read on the bank): the Tensor Engine
    idles while the Vector Engine drains the bank. Rotating fragments
    differently; where it does not fit, first-fit is the placement."""
    if rotate:
        got = _place_from(items, capacity, bank, True)
        if got[1] is None:
            return got
    return _place_from(items, capacity, bank, False)


def _place_from(items, capacity: int, bank: int | None, rotate: bool):
    addresses: dict[str, int] = {}
    active: list[tuple[int, int, int]] = []  # (end, address, size)
    peak = cursor = 0
    for name, size, start, end in sorted(items, key=lambda t: (t[2], -t[1])):
        active = [a for a in active if a[0] >= start]
        taken = sorted((addr, addr + sz) for _, addr, sz in active)
        addr = _fit(taken, size, cursor, bank)
        if addr + size > capacity and cursor:
            addr = _fit(taken, size, 0, bank)
        if addr + size > capacity:
            return addresses, name, peak
        addresses[name] = addr
        active.append((end, addr, size))
        # the bytes in use at most: the highest one, or, where tiles take turns over the banks
        # (which reaches the last bank however few are live), the most live at once
        peak = max(peak, sum(sz for _, _, sz in active) if rotate else addr + size)
        if rotate:
            cursor = -(-(addr + size) // bank) * bank
            cursor = 0 if cursor >= capacity else cursor
    return addresses, None, peak


def _fit(taken: list, size: int, addr: int, bank: int | None) -> int:
    """The first address from `addr` where `size` bytes miss every (lo, hi) of `taken` (sorted)."""
    for lo, hi in taken:
        addr = _bank_fit(addr, size, bank)
        if addr + size <= lo:
            break
        addr = max(addr, _align(hi))
    return _bank_fit(addr, size, bank)


def _bank_fit(addr: int, size: int, bank: int | None) -> int:
    """The first address from `addr` where a PSUM tile does not straddle a bank;
    a tile of several banks (NeuronCore-v4 matmuls) starts on a bank."""
    if bank is None:
        return addr
    if (size > bank and addr % bank) or (size <= bank and addr % bank + size > bank):
        return (addr // bank + 1) * bank
    return addr


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# --- spilling -------------------------------------------------------------------------------

def _executions(chain) -> int:
    n = 1
    for loop in chain:
        n *= loop.trip
    return n


def _spill_costs(names, kernel, decls) -> dict:
    """Bytes each tensor of `names` would move as a spill (each access stored or loaded once
    per execution), from one walk of the kernel: a round weighs every live tensor."""
    costs = dict.fromkeys(names, 0)
    for op, chain in _ops_with_chain(kernel.body, ()):
        runs = None
        for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access)):
            if a.tensor in costs:
                runs = _executions(chain) if runs is None else runs
                costs[a.tensor] += 2 * a.count * itemsize(decls[a.tensor].dtype) * runs
    return costs


def _reload_cost(name: str, kernel, decls) -> int:
    """Bytes a reload moves beyond the fill it replaces: a load per use, less the fill."""
    isz = itemsize(decls[name].dtype)
    cost = 0
    for op, chain in _ops_with_chain(kernel.body, ()):
        n = sum(a.count for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access)) if a.tensor == name)
        cost += (-1 if any(a.tensor == name for a in op.outs) else 1) * n * isz * _executions(chain)
    return max(cost, 0)


def _ops_with_chain(block: Block, chain):
    for s in block.stmts:
        if isinstance(s, Op):
            yield s, chain
        elif isinstance(s, Loop):
            yield from _ops_with_chain(s.body, chain + (s,))


def _sbuf_spill(kernel, name: str):
    """Give SBUF tensor `name` an HBM home; compute instructions use a small
    SBUF tile loaded before and stored after them."""
    decls = kernel.tensor_map()
    old = decls[name]
    home = dataclasses.replace(old, buffer="hbm", role="spill", address=None)
    temps: list[TensorDecl] = []
    counter = itertools.count()

    def rewrite(s) -> list:
        if isinstance(s, Alloc) or name not in tensors_touched(s):
            return [s]  # an Alloc: the HBM home is (re)allocated where the tensor was
        if s.opcode == "dma_copy":
            return [s]  # DMA reaches the HBM home directly
        if s.opcode == "memset" and s.outs[0].tensor == name:
            return _memset_home(s, home, temps, counter)
        return _around(s, name, old.dtype, temps, counter)

    body = map_stmts(kernel.body, rewrite)
    tensors = tuple(home if t.name == name else t for t in kernel.tensors) + tuple(temps)
    return dataclasses.replace(kernel, body=body, tensors=tensors)


def _reload(kernel, name: str):
    """Rematerialise SBUF tensor `name` instead of spilling it, where it is a
    copy of input memory nothing writes: one DMA fills the whole tile from
    HBM once per allocation and every other use reads the whole tile. The
    fill goes; each use loads its own short-lived tile from the source (no
    HBM home, no store). None where that does not hold."""
    decls = kernel.tensor_map()
    decl = decls[name]
    whole = row_major(decl.shape)
    fills = [(s, c) for s, c in _ops_with_chain(kernel.body, ()) if any(a.tensor == name for a in s.outs)]
    if len(fills) != 1:
        return None  # (most candidates: before the walk below, which a round pays per candidate)
    fill, fill_chain = fills[0]
    chain = _alloc_chain(kernel.body, name)  # of this kernel: an earlier eviction this round rewrote it
    src = fill.ins[0] if fill.ins else None
    if (fill.opcode != "dma_copy" or fill_chain != chain or len(fill.ins) != 1 or not isinstance(src, Access)
            or src.scalar is not None or decls[src.tensor].on_chip or len(fill.outs) != 1
            or fill.outs[0] != Access(name, Affine(), whole) or src.count != decl.size):
        return None
    written = {a.tensor for s, _ in _ops_with_chain(kernel.body, ()) for a in s.outs}
    if src.tensor in written:
        return None
    for s, use_chain in _ops_with_chain(kernel.body, ()):
        if s is fill or name not in tensors_touched(s):
            continue
        if use_chain[:len(chain)] != chain or any(a.tensor == name for a in s.outs):
            return None
        if any(isinstance(a, Access) and a.tensor == name and (a.offset != Affine() or a.pattern != whole)
               for a in s.ins):
            return None
    temps: list[TensorDecl] = []
    counter = itertools.count()

    def rewrite(s) -> list:
        if s is fill or (isinstance(s, Alloc) and s.tensor == name):
            return []
        if not (isinstance(s, Op) and name in tensors_touched(s)):
            return [s]
        t = TensorDecl(f"{name}.reload{next(counter)}", decl.shape, decl.dtype, "sbuf", "spill-temp", decl.loc)
        temps.append(t)
        tile = Access(t.name, Affine(), whole)
        return [Alloc(t.name), Op("dma_copy", (tile,), (src,), (), s.loc),
                Op(s.opcode, s.outs, tuple(tile if isinstance(a, Access) and a.tensor == name else a
                                          for a in s.ins), s.attrs, s.loc)]

    body = map_stmts(kernel.body, rewrite)
    tensors = tuple(t for t in kernel.tensors if t.name != name) + tuple(temps)
    return dataclasses.replace(kernel, body=body, tensors=tensors)


def _alloc_chain(block: Block, name: str, chain: tuple = ()) -> tuple | None:
    """The loops around the first Alloc of `name`, outermost first (None: no Alloc)."""
    for s in block.stmts:
        if isinstance(s, Alloc) and s.tensor == name:
            return chain
        if isinstance(s, Loop):
            found = _alloc_chain(s.body, name, chain + (s,))
            if found is not None:
                return found
    return None


def _temp(base: str, access: Access, dtype: str, buffer: str, temps, counter) -> tuple[TensorDecl, Access]:
    shape = access.shape if len(access.shape) > 1 else access.shape + (1,)
    decl = TensorDecl(f"{base}.spill{next(counter)}", shape, dtype, buffer, "spill-temp")
    temps.append(decl)
    return decl, Access(decl.name, Affine(), row_major(shape))


def _around(op: Op, name: str, dtype: str, temps, counter) -> list:
    """Load the spilled views an op reads into temps, point the op at them,
    store the views it writes back."""
    if any(a.scalar is not None and a.scalar.tensor == name for a in op.outs + op.ins if isinstance(a, Access)):
        raise NkiccError("E900", f"cannot spill {name}: it is used as a runtime offset", op.loc)
    if any(a.vector is not None and a.vector.tensor == name for a in op.outs + op.ins if isinstance(a, Access)):
        raise _CannotSpill()  # gather / scatter indices stay on chip
    if any(a.tensor == name and a.dtype is not None for a in op.outs + op.ins if isinstance(a, Access)):
        raise _CannotSpill()  # its bytes are read as another dtype: a temp of its own dtype would not hold them
    before, after = [], []
    mapping: dict[Access, Access] = {}
    for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access)):
        if a.tensor == name and a not in mapping:
            decl, full = _temp(name, a, dtype, "sbuf", temps, counter)
            mapping[a] = full
            before.append(Alloc(decl.name))
            if a in op.ins:
                before.append(Op("dma_copy", (full,), (a,), (), op.loc))
            if a in op.outs:
                after.append(Op("dma_copy", (a,), (full,), (), op.loc))
    new = Op(op.opcode, tuple(mapping.get(a, a) for a in op.outs),
             tuple(mapping.get(a, a) if isinstance(a, Access) else a for a in op.ins), op.attrs, op.loc)
    return before + [new] + after


def _memset_home(op: Op, home: TensorDecl, temps, counter) -> list:
    """memset of a spilled tensor: fill a small tile once, DMA it over the home."""
    a = op.outs[0]
    if a.pattern != row_major(a.shape) or len(a.pattern) < 2 or a.dtype is not None:
        raise _CannotSpill()  # not whole rows in order
    parts = a.pattern[0][1]
    free = a.count // parts
    chunk = max(d for d in range(1, min(free, 4096) + 1) if free % d == 0)
    decl = TensorDecl(f"{home.name}.spill{next(counter)}", (parts, chunk), home.dtype, "sbuf", "spill-temp")
    temps.append(decl)
    tile = Access(decl.name, Affine(), row_major(decl.shape))
    out = [Alloc(decl.name), Op("memset", (tile,), (), op.attrs, op.loc)]
    row = free
    var = f"{home.name}.fill"
    dst = Access(a.tensor, a.offset + Affine.var(var, chunk), ((row, parts), (1, chunk)))
    out.append(Loop(var, free // chunk, 0, 1, "static", Block((Op("dma_copy", (dst,), (tile,), (), op.loc),)), op.loc))
    return out


class _CannotSpill(Exception):
    pass


def _psum_spill(kernel, name: str):
    """Give PSUM tensor `name` an SBUF home: each matmul writes a fresh PSUM
    tile that is added into (or copied to) the home."""
    decls = kernel.tensor_map()
    home = dataclasses.replace(decls[name], buffer="sbuf", address=None)
    temps: list[TensorDecl] = []
    counter = itertools.count()
    seen_write = [False]

    def rewrite(s) -> list:
        if not (isinstance(s, Op) and s.opcode in ("nc_matmul", "nc_matmul_mx") and s.outs[0].tensor == name):
            if isinstance(s, Op) and any(a.tensor == name for a in s.outs):
                full_cover = s.outs[0].count == decls[name].size and s.outs[0].dtype is None
                seen_write[0] = seen_write[0] or full_cover
            return [s]
        acc = s.attr("accumulate")
        if acc is None:
            if not seen_write[0]:
                raise _CannotSpill()  # first-write-overwrites cannot be decided statically here
            acc = True
        decl, full = _temp(name, s.outs[0], "float32", "psum", temps, counter)
        attrs = tuple((k, v) for k, v in s.attrs if k != "accumulate") + (("accumulate", False),)
        fold = (Op("tensor_tensor", (s.outs[0],), (s.outs[0], full), (("op", "add"),), s.loc) if acc
                else Op("tensor_copy", (s.outs[0],), (full,), (), s.loc))
        return [Alloc(decl.name), Op(s.opcode, (full,), s.ins, attrs, s.loc), fold]

    body = map_stmts(kernel.body, rewrite)
    tensors = tuple(home if t.name == name else t for t in kernel.tensors) + tuple(temps)
    return dataclasses.replace(kernel, body=body, tensors=tensors)


# --- the pass ---------------------------------------------------------------------------------

def _place_all(kernel, numbering, decls, capacity, banks):
    """(addresses, overflow or None, peak bytes per buffer); overflow is
    (buffer, tensor that did not fit, that buffer's items)."""
    placed: dict[str, int] = {}
    peaks = {}
    for buffer in ("psum", "sbuf"):
        items = []
        for name in numbering.alloc_at:
            d = decls[name]
            if d.buffer == buffer:
                start, end = numbering.live_range(name)
                items.append((name, partition_bytes(d), start, end))
        addresses, failed, peak = _place(items, capacity[buffer], banks[buffer], rotate=buffer == "psum")
        peaks[buffer] = peak
        if failed is not None:
            return placed, (buffer, failed, items), peaks
        placed.update(addresses)
    return placed, None, peaks


def fits(kernel, target) -> bool:
    """Whether the kernel's on-chip tensors fit the target without a spill."""
    capacity = {"sbuf": target.sbuf_partition_bytes, "psum": target.psum_partition_bytes}
    banks = {"sbuf": None, "psum": target.psum_bank_bytes}
    return _place_all(kernel, _Numbering(kernel), kernel.tensor_map(), capacity, banks)[1] is None


def _demand(kernel, numbering=None) -> dict[str, int]:
    """Most bytes per partition live at once, per buffer (placement needs at
    least this much, more where fragmentation and PSUM banks get in the way)."""
    numbering = numbering or _Numbering(kernel)
    decls = kernel.tensor_map()
    items: dict[str, list] = {"sbuf": [], "psum": []}
    for name in numbering.alloc_at:
        d = decls[name]
        if d.buffer in items:
            items[d.buffer].append((name, partition_bytes(d), *numbering.live_range(name)))
    return {buffer: _peak_point(its)[1] for buffer, its in items.items()}


def _local_tensors(numbering) -> set[str]:
    """Tensors used only in the block that allocates them, or in static loops nested in it
    (live_order moves such a loop as one statement)."""
    return {t for t, (_, chain) in numbering.alloc_at.items()
            if all(use_chain[:len(chain)] == chain and all(loop.kind == "static" for loop in use_chain[len(chain):])
                   for _, use_chain in numbering.uses.get(t, ()))}


# loads issued this many compute steps ahead of their use after a reorder
# (the most that fits is taken), so that DMA still overlaps compute
PREFETCH_WINDOWS = (16, 8, 4, 2, 1, 0)


def _shorten(kernel, buffer, capacity, banks):
    """Reorder straight-line blocks demand-first when that lowers the peak of
    the buffer that overflowed and keeps the other within capacity (or no
    higher than it was), with the widest prefetch window that then fits;
    (kernel, note or None)."""
    numbering = _Numbering(kernel)
    before = _demand(kernel, numbering)
    local = _local_tensors(numbering)
    for window in PREFETCH_WINDOWS:
        trial, blocks = live_order.reorder(kernel, local, window)
        if not blocks:
            return kernel, None
        if _place_all(trial, _Numbering(trial), trial.tensor_map(), capacity, banks)[1] is None:
            break
    after = _demand(trial)
    if after[buffer] >= before[buffer] or any(after[b] > max(before[b], capacity[b]) for b in after if b != buffer):
        return kernel, None
    note = {"buffer": buffer, "peak_bytes_per_partition_before": before[buffer],
            "peak_bytes_per_partition_after": after[buffer], "prefetch_window": window,
            "blocks": [dataclasses.asdict(b) for b in blocks]}
    return trial, note


def _sink(kernel, buffer):
    """Allocations moved to their tensors' first uses where that lowers the peak of
    the buffer that overflowed; (kernel, note or None)."""
    trial, moved = sink_allocs(kernel)
    if not moved:
        return kernel, None
    before, after = _demand(kernel), _demand(trial)
    if after[buffer] >= before[buffer]:
        return kernel, None
    decls = kernel.tensor_map()
    return trial, {"buffer": buffer, "peak_bytes_per_partition_before": before[buffer],
                   "peak_bytes_per_partition_after": after[buffer],
                   "tensors": [decls[t].described() for t in moved]}


def _hoist(kernel, buffer, capacity):
    """Each last use of a `buffer` tile moved up to where the tile is complete (live_order's
    hoist_last_uses) where that lowers the peak and keeps the other buffer as it was or within
    capacity; (kernel, note or None)."""
    numbering = _Numbering(kernel)
    trial, blocks = live_order.hoist_last_uses(kernel, _local_tensors(numbering), buffer)
    if not blocks:
        return kernel, None
    trial = sink_allocs(trial)[0]  # tiles made up front now die early: allocated at their first use, they share
    before, after = _demand(kernel, numbering), _demand(trial)
    if after[buffer] >= before[buffer] or any(after[b] > max(before[b], capacity[b]) for b in after if b != buffer):
        return kernel, None
    return trial, {"buffer": buffer, "peak_bytes_per_partition_before": before[buffer],
                   "peak_bytes_per_partition_after": after[buffer],
                   "blocks": [dataclasses.asdict(b) for b in blocks]}


def _coalesce(kernel, buffer, capacity, banks):
    """Element-wise results written over the input that dies at them (alloc_coalesce.py),
    the largest first, until the kernel fits; (kernel, note or None)."""
    def enough(k) -> bool:
        return _place_all(k, _Numbering(k), k.tensor_map(), capacity, banks)[1] is None
    trial, pairs = coalesce(kernel, buffer, enough)
    if not pairs:
        return kernel, None
    before, after = _demand(kernel), _demand(trial)
    if after[buffer] >= before[buffer]:
        return kernel, None
    return trial, {"buffer": buffer, "peak_bytes_per_partition_before": before[buffer],
                   "peak_bytes_per_partition_after": after[buffer], "pairs": [list(p) for p in pairs]}


def allocate(kernel, ctx):
    target = ctx.target
    capacity = {"sbuf": target.sbuf_partition_bytes, "psum": target.psum_partition_bytes}
    banks = {"sbuf": None, "psum": target.psum_bank_bytes}
    spills = []
    shortened = sunk = in_place = hoisted = None
    placed, overflow, peaks = _place_all(kernel, _Numbering(kernel), kernel.tensor_map(), capacity, banks)
    if overflow is not None:
        kernel, sunk = _sink(kernel, overflow[0])
        placed, overflow, peaks = _place_all(kernel, _Numbering(kernel), kernel.tensor_map(), capacity, banks)
    if overflow is not None:
        kernel, in_place = _coalesce(kernel, overflow[0], capacity, banks)
        placed, overflow, peaks = _place_all(kernel, _Numbering(kernel), kernel.tensor_map(), capacity, banks)
    if overflow is not None and overflow[0] == "psum":  # (an SBUF tile's last use is no drain: shorten's)
        kernel, hoisted = _hoist(kernel, overflow[0], capacity)
        placed, overflow, peaks = _place_all(kernel, _Numbering(kernel), kernel.tensor_map(), capacity, banks)
    if overflow is not None:
        kernel, shortened = _shorten(kernel, overflow[0], capacity, banks)
    for _ in range(MAX_SPILLS + 1):
        decls = kernel.tensor_map()
        numbering = _Numbering(kernel)
        placed, overflow, peaks = _place_all(kernel, numbering, decls, capacity, banks)
        if overflow is None:
            break
        buffer, failed, items = overflow
        kernel, spilled = _spill_some(kernel, buffer, capacity[buffer], failed, items, numbering, decls)
        spills += spilled
    else:
        raise NkiccError("E400", f"the kernel does not fit on {target.name} even after {len(spills)} spills in {MAX_SPILLS} rounds", None,
                         "tile it more finely")
    tensors = tuple(dataclasses.replace(t, address=placed[t.name]) if t.name in placed else t
                    for t in kernel.tensors)
    kernel = dataclasses.replace(kernel, tensors=tensors)
    sizes = sorted(((partition_bytes(t), t.described(), t.buffer) for t in tensors if t.on_chip), reverse=True)
    ctx.note("sbuf_peak_bytes_per_partition", peaks.get("sbuf", 0))
    ctx.note("psum_peak_bytes_per_partition", peaks.get("psum", 0))
    ctx.note("capacity_bytes_per_partition", capacity)
    ctx.note("largest_tensors", [{"tensor": n, "buffer": b, "bytes_per_partition": s} for s, n, b in sizes[:8]])
    ctx.note("spills", spills)
    ctx.note("allocations_sunk", sunk)
    ctx.note("computed_in_place", in_place)
    ctx.note("live_ranges_shortened", shortened)
    ctx.note("last_uses_hoisted", hoisted)
    actions = _actions(shortened, spills, sunk, in_place, hoisted)
    ctx.note("what_alloc_did", actions, show=bool(actions))
    ctx.note("memory", f"SBUF {peaks.get('sbuf', 0) / 1024:.1f} of {capacity['sbuf'] // 1024} KiB per partition "
                       f"at peak, PSUM {peaks.get('psum', 0) / 1024:.1f} of {capacity['psum'] // 1024} KiB"
                       + (f", after {len(spills)} spill{'s' if len(spills) > 1 else ''}" if spills else ""), show=True)
    return kernel


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def _actions(shortened, spills, sunk=None, in_place=None, hoisted=None) -> list[str]:
    """What the allocator had to do to fit the kernel, one sentence each."""
    out = []
    if hoisted:
        where = sorted({b["loc"] or "the kernel body" for b in hoisted["blocks"]})
        moved = sum(b["moved"] for b in hoisted["blocks"])
        out.append(f"moved the last uses of {hoisted['buffer'].upper()} tiles up to where each tile is complete "
                   f"({moved} statements in the body at {', '.join(where)}): {hoisted['buffer'].upper()} peak "
                   f"{_kib(hoisted['peak_bytes_per_partition_before'])} -> "
                   f"{_kib(hoisted['peak_bytes_per_partition_after'])} per partition")
    if sunk:
        n = len(sunk["tensors"])
        out.append(f"moved {n} allocation{'s' if n > 1 else ''} down to the first use of {'their' if n > 1 else 'its'} "
                   f"tensor{'s' if n > 1 else ''}, so that tiles made ahead of the loops that use them share bytes: "
                   f"{sunk['buffer'].upper()} peak {_kib(sunk['peak_bytes_per_partition_before'])} -> "
                   f"{_kib(sunk['peak_bytes_per_partition_after'])} per partition")
    if in_place:
        pairs = "; ".join(f"{y} over {x}" for x, y in in_place["pairs"])
        out.append(f"computed {len(in_place['pairs'])} element-wise result{'s' if len(in_place['pairs']) > 1 else ''} "
                   f"in place of an input that dies there ({pairs}): {in_place['buffer'].upper()} peak "
                   f"{_kib(in_place['peak_bytes_per_partition_before'])} -> "
                   f"{_kib(in_place['peak_bytes_per_partition_after'])} per partition")
    if shortened:
        where = sorted({b["loc"] or "the kernel body" for b in shortened["blocks"]})
        moved = sum(b["moved"] for b in shortened["blocks"])
        out.append(f"shortened live ranges: reordered {moved} independent statements in the body at "
                   f"{', '.join(where)}; {shortened['buffer'].upper()} peak "
                   f"{_kib(shortened['peak_bytes_per_partition_before'])} -> "
                   f"{_kib(shortened['peak_bytes_per_partition_after'])} per partition, loads issued "
                   f"{shortened['prefetch_window']} steps ahead")
    groups: dict[tuple, list] = {}
    for s in spills:
        groups.setdefault((s["from"], s["to"], s.get("how", "spill"), s["loc"]), []).append(s)
    for (src, dst, how, loc), group in groups.items():
        size = sum(s["bytes_per_partition"] for s in group)
        traffic = sum(s["estimated_traffic_bytes"] for s in group)
        what = group[0]["tensor"] if len(group) == 1 else f"{len(group)} tiles made at {loc}"
        verb = "reloaded from the kernel's input in HBM at each use" if how == "reload" else f"spilled to {dst.upper()}"
        moved = "DMA" if dst == "hbm" else "copied between PSUM and SBUF"
        out.append(f"{what} ({_kib(size)} per partition) {verb}: {traffic / 1e6:.1f} MB more {moved}")
    return out


def _peak_point(items) -> tuple[int, int]:
    """(the first point where the most bytes are live, how many), of (name, bytes, start, end) items."""
    events = sorted([(s, _align(size)) for _, size, s, _ in items] + [(e + 1, -_align(size)) for _, size, _, e in items])
    live = most = 0
    at = 0
    for point, delta in events:
        live += delta
        if live > most:
            most, at = live, point
    return at, most


def _spill_some(kernel, buffer, capacity, failed, items, numbering, decls):
    """Evict the cheapest tensors live where the most bytes are live (where `failed`
    did not fit, if the peak is no higher there), as many as the bytes live there
    exceed the capacity by (at least one), so that many small tiles over capacity
    take one round, not one round each."""
    start, end = numbering.live_range(failed)
    at, most = _peak_point(items)
    if most > capacity:
        # evict where the pressure is highest, not where placement first failed: a tile freed at the
        # first failure may miss the peak, and the next round fails a little further on (bwmm_shard_on_I
        # at I 6144: 64 rounds of one 2 KiB tile each, 64 bytes over each time, the peak unchanged)
        start = end = at
    offsets = {a.scalar.tensor for s in kernel.body.walk() if isinstance(s, Op)
               for a in s.outs + s.ins if isinstance(a, Access) and a.scalar is not None and a.scalar.tensor}
    offsets |= {a.vector.tensor for s in kernel.body.walk() if isinstance(s, Op)  # gather / scatter indices
                for a in s.outs + s.ins if isinstance(a, Access) and a.vector is not None}
    excess = sum(_align(size) for _, size, s, e in items if s <= start <= e) - capacity
    live = [(name, size, s <= start <= e) for name, size, s, e in items
            if s <= end and e >= start and decls[name].role != "spill-temp" and name not in offsets]
    # tensors live where it failed first (evicting them frees bytes there), then
    # the cheapest traffic per byte freed; spill temporaries and runtime-offset tiles stay
    costs = _spill_costs({n for n, _, _ in live}, kernel, decls)
    ranked = [(n, size) for _, _, n, size in sorted((not there, costs[n] / size, n, size) for n, size, there in live)]
    spills, freed = [], 0
    for victim, size in ranked:
        try:
            before = kernel
            reloaded = _reload(kernel, victim) if buffer == "sbuf" else None
            kernel = reloaded or (_sbuf_spill(kernel, victim) if buffer == "sbuf" else _psum_spill(kernel, victim))
        except (_CannotSpill, NkiccError):
            continue
        d = decls[victim]
        spills.append({"tensor": d.described(), "from": buffer, "to": "hbm" if buffer == "sbuf" else "sbuf",
                       "how": "reload" if reloaded else "spill",
                       "bytes_per_partition": partition_bytes(d), "shape": list(d.shape),
                       "estimated_traffic_bytes": _reload_cost(victim, before, decls) if reloaded else costs[victim],
                       "loc": str(d.loc) if d.loc else None})
        freed += _align(size)
        if freed >= excess:
            break
    if not spills:
        raise NkiccError("E400", f"{buffer.upper()} is over capacity where {decls[failed].described()} is allocated "
                                 "and no live tensor can be spilled", decls[failed].loc, "use smaller tiles")
    return kernel, spills


@hookimpl
def nkicc_passes():
    return [Pass("alloc", allocate, "SBUF/PSUM addresses from liveness on the rolled IR; spills when over capacity",
                 required=True, scope="kernel", version="3", after=("verify", "dce", "unroll", "global-schedule"))]
