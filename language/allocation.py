"""A new tensor's storage: the buffer names, the shape, the partition and PSUM
limits, and the trace it is made in.

Below tensor.py, so that the reference's constructor (`NkiTensor(shape,
dtype, buffer=...)`) and the nl creation functions (creation.py) allocate
through the same checks."""
from __future__ import annotations

import operator

from ..ir import NkiccError, TensorDecl
from . import dtypes
from .naming import assigned_name
from .tracing import Builder, SymInt, current_builder, user_frame, user_loc

# every function that takes a buffer accepts these names, a MemoryRegion, or a tensor's buffer
BUFFERS = {"sbuf": "sbuf", "psum": "psum", "hbm": "hbm", "private_hbm": "hbm", "shared_hbm": "shared_hbm"}

PMAX = 128
PSUM_BANK_BYTES = 2048
PSUM_BANKS_V4 = 8


def require_builder(what: str) -> Builder:
    b = current_builder()
    if b is None:
        raise NkiccError("E160", f"{what} can only be called inside a kernel that nkicc traces", user_loc(3),
                         "decorate the kernel with @nki.jit / @nkicc.jit and call it")
    return b


def buffer_name(buffer, loc) -> str:
    name = getattr(buffer, "name", buffer)
    if not isinstance(name, str) or name not in BUFFERS:
        raise NkiccError("E160", f"unknown buffer {buffer!r}", loc, "use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm")
    return BUFFERS[name]


def concrete_shape(shape, loc) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    given = shape
    try:
        shape = None if isinstance(shape, str) else tuple(shape)
    except TypeError:
        shape = None
    if not shape:
        raise NkiccError("E103", f"a tensor shape is a non-empty tuple of ints, got {given!r}", loc)
    out = []
    for d in shape:
        if isinstance(d, SymInt):
            d = d.builder.constant_size(d.expr, f"tensor shape {tuple(str(x) for x in shape)}",
                                        "allocate the largest tile and slice it")
        try:
            d = operator.index(d)
        except TypeError:
            raise NkiccError("E103", f"shape entries must be ints, got {d!r}", loc) from None
        if d <= 0:
            raise NkiccError("E103", f"shape {tuple(shape)} has a non-positive dimension", loc)
        out.append(d)
    return tuple(out)


def allocate(shape, dtype, buffer, name, loc) -> tuple[Builder, TensorDecl]:
    """A new tensor of the current trace, checked against the partition count
    and the PSUM bank size: (the builder, its declaration)."""
    b = require_builder("creating a tensor")
    buf = buffer_name(buffer, loc)
    shape = concrete_shape(shape, loc)
    dt = dtypes.dtype_name(dtype)
    if buf in ("sbuf", "psum"):
        if shape[0] > PMAX:
            raise NkiccError("E110", f"on-chip tensor of shape {list(shape)} spans {shape[0]} partitions; at most {PMAX}",
                             loc, "dimension 0 is the partition dimension: tile it by 128")
        free_bytes = dtypes.itemsize(dt)
        for d in shape[1:]:
            free_bytes *= d
        # NeuronCore-v4 matmuls write up to the whole PSUM (8 banks) at once
        banks = PSUM_BANKS_V4 if b.nc_version >= 4 else 1
        if buf == "psum" and free_bytes > banks * PSUM_BANK_BYTES:
            raise NkiccError("E133", f"PSUM tile of shape {list(shape)} needs {free_bytes} bytes per partition; "
                                     f"{'a bank holds' if banks == 1 else 'the 8 banks hold'} "
                                     f"{banks * PSUM_BANK_BYTES}", loc,
                             f"at most {banks * 512} fp32 values per partition in one PSUM tile")
    # the user's name for it: name=, else the variable the kernel assigns it to
    label = str(name) if name else assigned_name(user_frame(2))
    return b, b.new_tensor(shape, dt, buf, label, "local", loc)
