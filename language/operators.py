"""Python operators on tiles: `a + b` is `nl.add(a, b)`, `a < 3.0` is
`nl.less(a, 3.0)`, `-a` is `nl.negative(a)`, ... (a tile or a number on
either side; the result is a new SBUF tile, as the nl function returns).
`acc += x` updates `acc` in place (one tensor_tensor / tensor_scalar writing
`acc`), so an accumulator keeps its storage across the iterations of a
rolled loop, where rebinding a Python name would not.

`==` / `!=` against anything but a tile or a number (`t != None`, as
kernels check optional arguments) keep Python's identity comparison, and
tensors stay hashable by identity.

The operators are nl operations, and nl operations make tensors, so they are
added to NkiTensor from here, above both (`_install`, when nkicc.language is
imported), rather than inherited by it from below.
"""
from __future__ import annotations

from numbers import Number

from .. import isa
from ..ir import NkiccError
from . import ops
from .ops import _broadcast_shape
from .tensor import NkiTensor, broadcast_view
from .tracing import SymInt, user_loc

# Python operator -> the nl function (language/ops.py) it means
BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "pow": "power", "mod": "mod",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift",
    "rshift": "right_shift",
}
COMPARE = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal",
           "ne": "not_equal"}


def _operand(x) -> bool:
    return isinstance(x, (NkiTensor, Number, SymInt))


def _nl(name: str):
    return getattr(ops, name)


def _check(t, sym: str) -> None:
    if t.decl.buffer == "reg":
        raise NkiccError("E150", f"`{sym}` on register {t.name}: its value is known only when the kernel runs",
                         user_loc(3), "compute on registers with nisa.register_* instructions")


def _partition_first(a, b):
    """NKI 0.1 (a kernel whose builder has its `t[k] = v`) lines tiles up by the partition
    dimension first: (P,) meets (P, F) as (P, 1). Later versions broadcast as numpy does."""
    if a.builder.setitem is None or not isinstance(b, NkiTensor) or a.ndim == b.ndim or not (a.ndim and b.ndim):
        return a, b
    while a.ndim < b.ndim:
        a = a.expand_dim(a.ndim)
    while b.ndim < a.ndim:
        b = b.expand_dim(b.ndim)
    return a, b


def _binary(name: str, sym: str):
    fn_name = BINARY[name]

    def op(self, other):
        if not _operand(other):
            return NotImplemented
        _check(self, sym)
        return _nl(fn_name)(*_partition_first(self, other))

    def rop(self, other):
        if not _operand(other):
            return NotImplemented
        _check(self, sym)
        b, a = _partition_first(self, other)
        return _nl(fn_name)(a, b)

    def iop(self, other):
        into = getattr(other, "accumulate_into", None)  # `psum += nc_matmul(...)` of NKI 0.1 (legacy.py)
        if into is not None and fn_name == "add":
            return into(self)
        if not _operand(other):
            return NotImplemented
        _check(self, sym + "=")
        _in_place(self, fn_name, other, sym + "=")
        return self

    return op, rop, iop


def _in_place(acc, fn_name: str, other, sym: str) -> None:
    loc = user_loc(3)
    if not acc.decl.on_chip:
        raise NkiccError("E120", f"`{sym}` updates {acc.shown} in place, which lives in {acc.buffer}", loc,
                         "accumulate into an SBUF or PSUM tile (nl.zeros(..., buffer=nl.sbuf))")
    if isinstance(other, NkiTensor):
        if _broadcast_shape(acc, other, loc) != tuple(acc.shape):
            raise NkiccError("E140", f"`{sym}`: {list(other.shape)} does not broadcast to {acc.shown}'s shape "
                                     f"{list(acc.shape)}", loc)
        isa.tensor_tensor(acc, acc, broadcast_view(other, tuple(acc.shape), loc), fn_name)
    else:
        isa.tensor_scalar(acc, acc, fn_name, other)


def _compare(name: str):
    fn_name = COMPARE[name]

    def op(self, other):
        if not _operand(other):
            return NotImplemented  # t == None, t != "x": Python's own comparison
        _check(self, name)
        return _nl(fn_name)(self, other)

    return op


class TileOperators:
    """The operators of NkiTensor (see the module docstring)."""
    __slots__ = ()

    __add__, __radd__, __iadd__ = _binary("add", "+")
    __sub__, __rsub__, __isub__ = _binary("sub", "-")
    __mul__, __rmul__, __imul__ = _binary("mul", "*")
    __truediv__, __rtruediv__, __itruediv__ = _binary("truediv", "/")
    __pow__, __rpow__, __ipow__ = _binary("pow", "**")
    __mod__, __rmod__, __imod__ = _binary("mod", "%")
    __and__, __rand__, __iand__ = _binary("and", "&")
    __or__, __ror__, __ior__ = _binary("or", "|")
    __xor__, __rxor__, __ixor__ = _binary("xor", "^")
    __lshift__, __rlshift__, __ilshift__ = _binary("lshift", "<<")
    __rshift__, __rrshift__, __irshift__ = _binary("rshift", ">>")

    __lt__ = _compare("lt")
    __le__ = _compare("le")
    __gt__ = _compare("gt")
    __ge__ = _compare("ge")
    __eq__ = _compare("eq")
    __ne__ = _compare("ne")
    __hash__ = object.__hash__  # by identity, as before `==` meant anything

    def __neg__(self):
        _check(self, "-")
        return _nl("negative")(self)

    def __pos__(self):
        return self

    def __abs__(self):
        _check(self, "abs")
        return _nl("abs")(self)

    def __invert__(self):
        _check(self, "~")
        return _nl("invert")(self)


def _install(cls: type) -> None:
    for name, member in vars(TileOperators).items():
        if name not in ("__module__", "__qualname__", "__doc__", "__slots__"):
            setattr(cls, name, member)


_install(NkiTensor)
