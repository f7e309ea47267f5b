"""The public NKI tutorial kernels at the shapes their tutorials measured.

Compiles each kernel at that shape (compile seconds; what the allocator had to
do to fit it: reordered statements to shorten live ranges, spills), then
estimates its time on the machine simulator: at the full shape where that is
affordable (at most --sim-limit executed instructions and --sim-mb of
inputs), else at a reduced shape (an outer, independent dimension cut by a factor) scaled back up by that
factor. The estimate is set beside the time the tutorial published for the
hardware, where it published one.

    python bench/tutorial_shapes.py [SDK] [--only NAME] [--sim-limit N] [--sim-mb MB] [--json out.json] [--markdown out.md]

SDK: a checkout of aws-neuron/aws-neuron-sdk, or a git mirror of it (default:
$NKI_SDK). Its kernels (nki/examples/...) are read from there at run time and
never copied into this repository; without it only this project's own
tutorial rewrites (tests/driver/nki_scripts/matmul_tutorial.py) run.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NKICC_CACHE", "0")  # compile seconds are cold compiles

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
MIRROR = pathlib.Path("/work/.mirror/aws-neuron+aws-neuron-sdk/repo")

MM_FULL = {"lhsT": (8192, 4096), "rhs": (8192, 8192)}      # kernel-optimization tutorial, trn2, fp32
MM_QUARTER = {"lhsT": (8192, 1024), "rhs": (8192, 8192)}   # M / 4: the m blocks are independent
MM_HALF = {"lhsT": (8192, 2048), "rhs": (8192, 8192)}
MAMBA = ("delta", "u", "A", "B", "C")


def mamba_shapes(batch, seq, channels, state):
    return dict(zip(MAMBA, ((batch, channels, seq), (batch, channels, seq), (channels, state),
                            (batch, state, seq), (batch, state, seq))))


@dataclasses.dataclass
class Case:
    name: str
    source: str            # "sdk:<path in the SDK>" or "repo:<path in this repository>"
    kernel: str
    shapes: dict           # argument -> shape (float32 unless dtypes says otherwise)
    target: str
    published_ms: float | None = None
    published_where: str = ""
    reduced: tuple | None = None   # (shapes, factor): simulate this and scale the time by factor
    dtypes: dict = dataclasses.field(default_factory=dict)
    consts: dict = dataclasses.field(default_factory=dict)   # compile-time arguments
    # numpy's answer for --check (inputs -> output), and inputs in the kernel's working range
    oracle: object = None
    make_inputs: object = None


def _matmul_oracle(lhsT, rhs):
    return lhsT.astype(np.float64).T @ rhs.astype(np.float64)


def _mamba_inputs(shapes, rng):
    from fidelity_kernels import mamba_inputs
    (batch, channels, seq), (_, states) = shapes["delta"], shapes["A"]
    return list(mamba_inputs(batch, channels, seq, states, seed=int(rng.integers(1 << 30))))


def _mamba_oracle(*arrays):
    from fidelity_kernels import mamba_reference
    return mamba_reference(*arrays)


MM = {"oracle": _matmul_oracle}
MAMBA_CHECK = {"oracle": _mamba_oracle, "make_inputs": _mamba_inputs}


SDK_MM = "sdk:nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py"
SDK_MAMBA = "sdk:nki/examples/fused_mamba/mamba_nki_kernels.py"
OPT = "kernel-optimization.rst (profile screenshots)"
MAMBA_RST = "fused_mamba.rst"
CASES = [
    Case("mm basic (sdk)", SDK_MM, "nki_matmul_basic_", {"lhsT": (128, 64), "rhs": (128, 512)}, "trn2"),
    Case("mm tiled (sdk)", SDK_MM, "nki_matmul_tiled_", MM_FULL, "trn2", 39.89, OPT, (MM_QUARTER, 4), **MM),
    Case("mm hoisted loads (sdk)", SDK_MM, "nki_matmul_hoist_load_", MM_FULL, "trn2", 28.20, OPT, (MM_QUARTER, 4),
         **MM),
    Case("mm block free dimension (sdk)", SDK_MM, "nki_matmul_block_free_dimension_", MM_FULL, "trn2", 28.41, OPT,
         (MM_QUARTER, 4), **MM),
    Case("mm fully optimized (sdk)", SDK_MM, "nki_matmul_fully_optimized_", MM_FULL, "trn2", 28.30, OPT,
         (MM_HALF, 2), **MM),
    Case("tensor add (sdk)", "sdk:nki/examples/tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add",
         {"a_input": (256, 1024), "b_input": (256, 1024)}, "trn2"),
    Case("transpose2d (sdk)", "sdk:nki/examples/transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
         {"in_tensor": (5, 12)}, "trn2", dtypes={"in_tensor": "int8"},
         consts={"shape2D": (3, 4)}),
    Case("avgpool2d (sdk)", "sdk:nki/examples/average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
         {"in_tensor": (2, 6, 6)}, "trn2", dtypes={"in_tensor": "bfloat16"},
         consts={"pool_size": 2}),
    Case("mamba v1 (sdk)", SDK_MAMBA, "mamba_v1", mamba_shapes(1, 512, 256, 16), "trn1", 0.17293, MAMBA_RST, **MAMBA_CHECK),
    Case("mamba v1 4K channels (sdk)", SDK_MAMBA, "mamba_v1", mamba_shapes(1, 512, 4096, 16), "trn1", 2.34, MAMBA_RST,
         (mamba_shapes(1, 512, 512, 16), 8), **MAMBA_CHECK),
    Case("mamba v2 4K channels (sdk)", SDK_MAMBA, "mamba_v2", mamba_shapes(1, 512, 4096, 16), "trn1", 1.61, MAMBA_RST,
         (mamba_shapes(1, 512, 512, 16), 8), **MAMBA_CHECK),
    Case("mamba v2 8K seq (sdk)", SDK_MAMBA, "mamba_v2", mamba_shapes(1, 8192, 4096, 16), "trn1", 53.33, MAMBA_RST,
         (mamba_shapes(1, 8192, 512, 16), 8), **MAMBA_CHECK),
    Case("mamba v3 8K seq (sdk)", SDK_MAMBA, "mamba_v3", mamba_shapes(1, 8192, 4096, 16), "trn1", 27.8, MAMBA_RST,
         (mamba_shapes(1, 8192, 512, 16), 8), **MAMBA_CHECK),
    # this project's own rewrites of the matmul tutorial's steps, at the same shape
    Case("mm tiled (repo)", "repo:tests/driver/nki_scripts/matmul_tutorial.py", "matmul_tiled", MM_FULL, "trn2", 39.89, OPT,
         (MM_QUARTER, 4), **MM),
    Case("mm hoisted (repo)", "repo:tests/driver/nki_scripts/matmul_tutorial.py", "matmul_hoisted", MM_FULL, "trn2", 28.20,
         OPT, (MM_QUARTER, 4), **MM),
    Case("mm block free (repo)", "repo:tests/driver/nki_scripts/matmul_tutorial.py", "matmul_block_free", MM_FULL, "trn2",
         28.41, OPT, (MM_QUARTER, 4), **MM),
    Case("mm blocked (repo)", "repo:tests/driver/nki_scripts/matmul_tutorial.py", "matmul_blocked", MM_FULL, "trn2", 28.30,
         OPT, (MM_QUARTER, 4), **MM),
]


def sdk_files(sdk: pathlib.Path | None, paths, into: pathlib.Path) -> bool:
    """Copy the SDK's kernel files into a scratch folder (from a checkout or a
    git mirror); False when there is no SDK."""
    if sdk is None or not sdk.exists():
        return False
    for rel in paths:
        dst = into / pathlib.Path(rel).name
        if (sdk / rel).is_file():
            dst.write_bytes((sdk / rel).read_bytes())
        else:
            r = subprocess.run(["git", "-C", str(sdk), "show", f"HEAD:{rel}"], capture_output=True)
            if r.returncode:
                return False
            dst.write_bytes(r.stdout)
    return True


def load(case: Case, scratch: pathlib.Path):
    kind, rel = case.source.split(":", 1)
    folder = scratch if kind == "sdk" else REPO / pathlib.Path(rel).parent
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return getattr(importlib.import_module(pathlib.Path(rel).stem), case.kernel)


def specs(case: Case, shapes) -> list[str]:
    return [f"{case.dtypes.get(n, 'float32')}[{','.join(map(str, s))}]" for n, s in shapes.items()]


def arrays(case: Case, shapes, rng):
    import nkicc.language as nl
    if case.make_inputs is not None:
        return case.make_inputs(shapes, rng)
    out = []
    for n, s in shapes.items():
        dt = case.dtypes.get(n, "float32")
        a = rng.standard_normal(s) if dt != "int8" else rng.integers(-100, 100, s)
        out.append(a.astype(getattr(nl, dt) if dt == "bfloat16" else dt))
    return out


def run_case(case: Case, kernel, sim_limit: int, sim_bytes: int, rng, check: bool = False) -> dict:
    import nkicc
    row = {"name": case.name, "kernel": case.kernel, "target": case.target,
           "shapes": {n: list(s) for n, s in case.shapes.items()}, "published_ms": case.published_ms,
           "published_where": case.published_where}
    t = time.perf_counter()
    try:
        c = nkicc.compile(kernel, *specs(case, case.shapes), passes={"target": case.target}, **case.consts)
    except nkicc.NkiccError as e:
        row.update(compile_s=round(time.perf_counter() - t, 2), error=str(e))
        return row
    alloc = c.report["notes"].get("alloc", {})
    row.update(compile_s=round(time.perf_counter() - t, 2), instructions=c.report["instructions_compiled"],
               executed=c.report["instructions_executed"],
               alloc=alloc.get("what_alloc_did", []), memory=alloc.get("memory"))
    shapes, factor = case.shapes, 1
    nbytes = sum(4 * int(np.prod(s)) for s in case.shapes.values())
    if not (check and case.oracle) and (c.report["instructions_executed"] > sim_limit or nbytes > sim_bytes):
        if not case.reduced:
            row["estimate"] = "not simulated (over the simulation limits, no reduced shape)"
            return row
        shapes, factor = case.reduced
        c = nkicc.compile(kernel, *specs(case, shapes), passes={"target": case.target}, **case.consts)
    t = time.perf_counter()
    inputs = arrays(case, shapes, rng)
    got = c.run(*inputs)
    if check and case.oracle:  # the full shape against numpy
        want = np.asarray(case.oracle(*inputs), np.float64).reshape(np.shape(got))
        row["max_err_of_max"] = float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())
    row.update(sim_s=round(time.perf_counter() - t, 1), estimated_ms=c.sim.total_ns * factor / 1e6,
               estimate="full shape" if factor == 1 else f"reduced shape x{factor}",
               pe_active_pct=round(c.sim.engines["pe"].active_pct, 1))
    if case.published_ms:
        row["estimate_over_published"] = round(row["estimated_ms"] / case.published_ms, 2)
    return row


def markdown(rows) -> str:
    """The rows as the table in docs/benchmarks.md."""
    out = ["| kernel | target | shape | compile s | what alloc did | estimated ms | how | published ms | ratio "
           "| max error vs numpy (of max) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in r["shapes"].items())
        did = "; ".join(r.get("alloc") or ["fits as written"]).replace("|", "/")
        est = f"{r['estimated_ms']:.3g}" if "estimated_ms" in r else r.get("error") or r.get("estimate", "")
        out.append(f"| {r['name']} | {r['target']} | {shape} | {r['compile_s']} | {did} | {est} | "
                   f"{r.get('estimate', '')} | {r['published_ms'] or ''} | {r.get('estimate_over_published', '')} | "
                   f"{format(r['max_err_of_max'], '.1e') if 'max_err_of_max' in r else ''} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sdk", nargs="?", default=os.environ.get("NKI_SDK", str(MIRROR)))
    p.add_argument("--only", help="run the cases whose name contains this")
    p.add_argument("--sim-limit", type=int, default=20_000,
                   help="simulate the full shape up to this many executed instructions")
    p.add_argument("--sim-mb", type=int, default=64,
                   help="simulate the full shape only when its inputs are at most this many MiB")
    p.add_argument("--check", action="store_true",
                   help="simulate every case that has a numpy oracle at its full shape and compare (slow)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--markdown", help="write the rows as a markdown table here")
    args = p.parse_args()
    from nkicc.loader import enable_nki_alias
    enable_nki_alias()
    cases = [c for c in CASES if not args.only or args.only in c.name]
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="nkicc-tutorials-"))
    have_sdk = sdk_files(pathlib.Path(args.sdk), sorted({c.source[4:] for c in cases if c.source.startswith("sdk:")}),
                         scratch)
    if not have_sdk:
        print(f"no NKI SDK at {args.sdk}: only this repository's tutorial rewrites run")
    rng = np.random.default_rng(0)
    rows = []
    for case in cases:
        if case.source.startswith("sdk:") and not have_sdk:
            continue
        row = run_case(case, load(case, scratch), args.sim_limit, args.sim_mb * 2**20, rng, args.check)
        for folder in (scratch, REPO):  # file names, not this machine's folders
            row["alloc"] = [a.replace(f"{folder}/", "") for a in row.get("alloc", [])]
        rows.append(row)
        est = f"{row['estimated_ms']:.2f} ms ({row['estimate']})" if "estimated_ms" in row else row.get("estimate", "")
        pub = f", published {row['published_ms']} ms" if row["published_ms"] else ""
        err = f", max error {row['max_err_of_max']:.1e} of max" if "max_err_of_max" in row else ""
        print(f"{case.name}: compile {row['compile_s']} s; {row.get('error') or est}{pub}{err}; "
              f"alloc: {'; '.join(row.get('alloc') or ['fits as written'])}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.markdown:
        pathlib.Path(args.markdown).write_text(markdown(rows))


if __name__ == "__main__":
    main()
