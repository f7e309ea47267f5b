"""Run the vendor's NKI Library kernels unchanged on nkicc and write docs/conformance.md.

    python bench/conformance.py LIBRARY_DIR [--only NAME]... [--timeout S] [--out FILE]
    python bench/conformance.py LIBRARY_DIR --compare docs/conformance.md --out /tmp/now.md   # after a change
    python bench/conformance.py --suite LIBRARY_DIR [--first N] [--all] [--workers N]   # the library's own suite

LIBRARY_DIR is a checkout (or extracted snapshot) of aws-neuron/nki-library; the
`nkilib` package is found under it. Every public kernel of its core/ and
experimental/ folders (the @nki.jit-decorated functions, and the undecorated
entry points this project writes a case for) runs in its own subprocess with a
timeout: imported with nkicc behind `nki` and `neuronxcc.nki`, compiled on
random inputs at a small shape its docstring allows, simulated, and compared
with a numpy reference written in this project (bench/conformance_refs.py).
A case named "kernel[variant]" runs another configuration of a kernel (its
MX path) as a row of its own; a case's `dtypes` gives arguments whose arrays
hold another dtype's storage (the packed MX `*_x4` types).
Nothing of the library is copied here; without LIBRARY_DIR the script says so
and exits 0.
"""
from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FOLDERS = ("core", "experimental")
RESULT_TAG = "CONFORMANCE-RESULT "
KEEP_MARKER = "<!-- kept when regenerated"
# kernels that fail on any compiler at the snapshot this page was made from, and why (checked by hand)
LIBRARY_FAULTS = {
    "mlp": "`core/mlp/mlp.py` does not parse (a syntax error in the vendor's file: a docstring closed too early).",
    "moe_block_tkg": "its selective-expert path constructs `MLPTKGConstantsDimensionSizes` without the field "
                     "`remainderIFused` the dataclass requires (a TypeError; the MX path, `moe_block_tkg[mx]`, "
                     "runs).",
    "attention_block_tkg": "its module imports `torch` (a reference implementation beside the kernel), which "
                           "nkicc neither needs nor installs.",
}

# the kernels issue 13 requires to run (names as the scan finds them; qkv is both qkv_tkg and qkv_cte)
MUST_RUN = ("cumsum", "cascaded_max", "rmsnorm_tkg", "layernorm_tkg", "RoPE", "rope_hf", "router_topk",
            "find_nonzero_indices", "indexed_flatten", "rmsnorm_quant_kernel", "qkv_tkg", "qkv_cte",
            "output_projection_tkg", "attention_cte", "attention_tkg", "topk", "conv1d", "cross_entropy_forward",
            "dynamic_elementwise_add")


@dataclass
class Found:
    """A kernel the scan found: its module file (relative to the nkilib folder) and function."""
    name: str
    relpath: str
    func: str
    decorated: bool
    parse_error: str = ""


@dataclass
class Result:
    name: str
    relpath: str
    func: str
    shapes: str = ""
    dtype: str = ""
    status: str = "error"  # pass | mismatch | error | not run
    first_error: str = ""
    max_err: float | None = None
    compile_s: float | None = None
    sim_s: float | None = None
    rolled: int | None = None
    unrolled: int | None = None
    missing: list = field(default_factory=list)  # names its code uses that nkicc lacks (conformance_scan)
    projected: "Result | None" = None  # the same run with stand-ins (install_stand_ins)


# --- finding the library and its kernels -------------------------------------------------

def find_nkilib(library_dir: str) -> str | None:
    """The `nkilib` package folder inside a checkout (src/nkilib_src/nkilib), or None."""
    for cand in (os.path.join(library_dir, "src", "nkilib_src", "nkilib"), os.path.join(library_dir, "nkilib"),
                 library_dir):
        if all(os.path.isdir(os.path.join(cand, f)) for f in FOLDERS):
            return os.path.abspath(cand)
    return None


def _is_kernel_decorator(node: ast.expr) -> bool:
    """@nki.jit, @nki.jit(...), @jit, and the library's own kernel-wrapping decorators (@_kernel)."""
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return text.split(".")[-1] in ("jit", "_kernel")


