"""nkicc.isa (`nisa`): instructions, destination first, nothing returned."""
from __future__ import annotations

import numpy as np

from ..ir import Access, Const, NkiccError
from ..language import dtypes
from ..language.opnames import BINARY, REDUCE, UNARY, op_name
from ..language.tensor import Tensor, require_builder, unsupported_name
from ..language.tracing import SymInt, user_loc

__all__ = [
    "dma_copy", "tensor_copy", "memset", "nc_matmul", "nc_transpose", "tensor_tensor",
    "tensor_scalar", "activation", "tensor_reduce", "iota", "select", "tensor_tensor_scan",
]

PMAX = 128
# elements per partition one compute instruction may read or write
FREE_MAX = {"sbuf": 64 * 1024, "psum": 4 * 1024}

# engine hints kernels pass as engine=...; nkicc's schedule pass picks engines itself
tensor_engine = "pe"
vector_engine = "dve"
scalar_engine = "act"
gpsimd_engine = "pool"
unknown_engine = None


def _tensor(x, what: str, loc) -> Tensor:
    if not isinstance(x, Tensor):
        raise NkiccError("E103", f"{what} must be a tensor, got {type(x).__name__}", loc)
    return x


def _on_chip(t: Tensor, what: str, loc) -> None:
    if not t.decl.on_chip:
        raise NkiccError("E120", f"{what} must be on SBUF or PSUM, but {t.shown} is in {t.buffer}", loc,
                         "nl.load it into SBUF first")
    if t.shape and t.shape[0] > PMAX:
        raise NkiccError("E110", f"{what} spans {t.shape[0]} partitions; at most {PMAX}", loc,
                         "tile the partition dimension by 128")


def _free(t: Tensor) -> int:
    n = 1
    for d in t.shape[1:]:
        n *= d
    return n


def _same_layout(dst: Tensor, src: Tensor, what: str, loc) -> None:
    """Element-wise instructions map partition to partition, free to free."""
    if (dst.shape[:1], _free(dst)) != (src.shape[:1], _free(src)):
        raise NkiccError("E140", f"{what}: shapes {list(dst.shape)} and {list(src.shape)} do not match", loc,
                         "give both the same partition count and the same number of free elements")


def _free_limits(opcode: str, tensors, loc) -> None:
    """Engine free-size limits: 64 Ki elements per partition from SBUF, 4 Ki from PSUM."""
    for t in tensors:
        limit = FREE_MAX.get(t.buffer)
        if limit is not None and _free(t) > limit:
            raise NkiccError("E134", f"{opcode} accesses {_free(t)} elements per partition of {t.shown} in "
                                     f"{t.buffer}; one instruction handles at most {limit}", loc,
                             f"split the free dimension into pieces of at most {limit} elements")


def _emit(opcode: str, outs, ins, attrs=None, loc=None) -> None:
    b = require_builder(f"nisa.{opcode}")
    if opcode != "dma_copy":
        _free_limits(opcode, list(outs) + [i for i in ins if isinstance(i, Tensor)], loc)
    for o in outs:
        if o.overflow:
            raise NkiccError("E101", f"{opcode} writes past the end of a tile: {o.overflow}", loc,
                             "check the slice bounds and the loop trip counts")
    for i in ins:
        if isinstance(i, Tensor) and i.overflow:
            b.warn("W101", f"{opcode} reads past the end of a tile, values there are undefined: {i.overflow}", loc)
    b.emit(opcode, [o.access for o in outs],
           [i.access if isinstance(i, Tensor) else i for i in ins], attrs or {}, loc)


def dma_copy(dst, src, dst_rmw_op=None, oob_mode=None, dge_mode=None, name=None, **_hw_hints) -> None:
    """Copy between HBM and SBUF (or HBM to HBM); casts when dtypes differ."""
    loc = user_loc(2)
    dst, src = _tensor(dst, "dma_copy dst", loc), _tensor(src, "dma_copy src", loc)
    if "psum" in (dst.buffer, src.buffer):
        raise NkiccError("E120", "DMA cannot access PSUM", loc, "copy PSUM to SBUF with nisa.tensor_copy first")
    if dst.access.count != src.access.count:
        raise NkiccError("E140", f"dma_copy moves {src.access.count} elements into {dst.access.count}", loc,
                         f"make the shapes match: dst {list(dst.shape)}, src {list(src.shape)}")
    if dst_rmw_op is not None:
        raise NkiccError("E160", "dma_copy(dst_rmw_op=) is not supported yet", loc)
    # a DMA between different dtypes converts through fp32
    attrs = {"cast": "float32"} if dst.decl.dtype != src.decl.dtype else {}
    _emit("dma_copy", [dst], [src], attrs, loc)


