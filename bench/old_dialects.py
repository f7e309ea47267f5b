"""The SDK's tutorial kernels from its history, run as written in their own NKI dialect.

    python bench/old_dialects.py [SDK] [--commit C]... [--only NAME] [--timeout S] [--markdown FILE]

SDK is a git mirror or checkout of aws-neuron/aws-neuron-sdk (default: $NKI_SDK, else
/work/.mirror/aws-neuron+aws-neuron-sdk/repo). At each commit below, every
`nki/examples/**/*_nki_kernels.py` runs in a subprocess under `nkicc run`:
through its tutorial's JAX driver (`<name>_jax.py`, JAX runs on CPU), through the
file's own numpy `__main__` where it has one, and, where the tutorial's only
driver is torch on a Neuron device (torch_xla), through that driver's reference
computed here in numpy on random inputs (never all-ones). Nothing of the SDK is
copied into this repository; without the SDK the script says so and exits 0.

The table it prints (and writes with --markdown) is in docs/dialects.md.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_SDK = "/work/.mirror/aws-neuron+aws-neuron-sdk/repo"
# commit -> (SDK release, the NKI version of its `import nki` namespace; neuronxcc.nki is always 0.1)
COMMITS = {
    "1db4d74e": ("before 2.27", None),
    "337e6041": ("2.27", "0.2"),
    "86a92868": ("2.28", "0.2"),
    "539a73c5": ("2.29", "0.3"),
}
FAILED = re.compile(r"differ|Traceback|AssertionError|matches CPU reference\? False", re.I)


@dataclass
class Run:
    commit: str
    file: str  # under nki/examples
    dialect: str
    driver: str  # "jax: X", "numpy: __main__", "reference: NAME"
    ok: bool = False
    seconds: float = 0.0
    why: str = ""


# --- the references of tutorials whose only driver needs a Neuron device ------------------------

def _rng():
    import numpy as np
    return np.random.default_rng(36)


def _close(got, want, rtol, atol) -> str:
    import numpy as np
    got = np.asarray(got, dtype=np.float32)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        return f"max abs error {float(np.max(np.abs(got - want))):.3g}"
    return ""


def ref_matmul(mod) -> str:
    """matrix_multiplication_torch.py: each kernel against lhs @ rhs (bf16 inputs, fp32 sums)."""
    import ml_dtypes
    import numpy as np
    rng = _rng()
    bf16 = ml_dtypes.bfloat16
    fails = []
    for name, (m, k, n) in (("nki_matmul_basic_", (64, 128, 512)), ("nki_matmul_tiled_", (512, 512, 1024)),
                            ("nki_matmul_hoist_load_", (512, 512, 1024)),
                            ("nki_matmul_block_free_dimension_", (512, 512, 2048)),
                            ("nki_matmul_fully_optimized_", (4096, 1024, 2048))):
        lhs = rng.random((m, k), dtype=np.float32).astype(bf16)
        rhs = rng.random((k, n), dtype=np.float32).astype(bf16)
        want = lhs.astype(np.float32) @ rhs.astype(np.float32)
        why = _close(getattr(mod, name)(np.ascontiguousarray(lhs.T), rhs), want, 1e-2, 1e-2)
        if why:
            fails.append(f"{name}: {why}")
    return "; ".join(fails)


def _mamba_reference(delta, u, A, B, C):
    import numpy as np
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])
    dBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    state = np.zeros(dA.shape[:-1], np.float32)
    scan = np.empty_like(dA)
    for t in range(dA.shape[-1]):
        state = dA[..., t] * state + dBu[..., t]
        scan[..., t] = state
    return (C[:, None, :, :] * scan).sum(axis=-2)


def ref_mamba(mod) -> str:
    """mamba_torch.py's layer (delta, u, A, B, C) -> sum over the state of C * scan(exp(delta A), delta B u)."""
    import numpy as np
    rng = _rng()
    batch, seq, ch, state = 1, 512, 256, 16
    delta = rng.uniform(0.01, 0.1, (batch, ch, seq)).astype(np.float32)
    u = rng.standard_normal((batch, ch, seq)).astype(np.float32)
    A = -rng.uniform(0.5, 1.5, (ch, state)).astype(np.float32)
    B = rng.standard_normal((batch, state, seq)).astype(np.float32)
    C = rng.standard_normal((batch, state, seq)).astype(np.float32)
    want = _mamba_reference(delta, u, A, B, C)
    fails = []
    for name in ("mamba_v1", "mamba_v2", "mamba_v3"):
        why = _close(getattr(mod, name)(delta, u, A, B, C), want, 1e-3, 1e-3)
        if why:
            fails.append(f"{name}: {why}")
    return "; ".join(fails)


