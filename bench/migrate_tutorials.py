"""`nkicc migrate --check --to 0.6` over the SDK's own tutorial kernels, at the
commits that carried each older NKI version.

    python bench/migrate_tutorials.py [SDK] [--markdown docs/migration.md] [--only NAME]

SDK: a git mirror (or clone) of aws-neuron/aws-neuron-sdk (default: $NKI_SDK, else
the mirror at /work/.mirror/...). Each commit's nki/examples/ is extracted with
`git archive` into a scratch folder at run time; nothing of it is copied into this
repository. Without the SDK it says so and exits 0.

For each `*_nki_kernels.py` and each of its kernels: the rules applied, the
`# nkicc-migrate:` comments left, the --check verdict (the kernel as written and as
migrated, simulated on the same random inputs), and the census: NKI names of the
migrated file that the current API reference (bench/api_reference.json, made by
bench/api_coverage.py) lacks, or that the guide deprecates.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
MIRROR = pathlib.Path("/work/.mirror/aws-neuron+aws-neuron-sdk/repo")
# commit -> (what it is, the NKI version of its `import nki` files; neuronxcc.nki files are 0.1)
COMMITS = {
    "1db4d74e": ("2.26 docs (NKI 0.1)", "0.2"),
    "337e6041": ("SDK 2.27", "0.2"),
    "86a92868": ("SDK 2.28", "0.2"),
    "539a73c5": ("SDK 2.29", "0.3"),
}
MM = {"lhsT": "float32[256,256]", "rhs": "float32[256,1024]"}
MAMBA = {"delta": "float32[1,256,512]", "u": "float32[1,256,512]", "A": "float32[256,16]",
         "B": "float32[1,16,512]", "C": "float32[1,16,512]"}
ATTN = {n: "float32[256,64]" for n in ("q_ref", "k_ref", "v_ref")}
# kernel -> (tensor specs, constants): small shapes that satisfy each kernel's asserts
GRIDS = {"nki_tensor_add_kernel_": "2,2"}   # SPMD kernels: their launch grid
KERNELS = {
    "tensor_avgpool_kernel": ({"in_tensor": "float32[2,6,6]"}, {"pool_size": 2}),
    "mamba_v1": (MAMBA, {}), "mamba_v2": (MAMBA, {}), "mamba_v3": (MAMBA, {}),
    "nki_matmul_basic_": ({"lhsT": "float32[128,64]", "rhs": "float32[128,512]"}, {}),
    "nki_matmul_tiled_": (MM, {}), "nki_matmul_hoist_load_": (MM, {}),
    "nki_matmul_block_free_dimension_": ({"lhsT": "float32[256,512]", "rhs": "float32[256,2048]"}, {}),
    "nki_matmul_fully_optimized_": (MM, {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 2}),
    "nki_rmsnorm_kernel": ({"a_tensor": "float32[256,512]", "g_tensor": "float32[512]"}, {}),
    "fused_self_attn_for_SD_small_head_size": (ATTN, {}),
    "nki_tensor_add_kernel_": ({"a_input": "float32[256,1024]", "b_input": "float32[256,1024]"}, {}),
    "nki_tensor_add": ({"a_input": "float32[256,1024]", "b_input": "float32[256,1024]"}, {}),
    "tensor_transpose2D_kernel_": ({"in_tensor": "int8[5,12]"}, {"shape2D": (3, 4)}),
}
UNCOVERED = {"typing"}   # nki submodules of 0.6 the reference stubs do not list (nki.typing: 0.3's type hints)
BEGIN, END = "<!-- tutorials table: bench/migrate_tutorials.py -->", "<!-- end of tutorials table -->"


def extract(sdk: pathlib.Path, commit: str, into: pathlib.Path) -> bool:
    r = subprocess.run(["git", "-C", str(sdk), "archive", commit, "nki/examples"], capture_output=True)
    if r.returncode:
        return False
    with tempfile.TemporaryFile() as f:
        f.write(r.stdout)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    return True


def census(text: str, reference: set[tuple[str, str]], kernel_code: bool = True) -> list[str]:
    """NKI names the text uses (in its kernels, or anywhere) that the current
    reference lacks or the guide deprecates."""
    from nkicc.migrate import nki_names
    from nkicc.migrate_rules import DEPRECATED
    modules = sorted({m for m, _ in reference}, key=len, reverse=True)
    out = []
    for q in sorted(nki_names(text, kernel_code)):
        if q in DEPRECATED or q.startswith("nki.compiler."):
            out.append(q)
            continue
        mod = next((m for m in modules if q.startswith(m + ".")), None)
        if mod is None:
            continue  # nki.typing and other modules the reference stubs do not cover
        name = q[len(mod) + 1:]
        if mod == "nki" and name.split(".")[0] in UNCOVERED:
            continue
        parts = name.split(".")
        if not any((mod, ".".join(parts[:i])) in reference for i in range(len(parts), 0, -1)):
            out.append(q)
    return out


def kernels_of(text: str) -> list[str]:
    import libcst as cst
    from nkicc.migrate_cst import Context, Names, scan_kernels
    module = cst.parse_module(text)
    ctx = Context(Names(module), set())
    scan_kernels(module, ctx)
    return sorted(ctx.kernels)


def run_check(path: pathlib.Path, start: str | None, kernel: str, timeout: float) -> tuple[str, float]:
    specs, consts = KERNELS[kernel]
    cmd = [sys.executable, "-m", "nkicc", "migrate", str(path), "--to", "0.6", "--check", "--kernel", kernel]
    if start:
        cmd += ["--from", start]
    for k, v in specs.items():
        cmd += ["--arg", f"{k}={v}"]
    for k, v in consts.items():
        cmd += ["--const", f"{k}={v!r}"]
    if kernel in GRIDS:
        cmd += ["--grid", GRIDS[kernel]]
    t = time.perf_counter()
    env = dict(os.environ, NKICC_CACHE="0")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=path.parent, env=env)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:.0f} s", time.perf_counter() - t
    s = time.perf_counter() - t
    lines = [x for x in r.stderr.splitlines() if x.startswith(("check:", "error", "internal"))]
    if r.returncode == 0:
        return ("ok: " + lines[-1].split("original's, ", 1)[-1].split(" (max")[0]) if lines else "ok", s
    last = lines[-1] if lines else (r.stderr.strip().splitlines() or ["?"])[-1]
    return "FAIL " + last.replace(str(path.parent) + "/", "")[:220], s


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sdk", nargs="?", default=os.environ.get("NKI_SDK", str(MIRROR)))
    ap.add_argument("--markdown", help="write the table into this file, between its tutorials-table markers")
    ap.add_argument("--only", help="only files whose name contains this")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    sdk = pathlib.Path(a.sdk)
    if not sdk.exists():
        print(f"skipped: no aws-neuron-sdk at {sdk} (give its path, or set NKI_SDK)")
        return 0
    from nkicc.migrate import migrate_file
    reference = {(e["module"], e["name"]) for e in json.loads((REPO / "bench" / "api_reference.json").read_text())["names"]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="nkicc-tutorials-") as tmp:
        for commit, (what, nki_version) in COMMITS.items():
            root = pathlib.Path(tmp) / commit
            if not extract(sdk, commit, root):
                print(f"skipped {commit}: not in {sdk}")
                continue
            for path in sorted(root.glob("nki/examples/*/*_nki_kernels.py")):
                if a.only and a.only not in path.name:
                    continue
                text = path.read_text()
                start = None if "neuronxcc" in text else nki_version
                try:
                    m = migrate_file(str(path), start)
                except Exception as exc:  # noqa: BLE001 - a row of the table, not a crash of the bench
                    why = "no kernel in the file (it drives another file's)" if "has no kernel" in str(exc) else \
                        f"no migration: {str(exc)[:120]}"
                    rows.append(dict(commit=commit, file=path.name, kernel="-", start=start or "0.1",
                                     applied=[], notes=[], check=why, census=[], script=[], s=0))
                    continue
                names_out = census(m.after, reference)
                script_out = [q for q in census(m.after, reference, kernel_code=False) if q not in names_out]
                for kernel in kernels_of(text):
                    verdict, s = run_check(path, start, kernel, a.timeout) if kernel in KERNELS else \
                        ("no shapes for it in this bench", 0.0)
                    rows.append(dict(commit=commit, file=path.name, kernel=kernel, start=m.start,
                                     applied=m.rules_applied, notes=sorted({n.rule for n in m.notes}),
                                     check=verdict, census=names_out, script=script_out, s=round(s, 1)))
                    print(f"{commit} {path.name} {kernel}: {verdict}  ({s:.1f} s; census: {names_out or 'clean'})",
                          flush=True)
    table = render(rows, "python bench/migrate_tutorials.py --markdown docs/migration.md")
    if a.markdown:
        doc = pathlib.Path(a.markdown)
        text = doc.read_text()
        i, j = text.index(BEGIN), text.index(END)
        doc.write_text(text[:i] + table + text[j + len(END):])
        print(f"wrote {doc}")
    else:
        print(table)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


def render(rows, command: str) -> str:
    kernels = [r for r in rows if r["kernel"] != "-"]   # "-": a file with no kernel of its own
    ok = sum(r["check"].startswith("ok") for r in kernels)
    clean = sum(not r["census"] for r in kernels)
    script = sorted({q for r in rows for q in r.get("script", [])})
    lines = [BEGIN, "", f"Made by `{command}`: {ok} of {len(kernels)} kernels pass --check; the migrated kernel "
                        f"code of {clean} of {len(kernels)} uses no name outside the 0.6 reference. Outside the kernels, "
                        f"the tutorials' scripts still use: {', '.join(script) or 'nothing'} (M0213: no 0.6 "
                        "counterpart).", "",
             "| commit | file | kernel | from | rules applied | left to the author | --check | census of the kernel code |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = r["check"].replace("|", "\\|")
        lines.append(f"| {r['commit']} | {r['file']} | {r['kernel']} | {r['start']} | {' '.join(r['applied']) or '-'} "
                     f"| {' '.join(r['notes']) or '-'} | {cell} | {', '.join(r['census']) or 'clean'} |")
    return "\n".join(lines + ["", END])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
