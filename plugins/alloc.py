"""alloc: SBUF and PSUM addresses from liveness on the rolled IR, spilling when
the kernel needs more than the target has.

Liveness comes from loop structure, never from unrolling: statements are
numbered in program order, a loop spans the numbers of its body, and a tensor
allocated in a block lives from its allocation to its last use in that block
(a use inside a nested loop keeps it live to the end of that loop, all
iterations). Tensors whose live ranges overlap get disjoint bytes in every
partition; PSUM tiles never straddle a 2 KiB bank.

Over capacity, the allocator evicts the tensor whose eviction moves the
fewest bytes (uses x executions x view size): an SBUF tensor gets an HBM home
and DMA around each compute use (DMAs read the home directly); a PSUM tensor
gets an SBUF home, its matmuls write a small PSUM tile that is then added or
copied in. It repeats until everything fits, and reports every spill.
"""
from __future__ import annotations

import dataclasses
import itertools

from nkicc.ir import Access, Affine, Alloc, Block, Loop, NkiccError, Op, TensorDecl
from nkicc.ir.analysis import tensors_touched
from nkicc.ir.dtypes import itemsize
from nkicc.pass_api import Pass, hookimpl

ALIGN = 64
MAX_SPILLS = 64


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

def _place(items, capacity: int, bank: int | None):
    """First-fit over live ranges. items: (name, size, start, end). Returns
    (addresses, name that did not fit or None, peak bytes)."""
    addresses: dict[str, int] = {}
    active: list[tuple[int, int, int]] = []  # (end, address, size)
    peak = 0
    for name, size, start, end in sorted(items, key=lambda t: (t[2], -t[1])):
        active = [a for a in active if a[0] >= start]
        taken = sorted((addr, addr + sz) for _, addr, sz in active)
        addr = 0
        for lo, hi in taken:
            if bank is not None and addr % bank + size > bank:
                addr = (addr // bank + 1) * bank
            if addr + size <= lo:
                break
            addr = max(addr, _align(hi))
        if bank is not None and addr % bank + size > bank:
            addr = (addr // bank + 1) * bank
        if addr + size > capacity:
            return addresses, name, peak
        addresses[name] = addr
        active.append((end, addr, size))
        peak = max(peak, addr + size)
    return addresses, None, peak


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# --- spilling -------------------------------------------------------------------------------

def _executions(chain) -> int:
    n = 1
    for loop in chain:
        n *= loop.trip
    return n


def _spill_cost(name: str, kernel, numbering: _Numbering, decls) -> int:
    isz = itemsize(decls[name].dtype)
    cost = 0
    for op, chain in _ops_with_chain(kernel.body, ()):
        for a in op.outs + tuple(x for x in op.ins if isinstance(x, Access)):
            if a.tensor == name:
                cost += 2 * a.count * isz * _executions(chain)
    return cost


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

    def rewrite(block: Block) -> Block:
        out = []
        for s in block.stmts:
            if isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=rewrite(s.body)))
            elif isinstance(s, Alloc):
                out.append(s)  # the HBM home is (re)allocated where the tensor was
            elif name not in tensors_touched(s):
                out.append(s)
            elif s.opcode == "dma_copy":
                out.append(s)  # DMA reaches the HBM home directly
            elif s.opcode == "memset" and s.outs[0].tensor == name:
                out.extend(_memset_home(s, home, temps, counter))
            else:
                out.extend(_around(s, name, old.dtype, temps, counter))
        return Block(tuple(out))

    body = rewrite(kernel.body)
    tensors = tuple(home if t.name == name else t for t in kernel.tensors) + tuple(temps)
    return dataclasses.replace(kernel, body=body, tensors=tensors)


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
    if a.pattern != row_major(a.shape) or len(a.pattern) < 2:
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

    def rewrite(block: Block) -> Block:
        out = []
        for s in block.stmts:
            if isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=rewrite(s.body)))
            elif isinstance(s, Op) and s.opcode in ("nc_matmul", "nc_matmul_mx") and s.outs[0].tensor == name:
                acc = s.attr("accumulate")
                if acc is None:
                    if not seen_write[0]:
                        raise _CannotSpill()  # first-write-overwrites cannot be decided statically here
                    acc = True
                decl, full = _temp(name, s.outs[0], "float32", "psum", temps, counter)
                attrs = tuple((k, v) for k, v in s.attrs if k != "accumulate") + (("accumulate", False),)
                out.append(Alloc(decl.name))
                out.append(Op(s.opcode, (full,), s.ins, attrs, s.loc))
                if acc:
                    out.append(Op("tensor_tensor", (s.outs[0],), (s.outs[0], full), (("op", "add"),), s.loc))
                else:
                    out.append(Op("tensor_copy", (s.outs[0],), (full,), (), s.loc))
            else:
                if isinstance(s, Op) and any(a.tensor == name for a in s.outs):
                    full_cover = s.outs[0].count == decls[name].size
                    seen_write[0] = seen_write[0] or full_cover
                out.append(s)
        return Block(tuple(out))

    body = rewrite(kernel.body)
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
        addresses, failed, peak = _place(items, capacity[buffer], banks[buffer])
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


