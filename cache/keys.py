"""Cache keys: blake2b-256 over canonical JSON of everything that decides a
compiled result.

Kernel level: {format, nkicc version + hash of its own source, target (every
field), options that change output, the enabled passes in order with
version, scope and provider, the plugins with their versions (and a hash of
their source when they are not nkicc's own), the key environment variables,
the traced IR's hash}.

Region level: the same base minus the pass list and options, plus one pass
(name, version, provider), the pass context's options and the canonical form
of the region (ir.hash.canonical_region).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import sys

from ..ir import ops
from ..ir.origin import is_nkicc, package_dirs
from . import env

FORMAT = 1
SOURCE_SUFFIXES = (".py", ".json", ".toml")

_source_hash: str | None = None
_file_hashes: dict[str, str] = {}


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_default)


def _default(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dataclass__": type(obj).__qualname__, **dataclasses.asdict(obj)}
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(f"not part of a cache key: {type(obj).__name__}")


def digest(obj) -> str:
    return hashlib.blake2b(canonical_json(obj).encode(), digest_size=32).hexdigest()


def make_key(kind: str, obj) -> str:
    return f"nkicc-{kind}-{digest(obj)}"


def compiler_version() -> str:
    try:
        return importlib.metadata.version("nkicc")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def source_hash() -> str:
    """blake2b of nkicc's own source files (every package, sorted), once per
    process: an edited nkicc never reuses what an older one compiled."""
    global _source_hash
    if _source_hash is None:
        h = hashlib.blake2b(digest_size=16)
        seen = set()
        for pkg, root in package_dirs():
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
                for fn in sorted(filenames):
                    if not fn.endswith(SOURCE_SUFFIXES):
                        continue
                    path = os.path.join(dirpath, fn)
                    real = os.path.realpath(path)
                    if real in seen:
                        continue
                    seen.add(real)
                    rel = pkg + "/" + os.path.relpath(path, root).replace(os.sep, "/")
                    try:
                        with open(path, "rb") as f:
                            data = f.read()
                    except OSError:
                        continue
                    h.update(rel.encode() + b"\0" + hashlib.blake2b(data, digest_size=16).digest())
        _source_hash = h.hexdigest()
    return _source_hash


def file_hash(path: str) -> str:
    if path not in _file_hashes:
        try:
            with open(path, "rb") as f:
                _file_hashes[path] = hashlib.blake2b(f.read(), digest_size=16).hexdigest()
        except OSError:
            _file_hashes[path] = "unreadable"
    return _file_hashes[path]


def compiler() -> dict:
    return {"version": compiler_version(), "source": source_hash(), "python": list(sys.version_info[:2])}


def fingerprint_tag() -> str:
    """Tag stored with every entry: entries with another tag were written by
    another nkicc build and can never hit again (`nkicc cache prune`)."""
    return f"{compiler_version()}+{source_hash()[:16]}"


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def plugin_versions(manager, own_distribution: str = "nkicc", providers: dict | None = None) -> list:
    """[name, distribution, version, source hash or None] of every plugin
    registered with the pluggy manager, then ["dist", name, version] of every
    distribution that provides a pass; sorted. nkicc's own plugins are
    covered by the compiler's source hash."""
    dists = {}
    for plugin, dist in manager.list_plugin_distinfo():
        dists[id(plugin)] = dist
    out = []
    for name, plugin in manager.list_name_plugin():
        dist = dists.get(id(plugin))
        dist_name = (dist.metadata["Name"] if dist is not None else None) or ""
        version = dist.version if dist is not None else None
        source = None
        module_file = getattr(plugin, "__file__", None) or getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
        own = dist_name.lower().replace("_", "-") == own_distribution or (
            module_file is not None and is_nkicc(module_file))
        if not own and module_file:
            source = file_hash(module_file)
        out.append([name or "", dist_name, version, source])
    for dist_name in sorted(set((providers or {}).values())):
        if not dist_name.startswith("module "):
            out.append(["dist", dist_name, _dist_version(dist_name)])
    return sorted(out, key=lambda r: [str(x) for x in r])


def instruction_families() -> list:
    """[module, source hash] of every instruction family from outside nkicc
    (nkicc's own are covered by the compiler's source hash)."""
    return sorted([name, file_hash(file)] for name, file in ops.family_files()
                  if file is not None and not is_nkicc(file))


def target_key(target) -> dict:
    if dataclasses.is_dataclass(target):
        return {"__class__": type(target).__qualname__, **dataclasses.asdict(target)}
    return {"name": getattr(target, "name", str(target))}


def base(target, manager, providers: dict | None = None) -> dict:
    """What every key shares: compiler, target, plugins, environment."""
    return {
        "format": FORMAT,
        "compiler": compiler(),
        "target": target_key(target),
        "plugins": plugin_versions(manager, providers=providers) if manager is not None else [],
        "instructions": instruction_families(),
        "env": env.key_values(),
    }
