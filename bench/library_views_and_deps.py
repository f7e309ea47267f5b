"""Two NKI Library kernels that exercise issue 39, run unchanged on nkicc and
checked against numpy:

- `cascaded_max[2]` on x [4, 5, 4058] returns `max_values.reshape(...)` (a
  view of its output): the caller must get [4, 5, 1] values and indices.
- `qkv` with `bias=` and RMS norm at input [1, 256, 512], fused_qkv_weights
  [512, 384]: its bias broadcast loops over `affine_range` with an
  nc_stream_shuffle that rewrites partition 0 with its own value, a
  dependence whose result does not depend on the order (W190, one warning).

    python bench/library_views_and_deps.py LIBRARY_DIR

LIBRARY_DIR is a checkout (or extracted snapshot) of aws-neuron/nki-library.
Without it the script says so and exits 0; nothing
here is a test dependency. The kernels are imported as bench/conformance.py
imports them (nkicc behind `nki`); the references are numpy, written here.
Exit status 1 when a check fails.
"""
from __future__ import annotations

import importlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _import(nkilib: str, relpath: str, func: str):
    from nkicc.loader import enable_nki_alias
    enable_nki_alias()
    parent = os.path.dirname(nkilib)
    if os.path.basename(parent) == "nkilib_src":  # a checkout: src/nkilib_src/nkilib
        sys.path.insert(0, os.path.dirname(parent))
        package = "nkilib_src.nkilib"
    else:
        sys.path.insert(0, parent)
        package = "nkilib"
    module = importlib.import_module(package + "." + relpath[:-3].replace("/", "."))
    return module, getattr(module, func)


def _exact(name: str, got, want) -> bool:
    got = np.asarray(got)
    ok = got.shape == want.shape and np.array_equal(got, want)
    print(f"  {name}: shape {list(got.shape)} (numpy {list(want.shape)}), "
          f"{'equal to numpy' if ok else 'DIFFERS from numpy'}")
    return ok


def check_cascaded_max(nkilib: str) -> bool:
    _, kernel = _import(nkilib, "core/max/cascaded_max.py", "cascaded_max")
    x = np.random.default_rng(39).standard_normal((4, 5, 4058)).astype(np.float32)
    print("cascaded_max[2] on x [4, 5, 4058]:")
    values, indices = kernel[2](x)
    ok = _exact("values", values, x.max(axis=-1, keepdims=True))
    return _exact("indices", np.asarray(indices).astype(np.int64), x.argmax(axis=-1)[..., None]) and ok


# as bench/conformance_refs.py's qkv cases: the kernel multiplies in bf16
QKV_TOL = (2e-2, 2e-2)


def check_qkv(nkilib: str) -> bool:
    import conformance_refs as refs
    import nkicc
    from nkicc.language.kernel_trace import inspect_unwrap
    module, kernel = _import(nkilib, "core/qkv/qkv.py", "qkv")
    rng = np.random.default_rng(39)
    B, S, H, I = 1, 256, 512, 384
    eps = 1e-6
    x = rng.uniform(-1, 1, (B, S, H)).astype(np.float32)
    w = rng.uniform(-0.1, 0.1, (H, I)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, (1, H)).astype(np.float32)
    bias = rng.uniform(-1, 1, (1, I)).astype(np.float32)
    print(f"qkv, bias and RMS norm, input [{B}, {S}, {H}], fused_qkv_weights [{H}, {I}]:")
    jk = nkicc.jit(inspect_unwrap(getattr(kernel, "fn", kernel)), cache=False)  # (a fresh compile)
    args = dict(input=x, fused_qkv_weights=w, bias=bias, fused_norm_type=module.NormType.RMS_NORM,
                gamma_norm_weights=gamma, norm_eps=eps)
    compiled = jk.compile(**args)
    warnings = compiled.report["warnings"]
    print(f"  compiles with {len(warnings)} warning(s)")
    for line in warnings:
        print(f"    {line.replace(nkilib + os.sep, '')}")
    got = np.asarray(jk(**args), dtype=np.float64)
    want = refs._rms_norm(x, gamma, eps) @ w.astype(np.float64) + bias.astype(np.float64)  # norm, matmul, bias
    ok = got.shape == want.shape  # (refs.compare would reshape a result of the right size)
    ok, err, why = refs.compare(got, want, QKV_TOL) if ok else (False, float("inf"), "shape")
    print(f"  output: shape {list(got.shape)} (numpy {list(want.shape)}), max |got - numpy| {err:.3g} "
          f"(|numpy| up to {np.abs(want).max():.3g}, tolerance rtol, atol = {QKV_TOL}): "
          f"{'matches' if ok else 'DIFFERS: ' + why}")
    return ok and len(warnings) == 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    library_dir = argv[0] if argv else None
    if not library_dir or not os.path.isdir(library_dir):
        print("library_views_and_deps: no NKI Library checkout given; skipping "
              "(pass the path of aws-neuron/nki-library)")
        return 0
    sys.path.insert(0, HERE)
    from conformance import find_nkilib
    nkilib = find_nkilib(library_dir)
    if nkilib is None:
        print(f"library_views_and_deps: {library_dir} holds no nkilib package; skipping")
        return 0
    os.environ.setdefault("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    results = []
    for check in (check_cascaded_max, check_qkv):
        try:
            results.append(check(nkilib))
        except Exception as exc:  # one line, as a user sees it
            print(f"  failed: {type(exc).__name__}: {str(exc).replace(nkilib + os.sep, '')}")
            results.append(False)
    print("all checks pass" if all(results) else "SOME CHECKS FAIL")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
