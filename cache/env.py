"""Every environment variable nkicc (or its tests and benchmarks) reads, and
whether it can change a compiled result.

- key:     can change output; its value is part of every cache key.
- neutral: cannot change output (where the cache lives, test knobs).

tests/cache/test_cache.py scans the source tree for reads of the environment
(`os.environ.get`, `os.environ[...]`, `os.getenv`, `... in os.environ`) and
fails on any variable that is not classified here, so a new knob cannot
silently change output behind the cache's back.
"""
from __future__ import annotations

import ast
import os
import pathlib

KEY = "key"
NEUTRAL = "neutral"

ENV: dict[str, tuple[str, str]] = {
    "NEURON_PLATFORM_TARGET_OVERRIDE": (KEY, "the default target (also in the key through the resolved target)"),
    "NKI_NC_VERSION": (KEY, "the NKI Library suite's NeuronCore generation for its kernels under pytest --nkicc "
                               "(also in the key through the resolved target)"),
    "NKICC_DISABLE_PLUGIN_AUTOLOAD": (KEY, "1 skips third-party plugins (also in the key through the plugin list)"),
    "NKICC_CACHE": (NEUTRAL, "0/false/off turns the compile cache off"),
    "NKICC_CACHE_DIR": (NEUTRAL, "where the compile cache lives"),
    "NKICC_CACHE_SIZE": (NEUTRAL, "size limit of the compile cache, e.g. 500MB (default 2GiB)"),
    "NKICC_REMOTE_CACHE": (NEUTRAL, "URL of the shared cache tier behind the local one (redis://, rediss://)"),
    "NKICC_CACHE_SECRET": (NEUTRAL, "HMAC secret that signs and checks the shared tier's entries"),
    "NKICC_CACHE_SECRET_FILE": (NEUTRAL, "a file holding that secret (when NKICC_CACHE_SECRET is not set)"),
    "NKICC_TEST_REDIS": (NEUTRAL, "tests only: a running redis-server (.ci/run starts one)"),
    "XDG_CACHE_HOME": (NEUTRAL, "the default cache directory's parent on Linux"),
    "LOCALAPPDATA": (NEUTRAL, "the default cache directory's parent on Windows"),
    "NKI_PRECISE_FP": (NEUTRAL, "simulation only (0 holds float tensors as float32): the cache holds compiled "
                                "programs, never simulation results; read when a simulator is created"),
    "NKICC_UNDEFINED": (NEUTRAL, "what a kernel call does with never-written memory in an output (error or "
                                 "poison): decided after the simulation, from its outputs, never in a compiled "
                                 "program"),
    "NKICC_DIALECT": (NEUTRAL, "the NKI version of `import nki` kernels (nkicc run --dialect): in the key "
                               "through the dialect the compile was given (CachePlan.dialect)"),
    "NKICC_KEEP_FREED_MEMORY": (NEUTRAL, "simulation only (0: leave glibc's malloc thresholds as they are; "
                                         "simulator/scratch.py): how host memory is reused, never a result"),
    "NKICC_TEST_SEED": (NEUTRAL, "tests only: seed of random test inputs"),
    "NKICC_TIME_SLACK": (NEUTRAL, "tests only: slack on timing assertions"),
    "NKICC_E190_LOG": (NEUTRAL, "debugging: a file that E190 errors are appended to"),
    "NKI_SDK": (NEUTRAL, "bench only: the NKI SDK checkout bench/tutorial_shapes.py reads the tutorial kernels from"),
    "NKICC_FUZZ_EXAMPLES": (NEUTRAL, "tests only: how many random kernels the fuzz test tries"),
    "NKICC_WORKLOADS": (NEUTRAL, "bench only: where bench/testbench.py finds the user's workloads"),
    "PYTHONPATH": (NEUTRAL, "tests only: where a test's subprocess finds its packages (what they provide is in "
                            "the key through the plugin and instruction-family lists)"),
}


def key_values() -> dict[str, str | None]:
    """The values of the variables that are part of every cache key."""
    return {name: os.environ.get(name) for name, (kind, _) in sorted(ENV.items()) if kind == KEY}


# --- finding reads in source ------------------------------------------------------------------

def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = stmt.value.value
    return out


def reads_in_source(text: str, filename: str = "<source>") -> list[tuple[str, int]]:
    """(variable name, line) for every read of the environment in `text`; a
    name that is not a literal or a module-level string constant comes back
    as "?<expression>"."""
    tree = ast.parse(text, filename)
    consts = _string_constants(tree)
    found: list[tuple[str, int]] = []

    def name_of(arg: ast.AST) -> str:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name) and arg.id in consts:
            return consts[arg.id]
        return "?" + ast.unparse(arg)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault", "pop") and _is_environ(f.value):
                found.append((name_of(node.args[0]), node.lineno))
            elif (isinstance(f, ast.Attribute) and f.attr == "getenv") or (isinstance(f, ast.Name) and f.id == "getenv"):
                found.append((name_of(node.args[0]), node.lineno))
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            found.append((name_of(node.slice), node.lineno))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and _is_environ(node.comparators[0]):
            found.append((name_of(node.left), node.lineno))
    return found


def scan(roots) -> dict[str, list[str]]:
    """Variable name -> ["file:line", ...] for every read under the given
    folders (Python files; build folders skipped)."""
    out: dict[str, list[str]] = {}
    for root in roots:
        root = pathlib.Path(root)
        for path in sorted(root.rglob("*.py")):
            if any(part in ("build", "__pycache__", ".git") or part.endswith(".egg-info") for part in path.parts):
                continue
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            try:
                reads = reads_in_source(text, str(path))
            except SyntaxError:
                continue
            for name, line in reads:
                out.setdefault(name, []).append(f"{path}:{line}")
    return out


def unclassified(roots) -> dict[str, list[str]]:
    """Reads of variables that ENV does not classify (key_values' own read,
    of the names in ENV, is not one)."""
    # this module, scanned from a checkout or installed: key_values() reads names from ENV
    me = os.path.join("cache", "env.py")
    out = {}
    for name, where in scan(roots).items():
        where = [w for w in where if not w.rsplit(":", 1)[0].endswith(me)]
        if where and name not in ENV:
            out[name] = where
    return out
