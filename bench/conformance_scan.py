"""Which `nki` / `nl` / `nisa` names a library kernel's code uses that nkicc lacks.

A kernel that stops at its first error says nothing about what comes after it;
this scan reads (never imports) the kernel's module and every module of the
library it imports, transitively, collects the names it takes from
`nki`, `nki.language`, `nki.isa`, `nki.isa.constants` and `nki.typing` (under
any alias, and the `neuronxcc.nki` spellings), and asks nkicc which of them
it does not provide. Attribute chains count only their first name
(`nl.foo.bar` checks `foo`), except `nl.tile_size.X`, whose fields are checked.
"""
from __future__ import annotations

import ast
import functools
import os

# the NKI modules, by dotted path, as the names this scan files them under
_NKI_MODULES = {
    "nki": "nki", "nki.language": "nl", "nki.isa": "nisa", "nki.isa.constants": "nisa.constants",
    "nki.typing": "nt",
}


def _canonical(dotted: str) -> str | None:
    if dotted.startswith("neuronxcc."):
        dotted = dotted[len("neuronxcc."):]
    return _NKI_MODULES.get(dotted)


def _unknown_submodule(dotted: str) -> str | None:
    """`collectives` for `nki.collectives` (or `neuronxcc.nki.collectives.x`): a
    module under nki that is none of the NKI modules above."""
    if dotted.startswith("neuronxcc."):
        dotted = dotted[len("neuronxcc."):]
    parts = dotted.split(".")
    if parts[0] != "nki" or len(parts) < 2 or _canonical(dotted) or _canonical(".".join(parts[:2])):
        return None
    return parts[1]


def _parse(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _resolve(nkilib: str, path: str, node: ast.ImportFrom) -> list[str]:
    """Library files an `from X import ...` inside `path` brings in."""
    if node.level:
        base = os.path.dirname(path)
        for _ in range(node.level - 1):
            base = os.path.dirname(base)
    else:
        mod = node.module or ""
        for prefix in ("nkilib_src.nkilib", "nkilib"):
            if mod == prefix or mod.startswith(prefix + "."):
                base, node_module = nkilib, mod[len(prefix) + 1:]
                break
        else:
            return []
        return _files(base, node_module, node)
    return _files(base, node.module or "", node)


def _files(base: str, module: str, node: ast.ImportFrom) -> list[str]:
    target = os.path.join(base, *module.split(".")) if module else base
    out = []
    if os.path.isfile(target + ".py"):
        out.append(target + ".py")
    elif os.path.isdir(target):
        if os.path.isfile(os.path.join(target, "__init__.py")):
            out.append(os.path.join(target, "__init__.py"))
        for alias in node.names:
            sub = os.path.join(target, alias.name + ".py")
            if os.path.isfile(sub):
                out.append(sub)
    return out


@functools.lru_cache(maxsize=None)
def _module_uses(nkilib: str, path: str) -> tuple[frozenset, tuple[str, ...]]:
    """(the (module, name) pairs one file uses, the library files it imports)."""
    tree = _parse(path)
    if tree is None:
        return frozenset(), ()
    aliases: dict[str, str] = {}  # local name -> canonical NKI module
    uses: set[tuple[str, str]] = set()
    deps: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _unknown_submodule(a.name):  # import nki.collectives as ncc
                    uses.add(("nki", _unknown_submodule(a.name)))
                canon = _canonical(a.name)
                if a.asname and canon:
                    aliases[a.asname] = canon
                elif not a.asname and a.name.split(".")[0] in ("nki", "neuronxcc"):
                    aliases[a.name.split(".")[0]] = "nki" if a.name.split(".")[0] == "nki" else "neuronxcc"
        elif isinstance(node, ast.ImportFrom):
            canon = _canonical(node.module or "") if not node.level else None
            if not node.level and _unknown_submodule(node.module or ""):  # from nki.collectives import X
                uses.add(("nki", _unknown_submodule(node.module)))
            for a in node.names:
                sub = _canonical(f"{node.module}.{a.name}") if canon else None
                if sub:  # `from nki import language as nl`
                    aliases[a.asname or a.name] = sub
                elif canon:  # `from nki.isa import dma_copy`
                    uses.add((canon, a.name))
            deps.extend(_resolve(nkilib, path, node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            cur = node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if not isinstance(cur, ast.Name) or cur.id not in aliases:
                continue
            chain.reverse()
            mod = aliases[cur.id]
            if mod == "neuronxcc":  # neuronxcc.nki.<module>.<name>
                if chain[:1] != ["nki"]:
                    continue
                chain, mod = chain[1:], "nki"
            while chain and mod == "nki" and chain[0] in ("language", "isa", "typing"):
                mod = {"language": "nl", "isa": "nisa", "typing": "nt"}[chain.pop(0)]
            if mod == "nisa" and chain[:1] == ["constants"]:
                mod, chain = "nisa.constants", chain[1:]
            if len(chain) > 1 and chain[0] == "tile_size":  # a namespace of constants: check its fields too
                uses.add((mod, f"tile_size.{chain[1]}"))
            if chain:  # an inner node of a chain repeats a prefix of it: the set keeps one
                uses.add((mod, chain[0]))
    return frozenset(uses), tuple(dict.fromkeys(deps))


def used_names(nkilib: str, relpath: str) -> set[tuple[str, str]]:
    """Every (module, name) the kernel's module and its library imports use."""
    seen, todo, uses = set(), [os.path.join(nkilib, relpath)], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        u, deps = _module_uses(nkilib, path)
        uses |= u
        todo.extend(deps)
    return uses


@functools.lru_cache(maxsize=None)
def _provided(mod: str, name: str) -> bool:
    import importlib

    from nkicc.loader import enable_nki_alias
    enable_nki_alias()
    module = importlib.import_module({"nki": "nki", "nl": "nki.language", "nisa": "nki.isa",
                                      "nisa.constants": "nki.isa.constants", "nt": "nki.typing"}[mod])
    try:
        for part in name.split("."):
            module = getattr(module, part)
        return True
    except Exception:  # noqa: BLE001 - a name whose lookup fails is not provided
        return False


def missing_names(nkilib: str, relpath: str) -> list[str]:
    """`nl.float8_e4m3fn`, `nisa.register_alloc`, ...: names the kernel's code uses that nkicc lacks."""
    return sorted(f"{mod}.{name}" for mod, name in used_names(nkilib, relpath) if not _provided(mod, name))