def allocate(kernel, ctx):
    target = ctx.target
    capacity = {"sbuf": target.sbuf_partition_bytes, "psum": target.psum_partition_bytes}
    banks = {"sbuf": None, "psum": target.psum_bank_bytes}
    spills = []
    for _ in range(MAX_SPILLS + 1):
        decls = kernel.tensor_map()
        numbering = _Numbering(kernel)
        placed, overflow, peaks = _place_all(kernel, numbering, decls, capacity, banks)
        if overflow is None:
            break
        buffer, failed, items = overflow
        kernel, spill = _spill_one(kernel, buffer, failed, items, numbering, decls)
        spills.append(spill)
    else:
        raise NkiccError("E400", f"the kernel does not fit on {target.name} even after {MAX_SPILLS} spills", None,
                         "tile it more finely")
    tensors = tuple(dataclasses.replace(t, address=placed[t.name]) if t.name in placed else t
                    for t in kernel.tensors)
    kernel = dataclasses.replace(kernel, tensors=tensors)
    sizes = sorted(((partition_bytes(t), t.described(), t.buffer) for t in tensors if t.on_chip), reverse=True)
    ctx.note("sbuf_peak_bytes_per_partition", peaks.get("sbuf", 0))
    ctx.note("psum_peak_bytes_per_partition", peaks.get("psum", 0))
    ctx.note("capacity_bytes_per_partition", capacity)
    ctx.note("largest_tensors", [{"tensor": n, "buffer": b, "bytes_per_partition": s} for s, n, b in sizes[:8]])
    ctx.note("spills", spills, show=bool(spills))
    ctx.note("memory", f"SBUF {peaks.get('sbuf', 0) / 1024:.1f} of {capacity['sbuf'] // 1024} KiB per partition "
                       f"at peak, PSUM {peaks.get('psum', 0) / 1024:.1f} of {capacity['psum'] // 1024} KiB"
                       + (f", after {len(spills)} spill{'s' if len(spills) > 1 else ''}" if spills else ""), show=True)
    return kernel


def _spill_one(kernel, buffer, failed, items, numbering, decls):
    """Evict the cheapest tensor live where `failed` did not fit."""
    start, end = numbering.live_range(failed)
    offsets = {a.scalar.tensor for s in kernel.body.walk() if isinstance(s, Op)
               for a in s.outs + s.ins if isinstance(a, Access) and a.scalar is not None and a.scalar.tensor}
    live = [(name, size) for name, size, s, e in items
            if s <= end and e >= start and decls[name].role != "spill-temp" and name not in offsets]
    # cheapest traffic per byte freed; spill temporaries and runtime-offset tiles stay
    ranked = [n for _, n in sorted((_spill_cost(n, kernel, numbering, decls) / size, n) for n, size in live)]
    for victim in ranked:
        try:
            new = _sbuf_spill(kernel, victim) if buffer == "sbuf" else _psum_spill(kernel, victim)
        except (_CannotSpill, NkiccError):
            continue
        d = decls[victim]
        return new, {"tensor": d.described(), "from": buffer, "to": "hbm" if buffer == "sbuf" else "sbuf",
                     "bytes_per_partition": partition_bytes(d), "shape": list(d.shape),
                     "estimated_traffic_bytes": _spill_cost(victim, kernel, numbering, decls),
                     "loc": str(d.loc) if d.loc else None}
    raise NkiccError("E400", f"{buffer.upper()} is over capacity where {decls[failed].described()} is allocated and no live tensor "
                             "can be spilled", decls[failed].loc, "use smaller tiles")


@hookimpl
def nkicc_passes():
    return [Pass("alloc", allocate, "SBUF/PSUM addresses from liveness on the rolled IR; spills when over capacity",
                 required=True, scope="kernel", after=("verify", "dce", "unroll", "global-schedule"))]