def ref_tensor_add(mod) -> str:
    """tensor_addition: a + b, in tiles of 128 x 512."""
    import numpy as np
    rng = _rng()
    a = rng.random((256, 1024), dtype=np.float32).astype(np.float16)
    b = rng.random((256, 1024), dtype=np.float32).astype(np.float16)
    return _close(mod.nki_tensor_add(a, b), (a + b).astype(np.float32), 1e-3, 1e-3)


def _attention_reference(q, k, v):
    import numpy as np
    s = q.T.astype(np.float64) @ k
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.T


def ref_attention(mod) -> str:
    """test_attention.py's numpy attention, softmax(q.T k) v.T, for each version of the kernel."""
    import numpy as np
    rng = _rng()
    fails = []
    names = sorted((n for n in dir(mod) if n.startswith("attn_fwd_v")), key=lambda n: (len(n), n))
    for name in names:
        seq = 128 if name in ("attn_fwd_v1", "attn_fwd_v2") else 1024
        q, k, v = (rng.uniform(-1, 1, (128, seq)).astype(np.float32) for _ in range(3))
        try:
            # (versions 6 and later compute exp and the scores in bf16, as the tutorial says)
            why = _close(getattr(mod, name)(q, k, v), _attention_reference(q, k, v), 1e-2, 1e-2)
        except Exception as exc:  # noqa: BLE001 - one version's failure is a row's note, the rest still run
            why = f"{getattr(exc, 'code', type(exc).__name__)} {getattr(exc, 'message', str(exc))[:70]}"
        if why:
            fails.append(f"{name}: {why}")
    print(f"{len(names) - len(fails)} of {len(names)} versions match")
    return (f"{len(names) - len(fails)} of {len(names)} versions match; " + "; ".join(fails)) if fails else ""


def ref_layernorm(mod) -> str:
    """layernorm_torch.py's reference, (x - mean) / sqrt(var + eps) * gamma + beta, for both versions."""
    import numpy as np
    rng = _rng()
    x = rng.standard_normal((300, 1024)).astype(np.float32)
    gamma, beta = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
    fails = []
    for name in ("nki_layernorm_kernel_v1", "nki_layernorm_kernel_v2"):
        why = _close(getattr(mod, name)(x, 1e-5, gamma, beta), want, 1e-3, 1e-3)
        if why:
            fails.append(f"{name}: {why}")
    return "; ".join(fails)


REFERENCES = {
    "matrix_multiplication_nki_kernels.py": ref_matmul,
    "mamba_nki_kernels.py": ref_mamba,
    "tensor_addition_nki_kernels.py": ref_tensor_add,
    "attention_kernels.py": ref_attention,
    "layernorm_nki_kernel.py": ref_layernorm,
}
# the tutorials' other files: kernels with a reference above, or scripts whose own __main__ runs on CPU
OTHER_KERNELS = ("attention_kernels.py", "layernorm_nki_kernel.py")
CPU_SCRIPTS = ("getting_started_baremetal.py", "getting_started_jax.py", "prof-kernel-benchmark.py",
               "prof-kernel-profile.py", "layernorm_nki_kernel.py")
# files whose own __main__ is a device benchmark at full size, not an accuracy check
NOT_ACCURACY = {"matrix_multiplication_nki_kernels.py"}


