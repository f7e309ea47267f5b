"""Exact JSON form of the IR: `to_json(node)` gives plain lists, dicts,
strings and numbers; `from_json(data)` gives back an equal node whose every
field has the same type. The cache stores this (never a pickle) and the
canonical hash is computed over it.

The encoding follows the dataclasses of `nkicc.ir.nodes` (and `Affine`), so a
field added to a node is carried without changes here:

    node            {"Op": [field values in declaration order]}
    tuple           [items]
    None, bool, int, str, finite float      themselves
    everything else tagged: {"float": "nan"}, {"list": [..]}, {"dict": [[k, v]..]},
                            {"np": "float32", "hex": "0000803f"} (numpy scalars)

A value of any other type raises Unserialisable: what cannot round-trip
exactly is never written.
"""
from __future__ import annotations

import dataclasses
import json
import math
import operator
from typing import Any

from . import nodes
from .affine import Affine

FORMAT = 1


class Unserialisable(TypeError):
    """A node or value that has no exact JSON form."""


def _node_classes() -> dict[str, type]:
    out = {"Affine": Affine}
    for name in dir(nodes):
        cls = getattr(nodes, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == nodes.__name__:
            out[cls.__name__] = cls
    return out


NODES: dict[str, type] = _node_classes()
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls) if f.init) for cls in NODES.values()
}
_GETTERS = {}
for _cls, _names in _FIELDS.items():
    _get = operator.attrgetter(*_names)
    _GETTERS[_cls] = _get if len(_names) > 1 else (lambda v, _get=_get: (_get(v),))
_PLAIN = {cls for cls in NODES.values()
          if not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
          and all(f.init for f in dataclasses.fields(cls))}
_new = object.__new__
_PLAIN_FIELDS = {cls.__name__: (cls, _FIELDS[cls]) for cls in _PLAIN}
_VALUE_TAGS = ("float", "list", "dict", "np")
_AS_IS = frozenset((str, int, bool, type(None)))  # the types encode returns unchanged
assert not set(_VALUE_TAGS) & set(NODES)


def schema() -> dict[str, list[str]]:
    """Node name -> field names: what a stored form depends on."""
    return {cls.__name__: list(f) for cls, f in sorted(_FIELDS.items(), key=lambda kv: kv[0].__name__)}


def _numpy():
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return None
    return numpy


def encode(v: Any) -> Any:
    t = type(v)
    if v is None or t is bool or t is str or t is int:
        return v
    if t is float:
        return v if math.isfinite(v) else {"float": repr(v)}
    if t is tuple:
        return [encode(x) for x in v]
    getter = _GETTERS.get(t)
    if getter is not None:
        return {t.__name__: [encode(x) for x in getter(v)]}
    if t is list:
        return {"list": [encode(x) for x in v]}
    if t is dict:
        return {"dict": [[encode(k), encode(x)] for k, x in v.items()]}
    np = _numpy()
    if np is not None and isinstance(v, np.generic) and t is v.dtype.type and (
            v.dtype.kind in "biufc" or v.dtype.name.startswith(("bfloat", "float8", "float4", "int4", "uint4"))):
        return {"np": v.dtype.name, "hex": v.tobytes().hex()}
    raise Unserialisable(f"cannot serialise a value of type {t.__module__}.{t.__qualname__}: {v!r}")


_dump = json.JSONEncoder(separators=(",", ":")).encode  # (json.dumps builds an encoder per call)


def dumps_table(v: Any) -> str:
    """The JSON text of encode(v) with every distinct node stored once:
    {"table": [...], "root": value}, where each node's fields refer to other
    nodes as {"#": position}, children before parents. `loads_table` reads it
    back with every repeated node built once."""
    texts: list[str] = []
    index: dict = {}   # an entry's text -> its position: equal nodes are stored once
    seen: dict = {}    # id(node) -> position: a node shared by several parents is encoded once

    def enc(x):
        t = type(x)
        if t in _AS_IS:  # most fields: answered here, not through encode (a call per leaf)
            return x
        if t is tuple:
            return [enc(y) for y in x]
        getter = _GETTERS.get(t)
        if getter is None:
            if t is list:
                return {"list": [enc(y) for y in x]}
            if t is dict:
                return {"dict": [[enc(k), enc(y)] for k, y in x.items()]}
            return encode(x)
        i = seen.get(id(x))
        if i is None:
            # keyed by the entry's text, whose children are already positions: a shallow key
            # (hashing the node itself would hash its whole subtree at every level), one that
            # tells 1, 1.0 and True apart, which node equality does not, and the output itself
            text = _dump({t.__name__: [enc(y) for y in getter(x)]})
            i = index.get(text)
            if i is None:
                i = index[text] = len(texts)
                texts.append(text)
            seen[id(x)] = i
        return {"#": i}

    root = _dump(enc(v))
    return '{"table":[' + ",".join(texts) + '],"root":' + root + "}"


