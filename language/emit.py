"""The nisa functions: each made from its instruction's one definition
(nkicc.ir.ops), which gives the signature, the docstring and the trace rule.

This module adds what tracing needs: the kernel's source line, the current
builder, and the checks every instruction shares (tile overflow, engine
free-size limits). nkicc.isa and nki.collectives export the functions; nl
operations, registers and runtime loops (ops.py, control.py) emit through
them too, which is why they are made here, below all of those.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect

from ..ir import Access, Affine, NkiccError, ops
from ..ir.nodes import UNRESOLVED_GROUP
from ..ir.ops import alu
from ..ir.ops.checks import FREE_MAX, distinct_free
from ..ir.target import TARGET_OF_GENERATION
from ..ir.ops.enums import nc_version
from .allocation import require_builder
from .instruction import NkiInstruction, NkiValidationError, handle_of
from .tensor import Tensor
from .tracing import DEFAULT_GENERATION, current_builder, user_loc


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the target the kernel is traced for
    (trn1: gen2, trn2: gen3, trn3: gen4)."""
    builder = current_builder()
    return nc_version(builder.nc_version if builder is not None else DEFAULT_GENERATION)


@functools.cache
def function(opcode: str):
    """The public function of instruction `opcode` (`nisa.<opcode>`, or
    `nki.collectives.<opcode>`): one per instruction, whoever asks."""
    return _function(ops.get(opcode))


def emit_internal(opcode: str, *args, loc=None) -> None:
    """Emit an instruction the tracer itself makes (not a public nisa name)."""
    d = ops.get(opcode)
    _emit(d, d.trace(*args), loc)


def _free_limits(opcode: str, tensors, loc) -> None:
    """Engine free-size limits: 64 Ki distinct elements per partition from SBUF, 4 Ki from PSUM
    (a broadcast view re-reads its elements: the library reads a [n, 1] PSUM mean broadcast
    over 8 Ki columns)."""
    for t in tensors:
        limit = FREE_MAX.get(t.buffer)
        n = distinct_free(t) if limit is not None else 0
        if limit is not None and n > limit:
            raise NkiValidationError("E134", f"{opcode} accesses {n} elements per partition of {t.shown} in "
                                     f"{t.buffer}; one instruction handles at most {limit}", loc,
                             f"split the free dimension into pieces of at most {limit} elements")


def _emit(d: ops.OpDef, emit: ops.Emit, loc) -> NkiInstruction:
    b = require_builder(f"nisa.{d.name}")
    tensors_in = [i for i in emit.ins if isinstance(i, Tensor)]
    tensors_out = [o for o in emit.outs if isinstance(o, Tensor)]
    if d.free_limited:
        _free_limits(d.name, tensors_out + tensors_in, loc)
    for t in tensors_out + tensors_in:
        if t.unusable is not None:  # an .ap() view past its tensor, made at t.unusable.loc
            made = f" (the view made at line {t.unusable.loc.line})" if t.unusable.loc else ""
            raise NkiccError("E101", f"{d.name}: {t.unusable.message}{made}", loc, t.unusable.hint)
    for o in tensors_out:
        if o.access.vector_group and o.buffer == "psum":
            raise NkiccError("E160", f"{d.name}: writing an indirect view of a PSUM tile is not supported", loc,
                             "scatter into an SBUF tile, then copy it to PSUM")
        if o.overflow:
            raise NkiccError("E101", f"{d.name} writes past the end of a tile: {o.overflow}", loc,
                             "check the slice bounds and the loop trip counts")
    for i in tensors_in:
        if i.overflow:
            b.warn("W101", f"{d.name} reads past the end of a tile, values there are undefined: {i.overflow}", loc)
    op = b.emit(d.name, [_access(b, o, d, loc) for o in emit.outs], [_access(b, i, d, loc) for i in emit.ins],
                dict(emit.attrs), loc)
    return handle_of(b, op)


def _access(b, x, d: ops.OpDef, loc):
    if isinstance(x, Tensor):
        a = x.access
        if a.vector_group == UNRESOLVED_GROUP:
            # tensor indirection: the index groups follow the engine that reads the view
            if d.engine == "dma" or d.collective is not None:
                raise NkiccError("E160", f"{d.name} cannot take an indirect view (NkiTensor.indirect); compute "
                                         "instructions do", loc, "gather HBM rows with .vector_select")
            return dataclasses.replace(a, vector_group=32 if d.engine == "pe" else 16)
        return a
    if isinstance(x, ops.StateRef):
        s = x.state
        decl = b.state_tensor(s.name, (s.partitions, s.width), s.dtype)
        return Access(decl.name, Affine(), ((s.width, x.count), (1, s.width)))
    return x


def _function(d: ops.OpDef):
    @functools.wraps(d.trace)
    def instruction(*args, **kwargs):
        loc = user_loc(2)
        try:
            ops.require_generation(int(get_nc_version()), d.since, f"{_module_of(d)}.{d.name}")
            emit = d.trace(*args, **kwargs)
            _alu_generation(emit)
        except NkiValidationError as e:
            e.loc = e.loc or loc
            raise
        except NkiccError as e:  # a hardware rule: catchable as nisa.NkiValidationError
            raise NkiValidationError(e.code, e.message, e.loc or loc, e.hint) from None
        except TypeError as e:  # a wrong argument list: the kernel's mistake, at its line
            if e.__traceback__ is not None and e.__traceback__.tb_next is None:
                raise NkiccError("E103", f"nisa.{d.name}: {e}", loc, f"see `nkicc explain E103`; "
                                 f"the signature is {d.name}{inspect.signature(d.trace)}") from None
            raise
        return _emit(d, emit, loc)
    instruction.__module__ = "nkicc.isa"  # where kernels find it (nki.collectives' too, as before)
    instruction.__qualname__ = d.name
    if d.since > 2:
        instruction.__doc__ = f"NeuronCore-v{d.since} ({TARGET_OF_GENERATION[d.since]}) and newer. {d.doc}"
    return instruction


def _module_of(d: ops.OpDef) -> str:
    return "nki.collectives" if d.module == "collectives" else "nisa"


def _alu_generation(emit: ops.Emit) -> None:
    """An arithmetic operator some generations lack (nl.abs_max), named in any attribute."""
    have = int(get_nc_version())
    for value in emit.attrs.values():
        for name in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(name, str) and alu.SINCE.get(name, 2) > have:
                ops.require_generation(have, alu.SINCE[name], f"nl.{name}")