def run_reference(path: str) -> int:
    """(in a subprocess) import the kernel file with nkicc serving nki / neuronxcc.nki, check it."""
    sys.path.insert(0, os.path.dirname(path))
    from nkicc.loader import enable_nki_alias
    enable_nki_alias()
    spec = importlib.util.spec_from_file_location("tutorial_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    why = REFERENCES[os.path.basename(path)](mod)
    print("REFERENCE " + (f"differ: {why}" if why else "match"))
    return 1 if why else 0


# --- the runs ----------------------------------------------------------------------------------

def _dialect(text: str, nki_version: str | None) -> str:
    if re.search(r"^\s*(import neuronxcc|from neuronxcc)", text, re.M):
        return "0.1"
    return nki_version or "0.6"


def plan(root: str, commit: str) -> list[tuple[Run, list[str], str]]:
    runs = []
    base = os.path.join(root, "nki", "examples")
    for folder, _, files in sorted(os.walk(base)):
        for f in sorted(files):
            if not f.endswith("_nki_kernels.py") and f not in OTHER_KERNELS + CPU_SCRIPTS:
                continue
            path = os.path.join(folder, f)
            rel = os.path.relpath(path, base)
            text = open(path, encoding="utf-8").read()
            dialect = _dialect(text, COMMITS[commit][1])
            stem = f[:-len("_nki_kernels.py")]
            jax = os.path.join(folder, stem + "_jax.py")
            if os.path.isfile(jax):
                runs.append((Run(commit, rel, dialect, f"jax: {os.path.basename(jax)}"),
                             [sys.executable, "-m", "nkicc", "run", os.path.basename(jax)], folder))
            if "__main__" in text and f not in NOT_ACCURACY and (f.endswith("_nki_kernels.py") or f in CPU_SCRIPTS):
                runs.append((Run(commit, rel, dialect, "numpy: __main__"),
                             [sys.executable, "-m", "nkicc", "run", f], folder))
            if f in REFERENCES:
                runs.append((Run(commit, rel, dialect, f"reference: {REFERENCES[f].__name__}"),
                             [sys.executable, os.path.abspath(__file__), "--reference", path], folder))
    return runs


def execute(run: Run, cmd: list[str], cwd: str, timeout: float) -> None:
    t0 = time.perf_counter()
    # an `import nki` file runs in its release's version (neuronxcc.nki is 0.1 whatever this says)
    env = {**os.environ, "PYTHONPATH": cwd, "NKICC_DIALECT": run.dialect}
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        run.seconds, run.why = time.perf_counter() - t0, f"timed out after {timeout:.0f} s"
        return
    run.seconds = time.perf_counter() - t0
    out = p.stdout + p.stderr
    run.ok = p.returncode == 0 and not FAILED.search(p.stdout)
    if not run.ok:
        lines = [ln for ln in out.strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.match(r"^(E\d{3}|\w+Error|REFERENCE)", ln.strip())]
        run.why = (errors or lines or ["(no output)"])[-1].strip()[:200]


def extract(sdk: str, commit: str, into: str) -> str:
    root = os.path.join(into, commit)
    os.makedirs(root, exist_ok=True)
    archive = subprocess.run(["git", "-C", sdk, "archive", commit, "nki/examples"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", root], input=archive.stdout, check=True)
    return root


def markdown(runs: list[Run], command: str) -> str:
    lines = [f"Made by `{command}`.", "",
             "| commit (SDK) | file | dialect | driver | result | seconds |", "|---|---|---|---|---|---|"]
    for r in runs:
        result = "pass" if r.ok else f"FAIL: {r.why}"
        lines.append(f"| {r.commit} ({COMMITS[r.commit][0]}) | {r.file} | {r.dialect} | {r.driver} | {result} "
                     f"| {r.seconds:.1f} |")
    passed = sum(r.ok for r in runs)
    lines += ["", f"{passed} of {len(runs)} runs pass."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sdk", nargs="?", default=os.environ.get("NKI_SDK") or DEFAULT_SDK)
    ap.add_argument("--commit", action="append", choices=sorted(COMMITS))
    ap.add_argument("--only", action="append", help="run only files whose path contains this")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--markdown")
    ap.add_argument("--reference", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reference:
        return run_reference(args.reference)
    if not os.path.isdir(args.sdk):
        print(f"no aws-neuron-sdk at {args.sdk}: nothing to run (give its path or set NKI_SDK)")
        return 0
    runs = []
    with tempfile.TemporaryDirectory(prefix="nkicc-old-dialects-") as tmp:
        for commit in args.commit or list(COMMITS):
            root = extract(args.sdk, commit, tmp)
            for run, cmd, cwd in plan(root, commit):
                if args.only and not any(o in run.file for o in args.only):
                    continue
                execute(run, cmd, cwd, args.timeout)
                print(f"{run.commit} {run.file:60s} {run.driver:40s} {'pass' if run.ok else 'FAIL ' + run.why}"
                      f" ({run.seconds:.1f} s)", flush=True)
                runs.append(run)
    command = "python bench/old_dialects.py " + " ".join(a for a in (argv or sys.argv[1:]) if a != args.sdk)
    text = markdown(runs, command.strip())
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    print(text)
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