def decode(d: Any) -> Any:
    if isinstance(d, list):
        return tuple(decode(x) for x in d)
    if d is None or isinstance(d, (bool, str, int, float)):
        return d
    if isinstance(d, dict):
        if len(d) == 1:
            (tag, x), = d.items()
            cls = NODES.get(tag)
            if cls is not None:
                fields = _FIELDS[cls]
                if len(x) != len(fields):
                    raise ValueError(f"{tag} has {len(fields)} fields, the stored form {len(x)}")
                return cls(*[decode(y) for y in x])
            if tag == "float":
                return float(x)
            if tag == "list":
                return [decode(y) for y in x]
            if tag == "dict":
                return {decode(k): decode(y) for k, y in x}
        elif set(d) == {"np", "hex"}:
            np = _numpy()
            try:
                dtype = np.dtype(d["np"])
            except TypeError:
                import ml_dtypes  # registers bfloat16 and the fp8 types
                dtype = np.dtype(getattr(ml_dtypes, d["np"]))
            return np.frombuffer(bytes.fromhex(d["hex"]), dtype=dtype)[0]
    raise ValueError(f"not an encoded IR value: {d!r:.80}")


def to_json(node) -> Any:
    """The JSON form of a Kernel, Block, statement or any IR value."""
    return encode(node)


def from_json(data) -> Any:
    return decode(data)


def dumps(data) -> str:
    """Canonical JSON text: sorted keys, no spaces (the IR encoding has no NaN:
    those are tagged)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


class _List(list):
    """A decoded list value, kept a list (every other JSON array is a tuple)."""


def _tuples(x):
    t = type(x)
    if t is list:
        return tuple([_tuples(e) if isinstance(e, list) else e for e in x])
    if t is _List:
        return list(x)
    return x


def _hook(d: dict):
    if len(d) == 1:
        (tag, x), = d.items()
        cls = NODES.get(tag)
        if cls is not None:
            if len(x) != len(_FIELDS[cls]):
                raise ValueError(f"{tag} has {len(_FIELDS[cls])} fields, the stored form {len(x)}")
            if cls in _PLAIN:  # a frozen dataclass without __post_init__: fill its fields directly
                obj = _new(cls)
                obj.__dict__.update(zip(_FIELDS[cls], [_tuples(e) for e in x]))
                return obj
            return cls(*[_tuples(e) for e in x])
        if tag == "float":
            return float(x)
        if tag == "list":
            return _List([_tuples(e) for e in x])
        if tag == "dict":
            return {_tuples(k): _tuples(v) for k, v in x}
    return decode(d)


def loads(text: str | bytes) -> Any:
    """Parse the text of `dumps(to_json(x))` straight back to x (faster than
    json.loads + from_json)."""
    return _tuples(json.loads(text, object_hook=_hook))


def loads_table(text: str | bytes) -> Any:
    """Parse the text of `dumps_table(x)` back to x."""
    table: list = []
    append = table.append
    plain = _PLAIN_FIELDS
    new = _new
    tuples = _tuples

    def hook(d: dict):
        if len(d) == 1:
            ref = d.get("#")
            if ref is not None:
                return table[ref]
            for tag, x in d.items():
                pf = plain.get(tag)
                if pf is not None:
                    cls, fields = pf
                    if len(x) != len(fields):
                        raise ValueError(f"{tag} has {len(fields)} fields, the stored form {len(x)}")
                    node = new(cls)
                    node.__dict__.update(zip(fields, [tuples(e) if isinstance(e, list) else e for e in x]))
                    append(node)
                    return node
                if tag in NODES:
                    node = _hook(d)
                    append(node)
                    return node
        elif len(d) == 2 and "table" in d and "root" in d:
            return d
        return _hook(d)

    data = json.loads(text, object_hook=hook)
    if type(data) is not dict or set(data) != {"table", "root"}:
        raise ValueError("not a node table")
    return _tuples(data["root"])


__all__ = ["FORMAT", "NODES", "Unserialisable", "decode", "dumps", "dumps_table", "encode", "from_json", "loads",
           "loads_table", "schema", "to_json"]