def tensor_copy(dst, src, engine=None, name=None, dtype=None, **_hw_hints) -> None:
    loc = user_loc(2)
    dst, src = _tensor(dst, "tensor_copy dst", loc), _tensor(src, "tensor_copy src", loc)
    _on_chip(dst, "tensor_copy dst", loc)
    _on_chip(src, "tensor_copy src", loc)
    _same_layout(dst, src, "tensor_copy", loc)
    _emit("tensor_copy", [dst], [src], {}, loc)


def memset(dst, value, engine=None, name=None, **_hw_hints) -> None:
    loc = user_loc(2)
    dst = _tensor(dst, "memset dst", loc)
    _on_chip(dst, "memset dst", loc)
    _emit("memset", [dst], [], {"value": _scalar(value, "memset value", loc)}, loc)


def _scalar(value, what: str, loc):
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, SymInt):
        return int(value)  # a loop index as a value: that loop is traced concretely
    if isinstance(value, np.generic):
        return value.item()
    raise NkiccError("E103", f"{what} must be a number, got {type(value).__name__}", loc)


_MATMUL_FP32 = ("float32", "tfloat32")
_MATMUL_DTYPES = ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32")


def nc_matmul(dst, stationary, moving, accumulate=None, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=None, tile_size=None, perf_mode=None, name=None, **_hw_hints) -> None:
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor Engine."""
    loc = user_loc(2)
    dst = _tensor(dst, "nc_matmul dst", loc)
    st = _tensor(stationary, "nc_matmul stationary", loc)
    mv = _tensor(moving, "nc_matmul moving", loc)
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.buffer != "sbuf":
            raise NkiccError("E131", f"nc_matmul {what} must be in SBUF, {t.shown} is in {t.buffer}", loc,
                             "copy it to SBUF with nisa.tensor_copy")
    if dst.buffer != "psum":
        raise NkiccError("E131", f"nc_matmul dst must be in PSUM, {dst.shown} is in {dst.buffer}", loc,
                         "allocate the result with buffer=nl.psum")
    k, m, k2, n = st.shape[0], _free(st), mv.shape[0], _free(mv)
    if k != k2:
        raise NkiccError("E130", f"nc_matmul contraction mismatch: stationary has {k} partitions, moving {k2}", loc,
                         "both operands carry the contraction (K) dimension on partitions")
    if k > 128 or m > 128 or n > 512:
        raise NkiccError("E130", f"nc_matmul tile too large: K={k} (<=128), M={m} (<=128), N={n} (<=512)", loc,
                         "tile the matmul: K and M by 128, N by 512")
    if dst.shape[0] != m or _free(dst) != n:
        raise NkiccError("E130", f"nc_matmul dst has shape {list(dst.shape)}, expected [{m}, {n}]", loc,
                         "dst is [M, N] for stationary [K, M] and moving [K, N]")
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.decl.dtype not in _MATMUL_DTYPES:
            raise NkiccError("E132", f"nc_matmul {what} is {t.decl.dtype}; the Tensor Engine multiplies "
                                     f"{', '.join(_MATMUL_DTYPES)}", loc, "cast it with nisa.tensor_copy first")
    if (st.decl.dtype in _MATMUL_FP32) != (mv.decl.dtype in _MATMUL_FP32):
        raise NkiccError("E132", f"nc_matmul mixes {st.decl.dtype} and {mv.decl.dtype}", loc,
                         "an fp32/tfloat32 operand needs an fp32/tfloat32 partner")
    if accumulate not in (None, True, False):
        raise NkiccError("E103", "nc_matmul accumulate must be None, True or False", loc)
    _emit("nc_matmul", [dst], [st, mv], {"accumulate": accumulate}, loc)


def nc_transpose(dst, data, engine=None, name=None, **_hw_hints) -> None:
    loc = user_loc(2)
    dst, data = _tensor(dst, "nc_transpose dst", loc), _tensor(data, "nc_transpose data", loc)
    _on_chip(data, "nc_transpose data", loc)
    _on_chip(dst, "nc_transpose dst", loc)
    p, f = data.shape[0], _free(data)
    if dst.shape[0] != f or _free(dst) != p:
        raise NkiccError("E140", f"nc_transpose of [{p}, {f}] needs dst [{f}, {p}], got {list(dst.shape)}", loc)
    if f > 128:
        raise NkiccError("E130", f"nc_transpose of {f} free elements; at most 128", loc)
    if dst.buffer != "psum" and (p > 32 or f > 32):
        raise NkiccError("E130", f"nc_transpose of [{p}, {f}] into {dst.buffer} runs on the Vector Engine, "
                                 f"which transposes at most 32 x 32", loc,
                         "transpose on the Tensor Engine into a PSUM tile, or in 32 x 32 blocks")
    _emit("nc_transpose", [dst], [data], {}, loc)


def tensor_tensor(dst, data1, data2, op, engine=None, name=None, **_hw_hints) -> None:
    loc = user_loc(2)
    dst = _tensor(dst, "tensor_tensor dst", loc)
    a, b = _tensor(data1, "tensor_tensor data1", loc), _tensor(data2, "tensor_tensor data2", loc)
    for t, what in ((dst, "dst"), (a, "data1"), (b, "data2")):
        _on_chip(t, f"tensor_tensor {what}", loc)
    if a.buffer == "psum" and b.buffer == "psum":
        raise NkiccError("E120", "tensor_tensor cannot read both inputs from PSUM", loc,
                         "copy one of them to SBUF first")
    _same_layout(dst, a, "tensor_tensor", loc)
    _same_layout(dst, b, "tensor_tensor", loc)
    _emit("tensor_tensor", [dst], [a, b], {"op": op_name(op, BINARY, "tensor_tensor", loc)}, loc)


def _operand(value, dst: Tensor, what: str, loc):
    if isinstance(value, Tensor):
        _on_chip(value, what, loc)
        if value.shape[0] != dst.shape[0] or _free(value) != 1:
            raise NkiccError("E140", f"{what} tile must be [{dst.shape[0]}, 1], got {list(value.shape)}", loc,
                             "use one value per partition")
        return value
    return Const(_scalar(value, what, loc))


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=None, name=None, dtype=None, **_hw_hints) -> None:
    """dst = (data op0 operand0) op1 operand1; operands are numbers or [P, 1] tiles."""
    loc = user_loc(2)
    dst, data = _tensor(dst, "tensor_scalar dst", loc), _tensor(data, "tensor_scalar data", loc)
    _on_chip(dst, "tensor_scalar dst", loc)
    _on_chip(data, "tensor_scalar data", loc)
    _same_layout(dst, data, "tensor_scalar", loc)
    ins = [data, _operand(operand0, dst, "operand0", loc)]
    attrs = {"op0": op_name(op0, BINARY, "tensor_scalar", loc), "reverse0": bool(reverse0)}
    if op1 is not None:
        ins.append(_operand(operand1, dst, "operand1", loc))
        attrs.update(op1=op_name(op1, BINARY, "tensor_scalar", loc), reverse1=bool(reverse1))
    _emit("tensor_scalar", [dst], ins, attrs, loc)


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None,
               name=None, **_hw_hints) -> None:
    """dst = op(data * scale + bias); optionally add-reduce along the free axis into reduce_res."""
    loc = user_loc(2)
    dst, data = _tensor(dst, "activation dst", loc), _tensor(data, "activation data", loc)
    _on_chip(dst, "activation dst", loc)
    _on_chip(data, "activation data", loc)
    _same_layout(dst, data, "activation", loc)
    ins: list = [data, _operand(scale, dst, "scale", loc)]
    if bias is not None:
        ins.append(_operand(bias, dst, "bias", loc))
    outs = [dst]
    attrs = {"op": op_name(op, UNARY, "activation", loc), "bias": bias is not None}
    if reduce_res is not None:
        reduce_res = _tensor(reduce_res, "activation reduce_res", loc)
        _on_chip(reduce_res, "activation reduce_res", loc)
        if reduce_res.shape[0] != dst.shape[0] or _free(reduce_res) != 1:
            raise NkiccError("E140", f"reduce_res must be [{dst.shape[0]}, 1], got {list(reduce_res.shape)}", loc)
        attrs["reduce_op"] = op_name(reduce_op if reduce_op is not None else "add", REDUCE, "activation reduce", loc)
        outs.append(reduce_res)
    _emit("activation", outs, ins, attrs, loc)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None, **_hw_hints) -> None:
    loc = user_loc(2)
    dst, data = _tensor(dst, "tensor_reduce dst", loc), _tensor(data, "tensor_reduce data", loc)
    _on_chip(dst, "tensor_reduce dst", loc)
    _on_chip(data, "tensor_reduce data", loc)
    axes = normalize_axes(axis, len(data.shape), loc)
    kept = [d for i, d in enumerate(data.shape) if i not in axes]
    expect = 1
    for d in kept[1:]:
        expect *= d
    if dst.shape[0] != data.shape[0] or _free(dst) != expect:
        raise NkiccError("E140", f"tensor_reduce over axes {list(axes)} of {list(data.shape)} "
                                 f"gives {kept}, dst is {list(dst.shape)}", loc)
    _emit("tensor_reduce", [dst], [data],
          {"op": op_name(op, REDUCE, "tensor_reduce", loc), "axes": axes, "negate": bool(negate)}, loc)


def normalize_axes(axis, ndim: int, loc) -> tuple[int, ...]:
    try:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
    except TypeError:
        raise NkiccError("E103", f"axis must be an int or a list of ints, got {axis!r}", loc) from None
    out = []
    for a in axes:
        if not isinstance(a, int):
            raise NkiccError("E103", f"axis must be an int or a list of ints, got {axis!r}", loc)
        a = a + ndim if a < 0 else a
        if not 1 <= a < ndim:
            raise NkiccError("E103", f"axis {a} is not a free axis of a {ndim}-d tile", loc,
                             "reduce over free axes (1 .. ndim-1); the partition axis 0 cannot be reduced here")
        out.append(a)
    return tuple(sorted(set(out)))


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None, **_hw_hints) -> None:
    """dst[p, i...] = offset + p * channel_multiplier + sum(i_k * step_k), in int32."""
    loc = user_loc(2)
    dst = _tensor(dst, "iota dst", loc)
    _on_chip(dst, "iota dst", loc)
    try:
        pairs = tuple((int(s), int(n)) for s, n in pattern)
        offset, channel_multiplier = int(offset), int(channel_multiplier)
    except (TypeError, ValueError):
        raise NkiccError("E103", "iota takes a pattern of [step, num] pairs and integer offset and "
                                 "channel_multiplier", loc) from None
    count = 1
    for _, n in pairs:
        count *= n
    if count != _free(dst):
        raise NkiccError("E140", f"iota pattern covers {count} free elements, dst has {_free(dst)}", loc)
    _emit("iota", [dst], [], {"pattern": pairs, "offset": offset, "channel_multiplier": channel_multiplier}, loc)


def select(dst, predicate, on_true, on_false, name=None, **_hw_hints) -> None:
    """dst = on_true where predicate != 0 else on_false (element-wise)."""
    loc = user_loc(2)
    dst = _tensor(dst, "select dst", loc)
    ins = []
    for x, what in ((predicate, "predicate"), (on_true, "on_true"), (on_false, "on_false")):
        if isinstance(x, Tensor):
            _on_chip(x, f"select {what}", loc)
            _same_layout(dst, x, "select", loc)
            ins.append(x)
        else:
            ins.append(Const(_scalar(x, f"select {what}", loc)))
    _emit("select", [dst], ins, {}, loc)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, engine=None,
                       name=None, **_hw_hints) -> None:
    """A recurrence along the free axis (flattened), per partition:
    dst[:, 0] = (data0[:, 0] op0 initial) op1 data1[:, 0] and
    dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i]; `initial` is a
    number or a [P, 1] tile. reverse0/reverse1 swap the operands of op0/op1.
    The running value is kept in fp32; each step is also written to dst."""
    loc = user_loc(2)
    dst = _tensor(dst, "tensor_tensor_scan dst", loc)
    a = _tensor(data0, "tensor_tensor_scan data0", loc)
    b = _tensor(data1, "tensor_tensor_scan data1", loc)
    for t, what in ((dst, "dst"), (a, "data0"), (b, "data1")):
        _on_chip(t, f"tensor_tensor_scan {what}", loc)
    if a.buffer == "psum" and b.buffer == "psum":
        raise NkiccError("E120", "tensor_tensor_scan cannot read both inputs from PSUM", loc,
                         "copy one of them to SBUF first")
    _same_layout(dst, a, "tensor_tensor_scan", loc)
    _same_layout(dst, b, "tensor_tensor_scan", loc)
    attrs = {"op0": op_name(op0, BINARY, "tensor_tensor_scan", loc), "reverse0": bool(reverse0),
             "op1": op_name(op1, BINARY, "tensor_tensor_scan", loc), "reverse1": bool(reverse1)}
    _emit("tensor_tensor_scan", [dst], [a, b, _operand(initial, dst, "initial", loc)], attrs, loc)


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'nkicc.isa' has no attribute {name!r}")
    raise unsupported_name("nisa", name)
