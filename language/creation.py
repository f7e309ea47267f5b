"""Tensor creation: nl.ndarray, zeros, ones, full and friends."""
from __future__ import annotations

import enum

from ..ir import NkiccError
from .allocation import BUFFERS, PMAX, PSUM_BANK_BYTES, allocate, require_builder
from .tensor import Tensor
from .tracing import user_loc


class MemoryRegion(str, enum.Enum):
    """The reference's buffer constants; a str, so `MemoryRegion.sbuf == "sbuf"`."""
    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    __str__ = str.__str__
    __format__ = str.__format__


# nkicc's buffer names are plain strings (tensors report t.buffer as one); every
# function that takes a buffer accepts these, a MemoryRegion, or its name
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
private_hbm = "hbm"
shared_hbm = "shared_hbm"


def _buffer_of(buffer) -> str | None:
    """The canonical buffer of a buffer constant or a tensor; None if it is neither."""
    if hasattr(buffer, "decl"):
        return buffer.decl.buffer
    name = getattr(buffer, "name", buffer)
    return BUFFERS.get(name) if isinstance(name, str) else None


def is_hbm(buffer) -> bool:
    return _buffer_of(buffer) in ("hbm", "shared_hbm")


def is_on_chip(buffer) -> bool:
    return _buffer_of(buffer) in ("sbuf", "psum")


def is_psum(buffer) -> bool:
    return _buffer_of(buffer) == "psum"


def is_sbuf(buffer) -> bool:
    return _buffer_of(buffer) == "sbuf"


def new_tensor(shape, dtype, buffer="sbuf", name="", loc=None) -> Tensor:
    return Tensor(*allocate(shape, dtype, buffer, name, loc or user_loc(3)))


def ndarray(shape, dtype, buffer=sbuf, name="", address=None, **_hints) -> Tensor:
    """A new tensor, uninitialised: on chip (nl.sbuf, nl.psum; dimension 0 is the partition dimension, at
    most 128) or in HBM (nl.shared_hbm for the kernel's outputs). `name` defaults to the variable it is
    assigned to; `address` is ignored (the alloc pass places tiles)."""
    return new_tensor(shape, dtype, buffer, name, user_loc(2))


def _filled(shape, dtype, buffer, name, value, loc) -> Tensor:
    t = new_tensor(shape, dtype, buffer, name, loc)
    if t.buffer in ("sbuf", "psum"):
        require_builder("memset").emit("memset", [t.access], [], {"value": value}, loc)
    else:
        raise NkiccError("E120", f"nl.zeros/ones/full on {t.buffer} is not supported", loc,
                         "fill an SBUF tile and store it")
    return t


def zeros(shape, dtype, buffer=sbuf, name="", **_hints) -> Tensor:
    """A new on-chip tile filled with 0."""
    return _filled(shape, dtype, buffer, name, 0.0, user_loc(2))


def ones(shape, dtype, buffer=sbuf, name="", **_hints) -> Tensor:
    """A new on-chip tile filled with 1."""
    return _filled(shape, dtype, buffer, name, 1.0, user_loc(2))


def full(shape, fill_value, dtype, buffer=sbuf, name="", **_hints) -> Tensor:
    """A new on-chip tile filled with the number `fill_value`."""
    loc = user_loc(2)
    try:
        value = float(fill_value)
    except (TypeError, ValueError):
        raise NkiccError("E103", f"nl.full fill_value must be a number, got {fill_value!r}", loc) from None
    return _filled(shape, dtype, buffer, name, value, loc)


def zeros_like(x: Tensor, dtype=None, buffer=None, name="", **_hints) -> Tensor:
    """nl.zeros with the shape (and, unless given, dtype and buffer) of `x`."""
    return _filled(x.shape, dtype or x.dtype, buffer or x.buffer, name, 0.0, user_loc(2))


def ones_like(x: Tensor, dtype=None, buffer=None, name="", **_hints) -> Tensor:
    """nl.ones with the shape (and, unless given, dtype and buffer) of `x`."""
    return _filled(x.shape, dtype or x.dtype, buffer or x.buffer, name, 1.0, user_loc(2))


def empty_like(x: Tensor, dtype=None, buffer=None, name="", **_hints) -> Tensor:
    """nl.ndarray with the shape (and, unless given, dtype and buffer) of `x`."""
    return new_tensor(x.shape, dtype or x.dtype, buffer or x.buffer, name, user_loc(2))


def par_dim(size):
    """Marks the partition dimension of a shape, as NKI kernels write it: `(nl.par_dim(128), 512)`.
    Dimension 0 is always the partition dimension in nkicc, so this is the size itself."""
    return size


class _TileSize:
    """Hardware tile limits (`nl.tile_size.pmax`, ...). Traces do not depend on
    the target, so the SBUF sizes are those of trn2, nkicc's default target
    (plugins/targets.py; tests/language/test_nki_tensor.py keeps them equal)."""
    pmax = PMAX
    psum_fmax = PSUM_BANK_BYTES // 4  # deprecated name of psum_bank_fmax
    psum_bank_fmax = PSUM_BANK_BYTES // 4
    psum_bank_fmax_bytes = PSUM_BANK_BYTES
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 64  # nkicc's allocator aligns every tile to 64 bytes (plugins/alloc.py)
    sbuf_min_align = 64
    _SBUF_PARTITION_BYTES = 224 * 1024

    @property
    def psum_num_banks(self) -> int:
        return 8

    @property
    def sbuf_size_bytes(self) -> int:
        return self._SBUF_PARTITION_BYTES * PMAX

    @property
    def sbuf_fmax_bytes(self) -> int:
        return self._SBUF_PARTITION_BYTES

    @property
    def sbuf_fmax(self) -> int:
        return self._SBUF_PARTITION_BYTES // 4

    @property
    def total_available_sbuf_size(self) -> int:
        return self._SBUF_PARTITION_BYTES  # deprecated: per partition, as sbuf_fmax_bytes

    def __repr__(self) -> str:
        return "nl.tile_size"


tile_size = _TileSize()