def discover(nkilib: str, wanted: set[tuple[str, str]], variants=()) -> list[Found]:
    """Every public kernel of core/ and experimental/: decorated top-level
    functions, plus the (relpath, func) pairs in `wanted` (undecorated entry
    points that have a case), plus `variants` (name, relpath, func): cases
    named "kernel[variant]" that run another configuration of a kernel (its
    MX path). A module that does not parse is one entry."""
    found: list[Found] = []
    for folder in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(nkilib, folder)):
            dirnames.sort()
            for fname in sorted(filenames):
                if not fname.endswith(".py") or fname == "__init__.py" or fname.endswith("_torch.py") \
                        or fname == "torch_ref.py":
                    continue
                path = os.path.join(dirpath, fname)
                rel = os.path.relpath(path, nkilib)
                try:
                    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
                except SyntaxError as exc:
                    found.append(Found(fname[:-3], rel, "", False,
                                       f"{rel}:{exc.lineno}: the module does not parse ({exc.msg})"))
                    continue
                for node in tree.body:
                    if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                        continue
                    decorated = any(_is_kernel_decorator(d) for d in node.decorator_list)
                    if decorated or (rel, node.name) in wanted:
                        found.append(Found(node.name, rel, node.name, decorated))
    names = collections.Counter(f.name for f in found)
    for f in found:  # the same function name in two modules: qualify by the module
        if names[f.name] > 1:
            f.name = f"{f.relpath[:-3].replace(os.sep, '.')}.{f.func or f.name}"
    for name, rel, func in variants:  # a second configuration of a kernel found above ("qkv_tkg[mx]")
        base = next((f for f in found if (f.relpath, f.func) == (rel, func)), None)
        if base is not None:
            found.insert(found.index(base) + 1, Found(name, rel, func, base.decorated))
    return found


# --- the parent: one subprocess per kernel ------------------------------------------------

def run_one(nkilib: str, found: Found, timeout: float, stand_ins: bool = False) -> Result:
    if found.parse_error:
        return Result(found.name, found.relpath, found.func, status="error", first_error=found.parse_error)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", nkilib, found.relpath, found.func, found.name,
           "stand-ins" if stand_ins else "as-is"]
    env = dict(os.environ, NKICC_CACHE="0", PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return Result(found.name, found.relpath, found.func, status="error",
                      first_error=f"timeout: no result after {timeout:.0f} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return Result(**json.loads(line[len(RESULT_TAG):]))
    tail = [x for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
    why = tail[-1] if tail else f"exit {proc.returncode}, no output"
    return Result(found.name, found.relpath, found.func, status="error",
                  first_error=f"the runner crashed after {time.perf_counter() - t0:.0f} s: {why}")


# --- the child: import, compile, simulate, compare -----------------------------------------

def _short(text: str, nkilib: str) -> str:
    """One line, with library paths relative to the nkilib folder."""
    text = " ".join(str(text).split())
    return text.replace(nkilib + os.sep, "")


def _error_line(exc: BaseException, nkilib: str) -> str:
    """The one line nkicc gives for `exc`; for an exception nkicc has no diagnostic
    for, its type and message at the innermost frame (in nkicc: an internal error)."""
    import traceback

    from nkicc.ir import NkiccError
    from nkicc.language.usererrors import user_error
    if not isinstance(exc, NkiccError):
        exc = user_error(exc) or exc
    if isinstance(exc, NkiccError):  # the one line without its hint: the table names the gap, not the fix
        where = f"{exc.loc}: " if exc.loc else ""
        return _short(f"error[{exc.code}] {where}{exc.message}", nkilib)
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    where = where.replace(ROOT + os.sep, "nkicc:")
    return _short(f"{type(exc).__name__}: {exc}{where}", nkilib)


# Stand-ins for names that other work is adding to nkicc in parallel (dtypes, nl constants), used only by
# the report's projection (--stand-ins): what would run once they exist. A name nkicc has is never replaced.
# The packed fp8/fp4 storage types stand in as unsigned ints of their width, bool as numpy's.
def _stand_ins():
    import numpy as np

    import nkicc.language as nl
    from nkicc.language import dtypes
    return {
        ("float8_e4m3fn",): lambda: dtypes.ml_dtype("float8_e4m3"),
        ("float8_e4m3fn_x4",): lambda: np.uint32, ("float8_e5m2_x4",): lambda: np.uint32,
        ("float4_e2m1fn_x4",): lambda: np.uint16, ("bool",): lambda: np.bool_,
        ("gelu_apprx_sigmoid",): lambda: nl.gelu,
        ("tile_size", "total_available_sbuf_size"): lambda: 192 * 1024,  # trn2: 24 MiB over 128 partitions
    }


def install_stand_ins(dry_run: bool = False) -> list[str]:
    """Put the stand-ins nkicc still lacks on nl (or, with dry_run, only
    name them); returns their names."""
    import nkicc.language as nl
    used = []
    for path, make in _stand_ins().items():
        owner = nl
        for part in path[:-1]:
            owner = getattr(owner, part)
        try:
            getattr(owner, path[-1])
            continue  # nkicc has it now: the real thing is used
        except AttributeError:
            if not dry_run:
                setattr(owner, path[-1], make())
            used.append("nl." + ".".join(path))
    return used


def child(nkilib: str, relpath: str, func: str, name: str, stand_ins: bool = False) -> Result:
    import importlib

    import numpy as np

    if stand_ins:
        install_stand_ins()

    res = Result(name, relpath, func)
    sys.path.insert(0, HERE)
    import conformance_refs as refs
    from nkicc.loader import enable_nki_alias

    enable_nki_alias()
    parent = os.path.dirname(nkilib)
    if os.path.basename(parent) == "nkilib_src":  # a checkout: src/nkilib_src/nkilib, imported as nkilib_src.nkilib
        sys.path.insert(0, os.path.dirname(parent))
        package = "nkilib_src.nkilib"
    else:
        sys.path.insert(0, parent)
        package = "nkilib"
    modname = package + "." + relpath[:-3].replace(os.sep, ".")
    case = refs.CASES.get(name)
    try:
        module = importlib.import_module(modname)
        kernel = getattr(module, func)
    except Exception as exc:
        res.first_error = _error_line(exc, nkilib)
        if case is not None:  # the shapes the case would run, where it can say without the module
            try:
                planned = case.make(np.random.default_rng(2026), None)
                res.shapes, res.dtype = planned.describe(), planned.dtype
            except Exception:
                pass
        return res
    if case is None:
        res.status = "not run"
        res.first_error = "imports; no case (shapes and numpy reference) in bench/conformance_refs.py yet"
        return res
    import nkicc
    from nkicc.specs import bind_call
    from nkicc.language.kernel_trace import inspect_unwrap

    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = case.target  # each run in its own process
    rng = np.random.default_rng(2026)
    try:
        inputs = case.make(rng, module)
    except Exception as exc:
        res.first_error = f"building the inputs failed: {_error_line(exc, nkilib)}"
        return res
    res.shapes = inputs.describe()
    res.dtype = inputs.dtype
    try:
        if inputs.host is not None:  # a host-side driver launches the jit kernel(s) itself
            t0 = time.perf_counter()
            got = inputs.host()
            res.sim_s = time.perf_counter() - t0  # compile and simulation together
            _take_counts(res, module)
        else:
            top = inputs.kernel or kernel
            jk = top if isinstance(top, nkicc.JitKernel) else nkicc.jit(inspect_unwrap(getattr(top, "fn", top)))
            if inputs.grid:
                jk = jk[inputs.grid]
            t0 = time.perf_counter()
            if inputs.dtypes:  # typed storage (MX *_x4): compile for TensorSpecs of those dtypes
                from nkicc.specs import TensorSpec
                typed = {k: TensorSpec(tuple(v.shape), inputs.dtypes[k]) if k in inputs.dtypes else v
                         for k, v in inputs.kwargs.items()}
                compiled = nkicc.compile(jk, *inputs.args, **typed)
            else:
                compiled = jk.compile(*inputs.args, **inputs.kwargs)
            res.compile_s = time.perf_counter() - t0
            res.rolled = compiled.report["instructions_rolled"]
            res.unrolled = compiled.report["instructions_unrolled"]
            _, _, arrays = bind_call(inspect_unwrap(jk.fn), inputs.args, inputs.kwargs)
            t0 = time.perf_counter()
            got = compiled.run(**arrays)
            res.sim_s = time.perf_counter() - t0
    except Exception as exc:
        res.first_error = _error_line(exc, nkilib)
        return res
    got = [np.asarray(g) for g in (got if isinstance(got, (tuple, list)) else [got])]
    if inputs.check is not None:
        ok, worst, msg = inputs.check(got)
        why = "" if ok else msg
    else:
        want = list(inputs.expected)
        if len(got) != len(want):
            res.status = "mismatch"
            res.first_error = f"{len(got)} outputs, the reference has {len(want)}"
            return res
        worst, why = 0.0, ""
        for i, (g, w) in enumerate(zip(got, want)):
            ok, err, msg = refs.compare(g, w, inputs.tol)
            worst = max(worst, err)
            if not ok and not why:
                why = f"output {i}: {msg}"
    res.max_err = float(worst)
    res.status = "mismatch" if why else "pass"
    res.first_error = why
    return res


def _take_counts(res: Result, module) -> None:
    """Instruction counts of the jit kernels a host-side driver compiled (summed)."""
    import nkicc
    reports = [c.report for v in vars(module).values() if isinstance(v, nkicc.JitKernel) for c in v.compiled]
    if reports:
        res.compile_s = sum(r.get("total_s", 0.0) for r in reports)
        res.rolled = sum(r["instructions_rolled"] for r in reports)
        res.unrolled = sum(r["instructions_unrolled"] for r in reports)


# --- the report ------------------------------------------------------------------------------

def _group(first_error: str) -> str:
    """The first error without its location, to count kernels blocked by the same gap."""
    m = re.match(r"error\[(\w+)\] (?:[^ ]+:\d+: )?(.*?)(?: \(.*\))?$", first_error)
    if m:
        return f"{m.group(1)} {m.group(2)}"
    return re.sub(r" at [^ ]+:\d+$", "", first_error)


def _fmt(x, spec="{:.2f}") -> str:
    return "" if x is None else spec.format(x)


def write_report(results: list[Result], out: str, library_dir: str, snapshot: str, command: str,
                 stand_ins: list[str]) -> None:
    status = collections.Counter(r.status for r in results)
    variants = sum(1 for r in results if "[" in r.name)
    groups = collections.Counter(_group(r.first_error) for r in results if r.status == "error")
    users = collections.defaultdict(list)
    for r in results:
        for name in r.missing:
            users[name].append(r.name)
    lines = [
        "# Conformance: the vendor's NKI Library on nkicc",
        "",
        f"Every public kernel of the NKI Library's `core/` and `experimental/` ({snapshot}), run unchanged: "
        "imported with nkicc behind `nki`/`neuronxcc.nki`, compiled for random inputs at a small shape its "
        "docstring allows, simulated on the machine simulator, and compared with a numpy reference written in "
        "this project (`bench/conformance_refs.py`). Regenerate with:",
        "",
        "```",
        command,
        "```",
        "",
        "After a change to nkicc, `python bench/conformance.py LIBRARY_DIR --compare docs/conformance.md "
        "--out /tmp/now.md` names every kernel that passed here and does not now (and exits 1): none of the "
        "tests runs the library, so this is the check.",
        "",
        f"**{len(results)} kernels: " + ", ".join(f"{status[s]} {s}" for s in ("pass", "mismatch", "error", "not run")
                                               if status[s]) + ".**"
        + (f" ({variants} of the rows are variants, `kernel[mx]`: another configuration of a kernel listed "
           "above them, its MX path.)" if variants else ""),
        "",
    ]
    projected = [r for r in results if r.projected is not None]
    if projected and stand_ins:
        pstatus = collections.Counter(r.projected.status for r in projected)
        lines += [f"With stand-ins for the {len(stand_ins)} names other work is adding (see the projection below): "
                  + ", ".join(f"{pstatus[s]} {s}" for s in ("pass", "mismatch", "error", "not run") if pstatus[s])
                  + ".", ""]
    lines += [
        "## What blocks them (first error, by how many kernels it stops)",
        "",
        "| kernels | first error |",
        "|---:|---|",
    ]
    for g, n in groups.most_common():
        lines.append(f"| {n} | {g.replace('|', '/')} |")
    lines += [
        "",
        "## Names nkicc lacks, by how many kernels use them",
        "",
        "A kernel stops at its first error; this static scan (`bench/conformance_scan.py`) reads each kernel's "
        "module and the library modules it imports, transitively, and lists the `nki`/`nl`/`nisa` names they "
        "use that nkicc does not provide: what stands between each kernel and a run once its first error is "
        "gone. A name in a shared helper module counts for every kernel importing it, even where that kernel "
        "never calls the helper; instructions' semantics and arguments are not checked.",
        "",
        "| name | kernels | must-run kernels among them |",
        "|---|---:|---|",
    ]
    for name, who in sorted(users.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        must = [w for w in who if w in MUST_RUN]
        lines.append(f"| `{name}` | {len(who)} | {', '.join(must)} |")
    if not users:
        lines.append("| (none: nkicc provides every name the library's kernels use) | | |")
    faults = [f"- `{r.name}`: {LIBRARY_FAULTS[r.name]}" for r in results
              if r.status == "error" and r.name in LIBRARY_FAULTS]
    if faults:
        lines += ["", "Errors that are the library's own at this snapshot (no compiler runs these kernels as they "
                      "are):", ""] + faults
    lines += [
        "",
        "## Kernels",
        "",
        "Status: **pass** (matches numpy within the tolerance), **mismatch** (runs, differs), **error** (stops "
        "before a result: the first error, one line), **not run** (imports, but this project has no case for it "
        "yet). Rolled = instructions nkicc compiles (loops kept rolled); unrolled = what a compiler that "
        "unrolls every static loop would emit. Seconds are wall time of one compile and one simulation.",
        "",
        "| kernel | module | shapes | dtype | status | first error | max error | compile s | sim s | rolled | unrolled "
        "| names missing |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: (r.relpath, r.name)):
        err = r.first_error.replace("|", "/")
        lines.append(f"| {r.name} | {r.relpath} | {r.shapes} | {r.dtype} | {r.status} | {err} | "
                     f"{_fmt(r.max_err, '{:.3g}')} | {_fmt(r.compile_s)} | {_fmt(r.sim_s)} | "
                     f"{_fmt(r.rolled, '{:,}')} | {_fmt(r.unrolled, '{:,}')} | {len(r.missing)} |")
    if projected and stand_ins:
        pgroups = collections.Counter(_group(r.projected.first_error) for r in projected
                                      if r.projected.status == "error")
        lines += [
            "", "## Projection: the same runs with stand-ins for names being added elsewhere", "",
            "Other work is adding these names to nkicc; to see what stands behind them, every kernel ran a second "
            "time with a stand-in for each (the fp8 e4m3fn type as ml_dtypes' e4m3, the packed `_x4` storage "
            "types as unsigned ints of their width, `bool` as numpy's, `gelu_apprx_sigmoid` as `gelu`, the "
            "SBUF size of trn2): " + ", ".join(f"`{n}`" for n in stand_ins) + ". A stand-in never replaces a "
            "name nkicc has, so this section converges to the table above as that work lands. A pass here means "
            "the kernel matched numpy with the stand-ins, at this shape and dtype.",
            "",
            "**With stand-ins: " + ", ".join(f"{pstatus[s]} {s}" for s in ("pass", "mismatch", "error", "not run")
                                              if pstatus[s]) + ".**",
            "",
            "| kernels | first error with stand-ins |",
            "|---:|---|",
        ]
        for g, n in pgroups.most_common():
            lines.append(f"| {n} | {g.replace('|', '/')} |")
        lines += ["", "| kernel | status | first error | max error | compile s | sim s | rolled | unrolled |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        for r in sorted(projected, key=lambda r: (r.relpath, r.name)):
            p = r.projected
            lines.append(f"| {r.name} | {p.status} | {p.first_error.replace('|', '/')} | "
                         f"{_fmt(p.max_err, '{:.3g}')} | {_fmt(p.compile_s)} | {_fmt(p.sim_s)} | "
                         f"{_fmt(p.rolled, '{:,}')} | {_fmt(p.unrolled, '{:,}')} |")
    lines += ["", "## Names each kernel still needs (static scan)", "", "| kernel | names nkicc lacks |", "|---|---|"]
    for r in sorted(results, key=lambda r: (r.relpath, r.name)):
        lines.append(f"| {r.name} | {', '.join(f'`{n}`' for n in r.missing) or '(none)'} |")
    lines.append("")
    kept = ""  # the hand-written part of the page, from KEEP_MARKER down, survives a regeneration
    if os.path.exists(out):
        with open(out) as f:
            previous = f.read()
        if KEEP_MARKER in previous:
            kept = previous[previous.index(KEEP_MARKER):]
    with open(out, "w") as f:
        f.write("\n".join(lines) + kept)


def recorded_statuses(path: str) -> dict[str, str]:
    """kernel -> status in the Kernels table of a report this script wrote."""
    out, in_table = {}, False
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[:5] == ["kernel", "module", "shapes", "dtype", "status"]:
                in_table = True
            elif in_table and line.startswith("|") and len(cells) >= 5 and not cells[0].startswith("---"):
                out[cells[0]] = cells[4]
            elif in_table and not line.startswith("|"):
                break
    return out


def regressions(results: list[Result], recorded: dict[str, str]) -> list[str]:
    """One line per kernel that passed in `recorded` and does not now."""
    return [f"{r.name}: passed, now {r.status}: {r.first_error}" for r in results
            if recorded.get(r.name) == "pass" and r.status != "pass"]


def _snapshot(library_dir: str) -> str:
    try:
        out = subprocess.run(["git", "-C", library_dir, "log", "-1", "--format=%s (%h)"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return "snapshot " + out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "snapshot \"NKI Lib 2026-04-13\"" if "2026-04-13" in library_dir else "the given checkout"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        nkilib, relpath, func, name, mode = argv[1:6]
        res = child(nkilib, relpath, func, name, stand_ins=mode == "stand-ins")
        print(RESULT_TAG + json.dumps(asdict(res)), flush=True)
        return 0
    if "--suite" in argv:
        return suite_main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("library_dir", nargs="?", help="a checkout of aws-neuron/nki-library")
    ap.add_argument("--only", action="append", default=[], help="run only this kernel (repeatable)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel (default 300)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "conformance.md"))
    ap.add_argument("--snapshot", default=None, help="the library's version, for the report's header")
    ap.add_argument("--compare", metavar="REPORT", default=None,
                    help="a report this script wrote (docs/conformance.md): name every kernel that passed there "
                         "and does not now, and exit 1 if there is one")
    ap.add_argument("--no-stand-ins", action="store_true",
                    help="skip the second run with stand-ins for names being added elsewhere (the projection)")
    args = ap.parse_args(argv)
    if not args.library_dir or not os.path.isdir(args.library_dir):
        print(f"conformance: no NKI Library checkout given{' at ' + args.library_dir if args.library_dir else ''};"
              " skipping (pass the path of aws-neuron/nki-library)")
        return 0
    nkilib = find_nkilib(args.library_dir)
    if nkilib is None:
        print(f"conformance: {args.library_dir} holds no nkilib package with core/ and experimental/; skipping")
        return 0
    sys.path.insert(0, HERE)
    import conformance_refs as refs
    kernels = discover(nkilib, {(c.relpath, c.func) for c in refs.CASES.values()},
                       [(n, c.relpath, c.func) for n, c in refs.CASES.items() if "[" in n])
    if args.only:
        kernels = [k for k in kernels if k.name in args.only]
        if not kernels:
            print(f"conformance: no kernel named {', '.join(args.only)}", file=sys.stderr)
            return 2
    from conformance_scan import missing_names
    results = []
    for k in kernels:
        r = run_one(nkilib, k, args.timeout)
        if not k.parse_error:
            r.missing = missing_names(nkilib, k.relpath)
        if not args.no_stand_ins and not k.parse_error:
            r.projected = run_one(nkilib, k, args.timeout, stand_ins=True)
        results.append(r)
        print(f"{r.name:34s} {r.status:8s} {r.first_error[:150]}", flush=True)
        if r.projected is not None:
            print(f"{'  with stand-ins':34s} {r.projected.status:8s} {r.projected.first_error[:150]}", flush=True)
    worse = regressions(results, recorded_statuses(args.compare)) if args.compare else []
    if args.compare:
        print(f"against {args.compare}: " + (f"{len(worse)} kernel(s) passed there and do not now"
                                             if worse else "every kernel that passed there passes"))
        for line in worse:
            print("  " + line[:300])
    command = "python bench/conformance.py LIBRARY_DIR" + "".join(f" --only {o}" for o in args.only)
    if args.only and os.path.exists(args.out):
        print(f"(--only: {args.out} left as it is)")
        return 1 if worse else 0
    stand_ins = [] if args.no_stand_ins else install_stand_ins(dry_run=True)
    write_report(results, args.out, args.library_dir, args.snapshot or _snapshot(args.library_dir), command,
                 stand_ins)
    print(f"wrote {args.out}")
    return 1 if worse else 0


def suite_main(argv) -> int:
    """`--suite LIBRARY_DIR`: the library's own pytest suite (bench/conformance_suite.py)."""
    sys.path.insert(0, HERE)
    import conformance_suite

    ap = argparse.ArgumentParser(description=conformance_suite.__doc__.split("\n\n")[0])
    ap.add_argument("--suite", required=True, metavar="LIBRARY_DIR", help="a checkout of aws-neuron/nki-library")
    ap.add_argument("paths", nargs="*", help="test paths inside it, or items as a report names them "
                    "(FILE::TEST[PARAMS]: that item alone) (default: test/integration)")
    ap.add_argument("--first", type=int, default=None, help="only the first N items of each test file")
    ap.add_argument("--every", type=int, default=1, help="only every K-th item of each test file (a sample)")
    ap.add_argument("--chunk-items", type=int, default=40,
                    help="items per pytest process and cluster task, at most (default 40; 0: a whole test file)")
    ap.add_argument("--retry-memory-gb", type=float, default=None, metavar="GB",
                    help="run the items that ran out of memory again, one at a time, under this cap")
    ap.add_argument("--resume", action="store_true",
                    help="keep the items a stopped run finished (its JSON.partial.jsonl) and run the rest")
    ap.add_argument("--all", action="store_true", help="large shapes too (NKILIB_SIMULATION_RUN_ALL=1)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per item (default 300)")
    ap.add_argument("--mem-gb", type=float, default=8.0, help="memory cap per pytest process (default 8)")
    ap.add_argument("--workers", type=int, default=None, help="a local Dask cluster of N worker processes")
    ap.add_argument("--cluster", default=None, help="an existing Dask scheduler, tcp://HOST:PORT")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "conformance.md"))
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "conformance-suite.json"))
    ap.add_argument("--snapshot", default=None, help="the library's commit, for the report")
    ap.add_argument("--compare", metavar="OLD_JSON", default=None,
                    help="a results file this wrote before: name every item that passed there and does not now "
                         "(exit 1 if there is one)")
    ap.add_argument("--from-journal", default=None, metavar="JSONL",
                    help="write the report from the items a stopped run finished (its JSON.partial.jsonl)")
    ap.add_argument("--command", default=None, help="with --from-journal: the command that made the run")
    ap.add_argument("--note", default=None, help="with --from-journal: what the run was")
    return conformance_suite.main(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
