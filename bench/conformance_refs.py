"""Cases for bench/conformance.py: for each NKI Library kernel, random inputs
at a small shape its docstring allows and what it must compute, in numpy.

The references are this project's own, written from the kernels' documented
semantics (docstrings, argument descriptions); none of the library's code is
here. A case builds its inputs with the kernel's module at hand only to make
the configuration objects the kernel takes (its dataclasses and enums).

Undecorated entry points (rmsnorm_tkg, attention_tkg, rope_hf, ...) are
sub-kernels: the caller's kernel allocates their output tensors and passes
them in. Their cases hold a small top-level kernel of ours that does just that
and returns those outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

try:  # bf16 / fp8 inputs
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
    FP8_E4M3 = np.dtype(ml_dtypes.float8_e4m3)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency of nkicc
    BF16 = FP8_E4M3 = None

F32 = np.float32


@dataclass
class Inputs:
    """One run: keyword arguments for the kernel (arrays and constants), the
    expected outputs, and the tolerance (rtol, atol)."""
    kwargs: dict
    expected: list = field(default_factory=list)
    tol: tuple = (1e-4, 1e-4)
    grid: int | None = None             # an SPMD launch kernel[grid] (LNC=2 kernels)
    check: Callable | None = None       # check(outputs) -> (ok, max_err, message) instead of `expected`
    host: Callable | None = None        # a host-side driver that launches the jit kernel itself
    kernel: Callable | None = None      # a top-level kernel of ours that calls an undecorated sub-kernel
    args: tuple = ()
    # arguments whose arrays hold another NKI dtype's storage (the packed MX `*_x4` types as uint32/uint16)
    dtypes: dict = field(default_factory=dict)

    @property
    def dtype(self) -> str:
        arrays = [v for v in self.kwargs.values() if isinstance(v, np.ndarray)]
        return str(arrays[0].dtype) if arrays else ""

    def describe(self) -> str:
        return " ".join(f"{k}[{','.join(map(str, v.shape))}]" for k, v in self.kwargs.items()
                        if isinstance(v, np.ndarray))


@dataclass
class Case:
    relpath: str   # the module, relative to the nkilib package folder
    func: str      # the kernel function in it
    make: Callable  # make(rng, module) -> Inputs
    target: str = "trn2"  # the MX kernels are NeuronCore-v4 (trn3) code


def compare(got: np.ndarray, want, tol) -> tuple[bool, float, str]:
    """Outputs match when shapes agree and |got - want| <= atol + rtol * |want|;
    integer outputs must be equal. Returns (ok, max abs error, why not)."""
    want = np.asarray(want)
    if got.shape != want.shape:
        if got.size == want.size:
            got = got.reshape(want.shape)  # the documented shape may keep or drop unit dimensions
        else:
            return False, float("inf"), f"shape {list(got.shape)}, expected {list(want.shape)}"
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    err = np.abs(g - w)
    finite = np.isfinite(w)
    if not np.array_equal(np.isfinite(g), finite):
        return False, float("inf"), "non-finite values where the reference has finite ones (or the reverse)"
    err = np.where(finite, err, 0.0)
    worst = float(err.max()) if err.size else 0.0
    rtol, atol = (0.0, 0.0) if np.issubdtype(want.dtype, np.integer) else tol
    bad = err > atol + rtol * np.abs(np.where(finite, w, 0.0))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return False, worst, f"{int(bad.sum())} of {bad.size} elements differ, first at {list(idx)}: " \
                             f"got {g[idx]:.6g}, expected {w[idx]:.6g}"
    return True, worst, ""


def _rand(rng, shape, dtype=F32, lo=-1.0, hi=1.0) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def _f(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _rms_norm(x, gamma, eps):
    x = _f(x)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * _f(gamma).reshape(-1)


def _layer_norm(x, gamma, beta, eps):
    x = _f(x)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * _f(gamma).reshape(-1)
    return y if beta is None else y + _f(beta).reshape(-1)


def _tkg_layout(y_bsh):
    """[B, S, H] -> [128, B*S, H//128]: hidden h = p * (H//128) + j goes to [p, t, j] (one logical core)."""
    B, S, H = y_bsh.shape
    return y_bsh.reshape(B * S, 128, H // 128).transpose(1, 0, 2)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


# --- the cases ---------------------------------------------------------------------------

def cumsum(rng, m):
    x = _rand(rng, (4, 300))  # B up to 2048, H up to 8192
    return Inputs({"x": x}, [np.cumsum(_f(x), axis=-1)], tol=(1e-4, 1e-4))


def cascaded_max(rng, m):
    x = _rand(rng, (1, 1, 2048))  # B*S == 1 runs on one logical core
    flat = x.reshape(1, -1)
    return Inputs({"input_tensor": x}, [flat.max(axis=-1).reshape(1, 1, 1),
                                        flat.argmax(axis=-1).astype(np.uint32).reshape(1, 1, 1)], tol=(0, 0))


def rmsnorm_tkg(rng, m):
    B, S, H = 1, 4, 256
    x, g = _rand(rng, (B, S, H)), _rand(rng, (1, H), lo=0.5, hi=1.5)

    def rmsnorm_tkg_top(input, gamma):
        import nki.language as nl
        out = nl.ndarray((128, B * S, H // 128), dtype=input.dtype, buffer=nl.shared_hbm)
        m.rmsnorm_tkg(input=input, gamma=gamma, output=out, eps=1e-6)
        return out

    return Inputs({"input": x, "gamma": g}, [_tkg_layout(_rms_norm(x, g, 1e-6))], tol=(1e-3, 1e-3),
                  kernel=rmsnorm_tkg_top)


def layernorm_tkg(rng, m):
    B, S, H = 1, 4, 256
    x, g, b = _rand(rng, (B, S, H)), _rand(rng, (1, H), lo=0.5, hi=1.5), _rand(rng, (1, H))

    def layernorm_tkg_top(input, gamma, beta):
        import nki.language as nl
        out = nl.ndarray((128, B * S, H // 128), dtype=input.dtype, buffer=nl.shared_hbm)
        m.layernorm_tkg(input=input, gamma=gamma, output=out, beta=beta, eps=1e-6)
        return out

    return Inputs({"input": x, "gamma": g, "beta": b}, [_tkg_layout(_layer_norm(x, g, b, 1e-6))],
                  tol=(1e-3, 1e-3), kernel=layernorm_tkg_top)


def rope(rng, m):
    d, B, N, S = 64, 1, 2, 16
    x = _rand(rng, (d, B, N, S))
    ang = rng.uniform(0, 2 * np.pi, size=(d // 2, B, S))
    cos, sin = np.cos(ang).astype(F32), np.sin(ang).astype(F32)
    # contiguous layout: the first half of d_head pairs with the second half
    x1, x2 = _f(x[: d // 2]), _f(x[d // 2:])
    c, s = _f(cos)[:, :, None, :], _f(sin)[:, :, None, :]
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=0)
    return Inputs({"x_in": x, "cos": cos, "sin": sin}, [want], tol=(1e-4, 1e-4))


def rope_hf(rng, m):
    B, NQ, NK, S, D = 1, 2, 1, 128, 64
    q, k = _rand(rng, (B, NQ, S, D)), _rand(rng, (B, NK, S, D))
    ang = rng.uniform(0, 2 * np.pi, size=(B, S, D // 2))
    ang = np.concatenate([ang, ang], axis=-1)
    cos, sin = np.cos(ang).astype(F32), np.sin(ang).astype(F32)
    c, s = _f(cos)[:, None], _f(sin)[:, None]
    want_q = _f(q) * c + _rotate_half(_f(q)) * s
    want_k = _f(k) * c + _rotate_half(_f(k)) * s
    # a top-level kernel that writes its q_out / k_out arguments and returns them
    return Inputs({"q": q, "k": k, "q_out": np.zeros_like(q), "k_out": np.zeros_like(k), "cos": cos, "sin": sin},
                  [want_q, want_k], tol=(1e-4, 1e-4))


def router_topk(rng, m):
    from importlib import import_module
    types = import_module(m.__name__.rsplit(".", 2)[0] + ".utils.common_types")
    T, H, E, K = 4, 128, 16, 2
    x, w = _rand(rng, (H, T)), _rand(rng, (H, E), lo=-0.2, hi=0.2)
    logits = _f(x).T @ _f(w)                         # [T, E]
    idx = np.argsort(-logits, axis=-1, kind="stable")[:, :K]  # the K largest logits, largest first
    probs = _softmax(logits)  # router_pre_norm without norm_topk_prob: the affinities are the full softmax

    def router_topk_top(x, w):
        import nki.language as nl
        logits_out = nl.ndarray((T, E), dtype=nl.float32, buffer=nl.shared_hbm)
        affinities = nl.ndarray((T, E), dtype=nl.float32, buffer=nl.shared_hbm)
        index = nl.ndarray((T, K), dtype=nl.uint32, buffer=nl.shared_hbm)
        m.router_topk(x=x, w=w, w_bias=None, router_logits=logits_out, expert_affinities=affinities,
                      expert_index=index, act_fn=types.RouterActFnType.SOFTMAX, k=K,
                      x_hbm_layout=m.XHBMLayout_H_T__0, x_sb_layout=m.XSBLayout_tp102__0)
        return logits_out, index, affinities

    return Inputs({"x": x, "w": w}, [logits, idx.astype(np.uint32), probs], tol=(2e-3, 2e-3),
                  kernel=router_topk_top)


def find_nonzero_indices(rng, m):
    T, C = 128, 4  # C is split over the two logical cores
    x = _rand(rng, (T, C)) * (rng.uniform(size=(T, C)) < 0.4)
    idx = np.full((C, T), -1, np.int32)
    counts = np.zeros((C,), np.int32)
    for c in range(C):
        nz = np.flatnonzero(x[:, c])
        idx[c, : nz.size] = nz
        counts[c] = nz.size
    return Inputs({"input_tensor": x.astype(F32)}, [idx, counts], grid=2)


def indexed_flatten(rng, m):
    E, T, f_len, out_len = 2, 256, 16, 1024  # (T // f_len) % 16 == 0; out_len % 128 == 0
    x = rng.integers(0, 1000, size=(E, T)).astype(np.int32)
    blocks = out_len // f_len
    offsets = np.array([3, 30], np.int32)  # block offsets of each row; row 1 runs past the end and is cut
    out = np.full((blocks, f_len), -1, np.int32)
    per_row = T // f_len
    for r in range(E):
        for p in range(per_row):
            if 0 <= offsets[r] + p < blocks:
                out[offsets[r] + p] = x[r, p * f_len:(p + 1) * f_len]
    return Inputs({"input_tensor": x, "f_len": f_len, "output_len": out_len, "row_offsets": offsets},
                  [out.reshape(-1)], grid=2)


def rmsnorm_quant(rng, m):
    B, S, H = 1, 4, 256  # bf16 activations and gamma, as the kernel's model callers pass them
    x, g = _rand(rng, (B, S, H), BF16, lo=-2, hi=2), _rand(rng, (1, H), BF16, lo=0.5, hi=1.5)
    y = _rms_norm(x, g, 1e-6).reshape(B * S, H)  # row quantisation: one fp32 scale per row, fp8 values

    def check(outs):
        (got,) = outs
        got = np.asarray(got).reshape(B * S, -1)
        if got.shape[1] != H + 4:
            return False, float("inf"), f"{got.shape[1]} values per row, expected H + 4 = {H + 4}"
        scale = np.ascontiguousarray(got[:, H:]).view(np.float32).reshape(-1, 1).astype(np.float64)
        deq = got[:, :H].astype(np.float64) * scale
        return compare(deq, y, (0.07, 0.02 * np.abs(y).max()))  # fp8 e4m3 keeps 3 mantissa bits

    return Inputs({"hidden": x, "ln_w": g, "kargs": m.RmsNormQuantKernelArgs()}, check=check)


def qkv_tkg(rng, m):
    B, S, H, I = 1, 4, 256, 256
    x, w, g = _rand(rng, (B, S, H)), _rand(rng, (H, I), lo=-0.1, hi=0.1), _rand(rng, (1, H), lo=0.5, hi=1.5)
    want = _rms_norm(x, g, 1e-6) @ _f(w)  # default: RMS norm, then the fused QKV projection, [B, S, I]
    return Inputs({"hidden": x, "qkv_w": w, "norm_w": g}, [want], tol=(2e-2, 2e-2))


def qkv_cte(rng, m):
    B, S, H, I = 1, 128, 256, 256
    x, w = _rand(rng, (B, S, H)), _rand(rng, (H, I), lo=-0.1, hi=0.1)
    return Inputs({"input": x, "fused_qkv_weights": w}, [_f(x) @ _f(w)], tol=(2e-2, 2e-2))


def qkv(rng, m):
    B, S, H, I = 1, 4, 256, 256  # the dispatcher: no norm, no bias by default, [B, S, I] out
    x, w = _rand(rng, (B, S, H)), _rand(rng, (H, I), lo=-0.1, hi=0.1)
    return Inputs({"input": x, "fused_qkv_weights": w}, [_f(x) @ _f(w)], tol=(2e-2, 2e-2))


def output_projection_tkg(rng, m):
    D, B, N, S, H = 64, 1, 2, 4, 256
    a, w = _rand(rng, (D, B, N, S)), _rand(rng, (N * D, H), lo=-0.1, hi=0.1)
    # out[b*S + s, h] = sum over n, d of attention[d, b, n, s] * weight[n*D + d, h]
    flat = _f(a).transpose(1, 3, 2, 0).reshape(B * S, N * D)
    return Inputs({"attention": a, "weight": w}, [flat @ _f(w)], tol=(2e-2, 2e-2))


def attention_cte(rng, m):
    B, Sq, Sk, d = 1, 128, 128, 64
    q, k, v = _rand(rng, (B, Sq, d)), _rand(rng, (B, d, Sk)), _rand(rng, (B, Sk, d))  # tp_q, not tp_k
    scores = np.einsum("bqd,bdk->bqk", _f(q), _f(k)) * 0.125
    scores = np.where(np.tril(np.ones((Sq, Sk), bool))[None], scores, -np.inf)  # causal
    want = np.einsum("bqk,bkd->bqd", _softmax(scores), _f(v))
    return Inputs({"q": q, "k": k, "v": v, "scale": 0.125}, [want], tol=(2e-2, 2e-2))


def attention_tkg(rng, m):
    B, H, d, s_act, s_prior = 1, 1, 64, 1, 128
    # q and k_active come in SBUF (cfg.qk_in_sb, required without fused RoPE): [d, B*H*s_act] and [d, B*s_act]
    q_hbm, k_hbm = _rand(rng, (d, B * H * s_act)), _rand(rng, (d, B * s_act))
    q = q_hbm.reshape(d, B, H, s_act).transpose(1, 0, 2, 3)   # [B, d, H, s_act] for the reference
    k_act = k_hbm.reshape(d, B, s_act).transpose(1, 0, 2)     # [B, d, s_act]
    v_act = _rand(rng, (B, 1, s_act, d))
    k_prior, v_prior = _rand(rng, (B, 1, d, s_prior)), _rand(rng, (B, 1, s_prior, d))
    mask = np.ones((s_prior, B, H, s_act), np.uint8)  # every cached position visible
    want = np.zeros((B, H, d, s_act))
    for b in range(B):
        kk, vv = _f(k_prior[b, 0]).copy(), _f(v_prior[b, 0]).copy()
        kk[:, -s_act:] = k_act[b]              # the active tokens take the last cache slots
        vv[-s_act:, :] = v_act[b, 0]
        for h in range(H):
            p = _softmax(kk.T @ _f(q[b, :, h, :]), axis=0)  # [s_prior, s_act], q comes pre-scaled
            want[b, h] = vv.T @ p

    def attention_tkg_top(q, k_active, v_active, k_prior, v_prior, mask):
        from importlib import import_module

        import nki.language as nl
        alloc = import_module(m.__name__.rsplit(".", 2)[0] + ".utils.allocator")
        import nki.isa as nisa
        cfg = m.AttnTKGConfig(bs=B, q_head=H, s_active=s_act, curr_sprior=s_prior, full_sprior=s_prior, d_head=d,
                              qk_in_sb=True)
        sbm = alloc.SbufManager(0, 160 * 1024)  # a region of SBUF (bytes per partition) for the kernel's tiles
        sbm.open_scope()
        q_sb = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.sbuf)
        k_sb = nl.ndarray(k_active.shape, dtype=k_active.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb, src=q)
        nisa.dma_copy(dst=k_sb, src=k_active)
        out = nl.ndarray((B, H, d, s_act), dtype=q.dtype, buffer=nl.shared_hbm)
        m.attention_tkg(q=q_sb, k_active=k_sb, v_active=v_active, k_prior=k_prior, v_prior=v_prior, mask=mask,
                        out=out, cfg=cfg, sbm=sbm)
        sbm.close_scope()
        return out

    kwargs = {"q": q_hbm, "k_active": k_hbm, "v_active": v_act, "k_prior": k_prior, "v_prior": v_prior, "mask": mask}
    return Inputs(kwargs, [want], tol=(2e-2, 2e-2), kernel=attention_tkg_top)


def topk(rng, m):
    B, S, V, K = 1, 2, 1024, 8
    x = _rand(rng, (B, S, V))
    order = np.argsort(-x, axis=-1, kind="stable")[..., :K]
    vals = np.take_along_axis(x, order, axis=-1)
    # a host-side driver: it builds the configuration and launches the jit kernel itself
    return Inputs({"inp": x, "k": K}, [vals, order.astype(np.uint32)], tol=(0, 0),
                  host=lambda: m.topk[1](inp=x, k=K))


def rotational_topk(rng, m):
    """The jit kernel under `topk`, launched directly on 2 logical cores (each takes half the rows) with the
    configuration its factories build: the K largest values of each row of [BxS, V], sorted, largest first,
    and their indices."""
    BxS, V, K = 4, 4096, 16
    x = _rand(rng, (BxS, V))  # float32 draws: no ties
    order = np.argsort(-x, axis=-1, kind="stable")[:, :K]
    vals = np.take_along_axis(x, order, axis=-1)

    def host():
        import nki.language as nl
        tc = m.create_topk_config(inp_shape=x.shape, inp_dtype=nl.float32, k=K, sorted=True, num_programs=2)
        cfg = m.prepare_rotational_constants(m.create_rotational_topk_config(inp_shape=x.shape, topk_config=tc))
        assert cfg.n_stages > 1, "the shape must take the rotational path, not the single-stage scan"
        try:
            return m.rotational_topk[2](inp=x, config=cfg)
        finally:
            m.cleanup_rotational_constants()  # the constants' temporary .npy files

    return Inputs({"inp": x, "k": K}, [vals, order.astype(np.uint32)], tol=(0, 0), host=host)


def conv1d(rng, m):
    B, Cin, Cout, L, K = 1, 16, 32, 32, 3
    x, f = _rand(rng, (B, Cin, L)), _rand(rng, (K, Cin, Cout), lo=-0.3, hi=0.3)
    Lout = L - K + 1
    want = np.zeros((B, Cout, Lout))
    for k in range(K):
        want += np.einsum("bcl,co->bol", _f(x)[:, :, k:k + Lout], _f(f[k]))
    return Inputs({"x_in": x, "filters": f}, [want], tol=(2e-2, 2e-2))


def cross_entropy_forward(rng, m):
    P, V = 32, 2048
    logits = _rand(rng, (P, V), lo=-4, hi=4)
    targets = rng.integers(0, V, size=(P,)).astype(np.int32)
    x = _f(logits)
    mx = x.max(axis=-1)
    lse = mx + np.log(np.exp(x - mx[:, None]).sum(axis=-1))
    loss = lse - x[np.arange(P), targets]
    import nki.language as nl  # the kernel's dtype parameter is an nl dtype
    return Inputs({"logits_hbm": logits, "targets_hbm": targets, "positions_per_batch": 32, "chunk_size": V,
                   "dtype": nl.float32}, [loss, lse], tol=(1e-3, 1e-3))


def dynamic_elementwise_add(rng, m):
    # every M-tile: rows past num_m_tiles * 128 would be left unwritten, which nkicc reports (E173)
    M, H, tiles = 256, 512, 2
    a, b = _rand(rng, (M, H), BF16), _rand(rng, (M, H), BF16)
    n = np.array([[tiles]], np.int32)
    rows = tiles * 128
    want = (_f(a[:rows]) + _f(b[:rows])).astype(BF16).astype(np.float64)

    def check(outs):  # rows past num_m_tiles * 128 are documented as unmodified: not compared
        (got,) = outs
        return compare(np.asarray(got)[:rows].astype(np.float64), want, (1e-2, 1e-2))

    return Inputs({"input_a": a, "input_b": b, "num_m_tiles": n}, check=check)


def output_projection_cte(rng, m):
    B, N, D, S, H = 1, 2, 64, 128, 256
    a, w = _rand(rng, (B, N, D, S)), _rand(rng, (N * D, H), lo=-0.1, hi=0.1)
    # out[b, s, h] = sum over n, d of attention[b, n, d, s] * weight[n*D + d, h]
    flat = _f(a).transpose(0, 3, 1, 2).reshape(B, S, N * D)
    return Inputs({"attention": a, "weight": w}, [flat @ _f(w)], tol=(2e-2, 2e-2))


def depthwise_conv1d(rng, m):
    N, C, W, S = 1, 4, 64, 3  # C is split over the two logical cores
    img, f = _rand(rng, (N, C, 1, W)), _rand(rng, (C, 1, 1, S))
    Q = W - S + 1
    want = np.zeros((N, C, 1, Q))
    for s in range(S):  # each channel correlates with its own filter
        want[:, :, 0, :] += _f(img)[:, :, 0, s:s + Q] * _f(f)[None, :, 0, 0, s, None]
    return Inputs({"img_ref": img, "filter_ref": f, "feature_group_count": C}, [want], tol=(1e-3, 1e-3), grid=2)


def find_nonzero_indices_with_count(rng, m):
    T = 256
    x = (_rand(rng, (1, T)) * (rng.uniform(size=(1, T)) < 0.3)).astype(F32)
    nz = np.flatnonzero(x[0])
    want = np.full((1, T + 1), -1, np.int32)
    want[0, : nz.size] = nz
    want[0, T] = nz.size
    return Inputs({"input_tensor": x}, [want])


def cross_entropy_backward(rng, m):
    P, V = 32, 2048
    logits = _rand(rng, (P, V), lo=-4, hi=4)
    targets = rng.integers(0, V, size=(P,)).astype(np.int32)
    x = _f(logits)
    mx = x.max(axis=-1)
    lse = mx + np.log(np.exp(x - mx[:, None]).sum(axis=-1))
    grad = np.exp(x - lse[:, None])  # softmax, minus one at the target, over the positions ('mean')
    grad[np.arange(P), targets] -= 1.0
    import nki.language as nl
    return Inputs({"logits_hbm": logits, "targets_hbm": targets, "lse_state_hbm": lse.astype(F32),
                   "reduction": "mean", "positions_per_batch": 32, "chunk_size": V, "dtype": nl.float32,
                   "inplace": False}, [grad / P], tol=(1e-3, 1e-5))


def attention_bwd(rng, m):
    """Flash attention's backward pass, written from its documented algorithm:
    P = softmax(scale * Q^T K) (from the forward's log-sum-exp), dV = P^T dY,
    dS = P * (dY^T V - rowsum(dY * O)), dQ = scale * dS K, dK = scale * dS^T Q.
    Two query heads share one key/value head (GQA): dK, dV sum over both."""
    bs, nh, nkv, d, S, tile = 1, 2, 1, 64, 256, 128
    q, o_, dy = _rand(rng, (bs, nh, d, S)), np.zeros((bs, nh, d, S), F32), _rand(rng, (bs, nh, d, S))
    k, v = _rand(rng, (bs, nkv, d, S)), _rand(rng, (bs, nkv, d, S))
    scale = 1.0 / np.sqrt(d)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    lse_in = np.zeros((bs, nh, tile, S // tile), F32)  # lse[b, h, p, t]: query t * tile + p
    for b in range(bs):
        for h in range(nh):
            g = h // (nh // nkv)
            Q, K, V, dY = _f(q[b, h]), _f(k[b, g]), _f(v[b, g]), _f(dy[b, h])  # [d, S] each
            s_ = scale * Q.T @ K                                                # [Sq, Sk]
            top = s_.max(axis=1)
            lse = np.log(np.exp(s_ - top[:, None]).sum(axis=1)) + top
            p = np.exp(s_ - lse[:, None])
            o = V @ p.T                                                         # [d, Sq]
            ds = p * (dY.T @ V - (dY * o).sum(axis=0)[:, None])
            o_[b, h] = o
            dq[b, h] = scale * K @ ds.T
            dk[b, g] += scale * Q @ ds
            dv[b, g] += dY @ p
            lse_in[b, h] = lse.reshape(S // tile, tile).T
    return Inputs({"q_ref": q, "k_ref": k, "v_ref": v, "o_ref": o_, "dy_ref": dy, "lse_ref": lse_in},
                  [dq, dk, dv], tol=(2e-3, 2e-3))


# --- blockwise MoE (context encoding): one reference for the variants ------------------------

def _silu(x):
    return x / (1.0 + np.exp(-x))


def _moe_routing(rng, T, E, B, topk):
    """Each token picks `topk` distinct experts; each expert's tokens fill whole
    blocks, the rest of a block padded with token id T. Returns (token_position_to_id
    [N*B] int32, block_to_expert [N, 1] int32, affinities [T+1, E] with row T zero)."""
    aff = np.zeros((T + 1, E), F32)
    chosen = [rng.permutation(E)[:topk] for _ in range(T)]
    positions, experts = [], []
    for e in range(E):
        toks = [t for t in range(T) if e in chosen[t]]
        nblk = max(1, -(-len(toks) // B))
        toks = toks + [T] * (nblk * B - len(toks))
        positions += toks
        experts += [e] * nblk
        for t in toks:
            if t < T:
                aff[t, e] = rng.uniform(0.1, 1.0)
    return (np.array(positions, np.int32), np.array(experts, np.int32).reshape(-1, 1), aff)


def _moe_reference(h, aff, gup, down, pos, blk_expert, B):
    """output[t] = sum over the blocks holding token t of aff[t, e] * (silu(h_t Wg) * (h_t Wu)) Wd,
    e the block's expert (post-scaling: the affinity multiplies the block's output)."""
    T = aff.shape[0] - 1
    out = np.zeros((T + 1, h.shape[1]))
    for n, e in enumerate(blk_expert.reshape(-1)):
        toks = pos[n * B:(n + 1) * B]
        x = _f(h)[toks]
        inter = _silu(x @ _f(gup[e, :, 0, :])) * (x @ _f(gup[e, :, 1, :]))
        y = (inter @ _f(down[e])) * _f(aff)[toks, e][:, None]
        for i, t in enumerate(toks):
            if t < T:
                out[t] += y[i]
    return out


def _moe_inputs(rng, m, T=255, H=512, I=256, E=2, B=256, topk=2):
    types = _common_types(m)
    pos, blk, aff = _moe_routing(rng, T, E, B, topk)
    h = _rand(rng, (T + 1, H))
    gup = _rand(rng, (E, H, 2, I), lo=-0.1, hi=0.1)
    down = _rand(rng, (E, I, H), lo=-0.1, hi=0.1)
    want = _moe_reference(h, aff, gup, down, pos, blk, B)
    import nki.language as nl
    kwargs = {"hidden_states": h, "expert_affinities_masked": aff.reshape(-1, 1), "gate_up_proj_weight": gup,
              "down_proj_weight": down, "block_size": B, "token_position_to_id": pos, "block_to_expert": blk,
              "activation_function": types.ActFnType.SiLU, "compute_dtype": nl.float32,
              "expert_affinities_scaling_mode": types.ExpertAffinityScaleMode.POST_SCALE}

    def check(got):  # the padding row T is scratch: compare the T token rows
        out = got[0].reshape(-1, H)
        if out.shape[0] == 2 * (T + 1):  # [T+1, 2, H]-style partial sums of two cores
            out = got[0].reshape(T + 1, 2, H).sum(axis=1)
        return compare(out[:T], want[:T], (2e-3, 2e-3))

    return kwargs, check


def _common_types(m):
    from importlib import import_module
    return import_module(m.__name__.split(".core.")[0].split(".experimental.")[0] + ".core.utils.common_types")


def bwmm_shard_on_I(rng, m):
    kwargs, check = _moe_inputs(rng, m)
    return Inputs(kwargs, check=check, grid=2)


def bwmm_shard_on_I_hybrid(rng, m):
    """The hybrid variant stops at the first padded block: `conditions` marks the
    active ones (1), a trailing all-padding block (0) is never computed."""
    kwargs, check = _moe_inputs(rng, m)
    B, T = kwargs["block_size"], kwargs["hidden_states"].shape[0] - 1
    kwargs["token_position_to_id"] = np.concatenate([kwargs["token_position_to_id"], np.full(B, T, np.int32)])
    kwargs["block_to_expert"] = np.concatenate([kwargs["block_to_expert"], np.zeros((1, 1), np.int32)])
    N = kwargs["block_to_expert"].shape[0]
    conditions = np.array([1] * (N - 1) + [0, 0], np.int32)
    return Inputs({"conditions": conditions, **kwargs}, check=check, grid=2)


def bwmm_shard_on_I_dropping(rng, m):
    """Token dropping: one block per expert (block n holds expert n's tokens, up to B);
    a variant for large blocks: it computes B in tiles of 1024 tokens."""
    kwargs, check = _moe_inputs(rng, m, B=1024)
    assert list(kwargs["block_to_expert"].reshape(-1)) == list(range(kwargs["block_to_expert"].shape[0]))
    return Inputs(kwargs, check=check, grid=2)


def bwmm_shard_on_H(rng, m):
    kwargs, check = _moe_inputs(rng, m)
    del kwargs["activation_function"]  # this variant takes no activation argument: it computes SiLU
    return Inputs(kwargs, check=check, grid=2)


def blockwise_mm_bwd(rng, m):
    """The MoE layer's gradients (this project's derivation): per block of expert e
    with tokens x, g = x Wg, u = x Wu, a = silu(g) u, d = a Wd, out += aff d.
    Given dY: dd = aff dY, d aff = sum(dY d), dWd = a^T dd, da = dd Wd^T,
    dg = da u silu'(g), du = da silu(g), dWg = x^T dg, dWu = x^T du,
    dx += dg Wg^T + du Wu^T. The checkpoints are g, u (transposed) and d."""
    T, H, I, E, B = 256, 512, 256, 2, 256
    pos, blk, aff = _moe_routing(rng, T, E, B, topk=2)  # every token in both experts: no padding
    aff = aff[:T]
    h = _rand(rng, (T, H))
    gup = _rand(rng, (E, H, 2, I), lo=-0.1, hi=0.1)
    down = _rand(rng, (E, I, H), lo=-0.1, hi=0.1)
    dy = _rand(rng, (T, H))
    N = blk.shape[0]
    ck_gu, ck_d = np.zeros((N, 2, I, B), F32), np.zeros((N, B, H), F32)
    dh, daff = np.zeros((T, H)), np.zeros((T, E))
    dgup, ddown = np.zeros(gup.shape), np.zeros(down.shape)
    for n, e in enumerate(blk.reshape(-1)):
        toks = pos[n * B:(n + 1) * B]
        x, wg, wu, wd = _f(h)[toks], _f(gup[e, :, 0, :]), _f(gup[e, :, 1, :]), _f(down[e])
        g, u = x @ wg, x @ wu
        sig = 1.0 / (1.0 + np.exp(-g))
        a = g * sig * u
        d = a @ wd
        ck_gu[n, 0], ck_gu[n, 1], ck_d[n] = g.T, u.T, d
        dd = _f(aff)[toks, e][:, None] * _f(dy)[toks]
        daff[toks, e] += (_f(dy)[toks] * d).sum(axis=1)
        ddown[e] += a.T @ dd
        da = dd @ wd.T
        dg = da * u * (sig * (1.0 + g * (1.0 - sig)))
        du = da * g * sig
        dgup[e, :, 0, :] += x.T @ dg
        dgup[e, :, 1, :] += x.T @ du
        np.add.at(dh, toks, dg @ wg.T + du @ wu.T)
    kwargs = {"hidden_states": h, "expert_affinities_masked": aff.reshape(-1, 1), "gate_up_proj_weight": gup,
              "down_proj_weight": down, "gate_up_proj_act_checkpoint_T": ck_gu, "down_proj_act_checkpoint": ck_d,
              "token_position_to_id": pos, "block_to_expert": blk, "output_hidden_states_grad": dy,
              "block_size": B, "compute_dtype": _nl().float32}
    return Inputs(kwargs, [dh, daff.reshape(-1, 1), dgup, ddown], tol=(2e-3, 2e-3), grid=2)


def _nl():
    import nki.language as nl
    return nl


def bwmm_shard_on_block(rng, m):
    kwargs, check = _moe_inputs(rng, m)
    return Inputs(kwargs, check=check, grid=2)

def moe_cte(rng, m):
    """The MoE context-encoding dispatcher, spec shard_on_i: the I-sharded blockwise kernel's case."""
    kwargs, check = _moe_inputs(rng, m)
    kwargs["spec"] = m.MoECTESpec(implementation=m.MoECTEImplementation.shard_on_i)
    return Inputs(kwargs, check=check, grid=2)


def _tkg_router(rng, B, S, H, E, K):
    """The MoE token-generation block's input x [B, S, H], RMS-norm gamma g, the normed tokens y [T, H],
    router weights wr [H, E] and their logits y @ wr [T, E], drawn so that each token's K-th and K+1-th
    logits are at least 0.1 apart: the kernel's bf16 router matmul cannot pick other experts."""
    x, g = _rand(rng, (B, S, H), BF16), _rand(rng, (1, H), BF16, lo=0.5, hi=1.5)
    y = _rms_norm(x, g, 1e-6).reshape(B * S, H)
    while True:
        wr = _rand(rng, (H, E), BF16, lo=-0.1, hi=0.1)
        logits = y @ _f(wr)
        srt = -np.sort(-logits, axis=-1)
        if (srt[:, K - 1] - srt[:, K]).min() >= 0.1:
            return x, g, y, wr, logits


def moe_block_tkg(rng, m):
    """The MoE block for token generation (LNC=2, selective experts, bf16): RMS norm, router logits
    y @ Wr, sigmoid affinities (router_pre_norm), the top K experts of each token, and out[t] = sum over them
    of affinity[t, e] * (silu(y Wg_e) * (y Wu_e)) Wd_e (POST_SCALE); returns (out [T, H], router logits
    [T, E]). The router weights are drawn so that each token's K-th and K+1-th logits are at least 0.1 apart:
    the kernel's bf16 router matmul must not be able to pick another expert than the reference.
    At this snapshot the path stops at the library's own MLPTKGConstantsDimensionSizes(...) call, which leaves
    out its field remainderIFused (a TypeError on any compiler), so this reference has not been compared with
    a run; moe_block_tkg[mx], the same computation with MX weights, runs and matches."""
    B, S, H, I, E, K = 1, 4, 256, 256, 8, 2  # E >= 8: the router's max8 takes 8 or more values per row
    T = B * S
    types = _common_types(m)
    x, g, y, wr, logits = _tkg_router(rng, B, S, H, E, K)
    gup = _rand(rng, (E, H, 2, I), BF16, lo=-0.1, hi=0.1)
    down = _rand(rng, (E, I, H), BF16, lo=-0.1, hi=0.1)
    aff = 1.0 / (1.0 + np.exp(-logits))
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :K]
    out = np.zeros((T, H))
    for t in range(T):
        for e in top[t]:
            inter = _silu(y[t] @ _f(gup[e, :, 0, :])) * (y[t] @ _f(gup[e, :, 1, :]))
            out[t] += aff[t, e] * (inter @ _f(down[e]))
    kwargs = {"inp": x, "gamma": g, "router_weights": wr, "expert_gate_up_weights": gup, "expert_down_weights": down,
              "top_k": K, "router_act_fn": types.RouterActFnType.SIGMOID, "router_pre_norm": True,
              "expert_affinities_scaling_mode": types.ExpertAffinityScaleMode.POST_SCALE}
    return Inputs(kwargs, [out, logits], tol=(3e-2, 3e-2 * max(np.abs(out).max(), np.abs(logits).max())), grid=2)


def _allgather_case(m, func, rng, R, shape):
    """An all-gather over R ranks (a multi-rank simulation, nkicc.run_ranks): rank r holds [rows, W]; every
    rank gets the concatenation along the last axis, rank 0's columns first."""
    xs = [_rand(rng, shape) for _ in range(R)]
    want = np.concatenate(xs, axis=1)

    def host():
        import nki.collectives as ncc
        import nkicc
        return tuple(nkicc.run_ranks(getattr(m, func), R, xs, replica_groups=ncc.ReplicaGroup([list(range(R))]),
                                     tp_degree=R))

    return Inputs({"inp": xs[0], "tp_degree": R}, [want] * R, tol=(0, 0), host=host)


def allgather_sb2sb(rng, m):
    return _allgather_case(m, "allgather_sb2sb", rng, 4, (128, 64))


def allgather_sb2sb_tiled(rng, m):
    return _allgather_case(m, "allgather_sb2sb_tiled", rng, 4, (256, 32))  # two tiles of 128 rows


CASES: dict[str, Case] = {
    "cumsum": Case("core/cumsum/cumsum.py", "cumsum", cumsum),
    "cascaded_max": Case("core/max/cascaded_max.py", "cascaded_max", cascaded_max),
    "rmsnorm_tkg": Case("core/subkernels/rmsnorm_tkg.py", "rmsnorm_tkg", rmsnorm_tkg),
    "layernorm_tkg": Case("core/subkernels/layernorm_tkg.py", "layernorm_tkg", layernorm_tkg),
    "RoPE": Case("core/embeddings/rope.py", "RoPE", rope),
    "rope_hf": Case("core/embeddings/rope_hf.py", "rope_hf", rope_hf),
    "router_topk": Case("core/router_topk/router_topk.py", "router_topk", router_topk),
    "find_nonzero_indices": Case("core/subkernels/find_nonzero_indices.py", "find_nonzero_indices",
                                 find_nonzero_indices),
    "indexed_flatten": Case("core/subkernels/indexed_flatten.py", "indexed_flatten", indexed_flatten),
    "rmsnorm_quant_kernel": Case("core/rmsnorm/rmsnorm_quant.py", "rmsnorm_quant_kernel", rmsnorm_quant),
    "qkv": Case("core/qkv/qkv.py", "qkv", qkv),
    "qkv_tkg": Case("core/qkv/qkv_tkg.py", "qkv_tkg", qkv_tkg),
    "qkv_cte": Case("core/qkv/qkv_cte.py", "qkv_cte", qkv_cte),
    "output_projection_tkg": Case("core/output_projection/output_projection_tkg.py", "output_projection_tkg",
                                  output_projection_tkg),
    "attention_cte": Case("core/attention/attention_cte.py", "attention_cte", attention_cte),
    "attention_tkg": Case("core/attention/attention_tkg.py", "attention_tkg", attention_tkg),
    "topk": Case("core/topk/rotational_topk.py", "topk", topk),
    "rotational_topk": Case("core/topk/rotational_topk.py", "rotational_topk", rotational_topk),
    "conv1d": Case("experimental/conv/conv1d.py", "conv1d", conv1d),
    "cross_entropy_forward": Case("experimental/loss/cross_entropy.py", "cross_entropy_forward",
                                  cross_entropy_forward),
    "dynamic_elementwise_add": Case("experimental/dynamic_shapes/dynamic_elementwise_add.py",
                                    "dynamic_elementwise_add", dynamic_elementwise_add),
    # beyond the must-run list, where a reference is cheap
    "output_projection_cte": Case("core/output_projection/output_projection_cte/output_projection_cte.py",
                                  "output_projection_cte", output_projection_cte),
    "depthwise_conv1d_implicit_gemm": Case("experimental/conv/depthwise_conv1d.py", "depthwise_conv1d_implicit_gemm",
                                           depthwise_conv1d),
    "find_nonzero_indices_with_count": Case("experimental/benchmark/find_nonzero_indices_with_count.py",
                                            "find_nonzero_indices_with_count", find_nonzero_indices_with_count),
    "cross_entropy_backward": Case("experimental/loss/cross_entropy.py", "cross_entropy_backward",
                                   cross_entropy_backward),
    "attention_bwd": Case("core/attention/attention_bwd.py", "attention_bwd", attention_bwd),
    "blockwise_mm_baseline_shard_intermediate": Case("core/moe/moe_cte/bwmm_shard_on_I.py",
                                                     "blockwise_mm_baseline_shard_intermediate", bwmm_shard_on_I),
    "blockwise_mm_baseline_shard_intermediate_hybrid": Case(
        "core/moe/moe_cte/bwmm_shard_on_I.py", "blockwise_mm_baseline_shard_intermediate_hybrid",
        bwmm_shard_on_I_hybrid),
    "blockwise_mm_shard_intermediate_dropping": Case(
        "core/moe/moe_cte/bwmm_shard_on_I.py", "blockwise_mm_shard_intermediate_dropping", bwmm_shard_on_I_dropping),
    "blockwise_mm_baseline_shard_hidden": Case("experimental/moe/forward/bwmm_shard_on_H.py",
                                               "blockwise_mm_baseline_shard_hidden", bwmm_shard_on_H),
    "blockwise_mm_bwd": Case("experimental/moe/bwd/blockwise_mm_backward.py", "blockwise_mm_bwd", blockwise_mm_bwd),
    "bwmm_shard_on_block": Case("core/moe/moe_cte/bwmm_shard_on_block.py", "bwmm_shard_on_block", bwmm_shard_on_block),
    "moe_cte": Case("core/moe/moe_cte/moe_cte.py", "moe_cte", moe_cte),
    "allgather_sb2sb": Case("experimental/collectives/sb2sb_allgather.py", "allgather_sb2sb", allgather_sb2sb),
    "allgather_sb2sb_tiled": Case("experimental/collectives/sb2sb_allgather.py", "allgather_sb2sb_tiled",
                                  allgather_sb2sb_tiled),
    "moe_block_tkg": Case("core/moe_block/moe_block_tkg.py", "moe_block_tkg", moe_block_tkg),
}


# --- MX (microscaling) kernels -------------------------------------------------------------------
# Kept in one block (another session adds non-MX cases above). MX operands are packed `*_x4` tensors
# (Inputs.dtypes names them; the arrays hold their uint storage) with uint8 scales in the SBUF quadrant
# layout the Tensor Engine reads: the scale of partitions 8r..8r+7 of quadrant q at row q*32 + r. The
# references dequantize in numpy and multiply; the other 28 rows of each quadrant hold random codes that
# the kernels must ignore.

def _mx_operand(rng, shape, dtype: str, lo: int = -3, hi: int = 3):
    """(packed storage of `shape`, scales [shape] uint8 in quadrant layout, dequantized [4*P, ...] float64):
    random element values and random power-of-two scales 2^lo .. 2^hi."""
    from nkicc.ir import numerics
    p = shape[0]
    elems = rng.standard_normal(tuple(shape[:-1]) + (shape[-1] * 4,)).astype(np.float32)
    packed = numerics.pack(elems, dtype)
    values = numerics.unpack(packed, dtype).astype(np.float64).reshape(tuple(shape) + (4,))
    codes = rng.integers(127 + lo, 128 + hi, size=shape).astype(np.uint8)  # every row random: only q*32+r are read
    group = np.array([(i // 32) * 32 + (i % 32) // 8 for i in range(p)])
    scale = 2.0 ** (codes[group].astype(np.float64) - 127)
    deq = values * scale[..., None]                                   # [P, ..., F, 4]
    deq = np.moveaxis(deq, -1, 1)                                     # [P, 4, ..., F]: contraction 4p + lane
    return packed, codes, deq.reshape((4 * p,) + tuple(shape[1:]))


def down_projection_mx(rng, m):
    """One expert of the MoE token-generation down projection, LNC=1: out[T, H] = affinity[t] *
    (act.T @ weight + bias) with act [128(I/4), 1, T] MXFP8 and weight [128(I/4), 1, H] MXFP4."""
    T, H, I = 4, 512, 512
    act, act_sc, a = _mx_operand(rng, (128, I // 512, T), "float8_e4m3fn_x4")
    w, w_sc, b = _mx_operand(rng, (128, I // 512, H), "float4_e2m1fn_x4")
    bias = _rand(rng, (T, H), BF16)
    aff = _rand(rng, (T, 1), lo=0.1, hi=1.0)
    want = aff.astype(np.float64) * (a.reshape(I, T).T @ b.reshape(I, H) + _f(bias))

    def down_projection_mx_top(act, act_scale, weight, weight_scale, bias, affinity):
        import nki.isa as nisa
        import nki.language as nl
        sb = []
        for x in (act, act_scale, weight, weight_scale, bias, affinity):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            sb.append(t)
        out_sb = nl.ndarray((T, 1, H), dtype=nl.float32, buffer=nl.sbuf)
        out = nl.ndarray((T, H), dtype=nl.float32, buffer=nl.shared_hbm)
        m.down_projection_mx(act_sb=sb[0], act_scale_sb=sb[1], weight_sb=sb[2], weight_scale_sb=sb[3],
                             bias_sb=sb[4], expert_affinities_masked_sb=sb[5], expert_idx=0, out_sb=out_sb,
                             out_hbm=out, is_first_expert=True, is_last_expert=True, shard_on_I=False)
        return out

    kwargs = {"act": act, "act_scale": act_sc, "weight": w, "weight_scale": w_sc, "bias": bias, "affinity": aff}
    return Inputs(kwargs, [want], tol=(2e-2, 2e-2 * np.abs(want).max()), kernel=down_projection_mx_top,
                  dtypes={"act": "float8_e4m3fn_x4", "weight": "float4_e2m1fn_x4"})


def _mx_decode(packed, codes, dtype: str) -> np.ndarray:
    """A kernel's MX output [P, ..., F] (uint storage) and its uint8 scales, compact (one row per
    8 partitions) -> values [P, ..., F, 4] float64 (lane last)."""
    from nkicc.ir import numerics
    values = numerics.unpack(packed, dtype).astype(np.float64).reshape(packed.shape + (4,))
    group = np.arange(packed.shape[0]) // 8
    return values * (2.0 ** (codes[group].astype(np.float64) - 127))[..., None]


def _gelu_sigmoid(x):
    """The sigmoid approximation of GELU, x * sigmoid(1.702 x) (the library's ActFnType.Swish)."""
    return x / (1.0 + np.exp(-1.702 * x))


def gate_up_projection_mx_shard_I(rng, m):
    """MoE token-generation gate/up projection, LNC=1: act(Wg.T x + bg) * (Wu.T x + bu) for x [H, T]
    MXFP8 and weights [H, I] MXFP4, re-quantized to MXFP8; act the default Swish (x * sigmoid(1.702 x)). Output element (p, i_tile, t, j) of the
    [128, I/512, T] x4 result is intermediate row i_tile*512 + j*128 + p."""
    T, H, I = 4, 512, 512
    x, x_sc, xv = _mx_operand(rng, (128, H // 512, T), "float8_e4m3fn_x4", -5, -3)
    wg, wg_sc, g = _mx_operand(rng, (128, H // 512, I), "float4_e2m1fn_x4", -5, -3)
    wu, wu_sc, u = _mx_operand(rng, (128, H // 512, I), "float4_e2m1fn_x4", -5, -3)
    bg, bu = _rand(rng, (128, I // 512, 4), BF16), _rand(rng, (128, I // 512, 4), BF16)
    xs, gs, us = xv.reshape(H, T), g.reshape(H, I), u.reshape(H, I)
    # bias [p, tile, j] belongs to intermediate row tile*512 + j*128 + p
    b_rows = lambda b: _f(b).transpose(1, 2, 0).reshape(I)  # noqa: E731
    inter = _gelu_sigmoid(gs.T @ xs + b_rows(bg)[:, None]) * (us.T @ xs + b_rows(bu)[:, None])   # [I, T]
    want = inter.reshape(I // 512, 4, 128, T).transpose(2, 0, 3, 1)                    # [128, I/512, T, 4]

    def gate_up_projection_mx_top(x, x_scale, w_gate, w_up, w_gate_scale, w_up_scale, b_gate, b_up):
        import nki.isa as nisa
        import nki.language as nl
        sb = []
        for a in (x, x_scale, w_gate, w_up, w_gate_scale, w_up_scale, b_gate, b_up):
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            sb.append(t)
        q_sb, s_sb = m.gate_up_projection_mx_shard_I(*sb)
        q = nl.ndarray(q_sb.shape, dtype=q_sb.dtype, buffer=nl.shared_hbm)
        s = nl.ndarray((16,) + tuple(s_sb.shape[1:]), dtype=s_sb.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=q, src=q_sb)
        for quadrant in range(4):  # the scale rows: 0..3 of each quadrant
            nisa.dma_copy(dst=s[4 * quadrant:4 * quadrant + 4], src=s_sb[32 * quadrant:32 * quadrant + 4])
        return q, s

    def check(outs):
        got = _mx_decode(outs[0], outs[1], "float8_e4m3fn_x4")
        return compare(got, want, (0.07, 0.02 * np.abs(want).max()))  # bf16 intermediates, then fp8 e4m3

    kwargs = {"x": x, "x_scale": x_sc, "w_gate": wg, "w_up": wu, "w_gate_scale": wg_sc, "w_up_scale": wu_sc,
              "b_gate": bg, "b_up": bu}
    return Inputs(kwargs, check=check, kernel=gate_up_projection_mx_top,
                  dtypes={"x": "float8_e4m3fn_x4", "w_gate": "float4_e2m1fn_x4", "w_up": "float4_e2m1fn_x4"})


def _mx_weight(rng, h: int, cols: int, dtype: str, lo: int = -4, hi: int = -2):
    """An offline-quantized weight as the library stores it in HBM: data [H/4, cols] (row k*128 + p holds
    hidden rows k*512 + 4p + lane) and uint8 scales [H/32, cols] (row r // 8 for data row r); returns
    (data, scales, logical weight [H, cols] float64)."""
    from nkicc.ir import numerics
    elems = rng.standard_normal((h // 4, cols * 4)).astype(np.float32)
    data = numerics.pack(elems, dtype)
    codes = rng.integers(127 + lo, 128 + hi, size=(h // 32, cols)).astype(np.uint8)
    vals = numerics.unpack(data, dtype).astype(np.float64).reshape(h // 4, cols, 4)
    vals = vals * (2.0 ** (codes.astype(np.float64) - 127))[np.arange(h // 4) // 8][..., None]
    return data, codes, vals.transpose(0, 2, 1).reshape(h, cols)  # row 4r + lane = k*512 + 4p + lane


def _shuffle_4h(x):
    """[..., H] viewed [..., H/512, 128, 4] -> stored [..., 4, H/512, 128] (is_h_dim_4h_transposed)."""
    lead, h = x.shape[:-1], x.shape[-1]
    return np.ascontiguousarray(x.reshape(lead + (h // 512, 128, 4)).transpose(
        tuple(range(len(lead))) + (len(lead) + 2, len(lead), len(lead) + 1)).reshape(lead + (h,)))


def qkv_tkg_mx(rng, m):
    """qkv_tkg's MX path: RMS norm, the activations quantized to MXFP8 on device, times an MXFP8 weight
    (offline quantized), [B, S, I] out. Inputs come 4H-shuffled, as the MX path requires."""
    B, S, H, I = 1, 4, 512, 256
    x, g = _rand(rng, (B, S, H), BF16), _rand(rng, (1, H), BF16, lo=0.5, hi=1.5)
    w, w_sc, wv = _mx_weight(rng, H, I, "float8_e4m3fn_x4")
    want = _rms_norm(x, g, 1e-6) @ wv  # [B, S, I]; the activations' fp8 rounding is in the tolerance
    kwargs = {"hidden": _shuffle_4h(x), "qkv_w": w, "norm_w": _shuffle_4h(g),
              "quantization_type": m.QuantizationType.MX, "is_h_dim_4h_transposed": True, "qkv_w_scale": w_sc}
    return Inputs(kwargs, [want], tol=(0.05, 0.03 * np.abs(want).max()), dtypes={"qkv_w": "float8_e4m3fn_x4"})


def qkv_cte_mx(rng, m):
    """qkv_cte's MX path: bf16 activations transposed and quantized to MXFP8 on device, an MXFP8 weight
    [H/4, I] with scales [H/32, I], no norm, [B, S, I] out."""
    B, S, H, I = 1, 128, 512, 256
    x = _rand(rng, (B, S, H), BF16)
    w, w_sc, wv = _mx_weight(rng, H, I, "float8_e4m3fn_x4")
    want = _f(x) @ wv
    kwargs = {"input": x, "fused_qkv_weights": w, "quantization_type": m.QuantizationType.MX, "qkv_w_scale": w_sc,
              "weight_layout": m.QKVWeightLayout.MX_CONTIGUOUS}  # packed row r holds hidden rows 4r..4r+3
    return Inputs(kwargs, [want], tol=(0.05, 0.03 * np.abs(want).max()), dtypes={"fused_qkv_weights": "float8_e4m3fn_x4"})


def _scale_rows_out(nl, nisa, s_sb, rows: int = 16):
    """A top kernel's copy of the scale rows of an SBUF scale tile (rows 0..3 of each quadrant), compact."""
    s = nl.ndarray((rows,) + tuple(s_sb.shape[1:]), dtype=s_sb.dtype, buffer=nl.shared_hbm)
    for quadrant in range(rows // 4):
        nisa.dma_copy(dst=s[4 * quadrant:4 * quadrant + 4], src=s_sb[32 * quadrant:32 * quadrant + 4])
    return s


def _to_hbm(nl, nisa, t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def load_gate_up_weight_scale_bias(rng, m):
    """The MoE TKG gate/up loader, LNC=1: expert 1's up projection (index 1 of the fused pair) into SBUF,
    scales spread to rows 0..3 of each quadrant; exact copies."""
    E, H, I = 2, 1024, 512
    from nkicc.ir import numerics
    w = numerics.random_values(rng, "float4_e2m1fn_x4", (E, 128, 2, H // 512, I))
    sc = rng.integers(120, 130, size=(E, 16, 2, H // 512, I)).astype(np.uint8)
    bias = _rand(rng, (E, 128, 2, I // 512, 4), BF16)

    def load_gate_up_top(weight, scale, bias):
        import nki.isa as nisa
        import nki.language as nl
        w_sb, s_sb, b_sb = m.load_gate_up_weight_scale_bias(weight, scale, bias, expert_idx=1, gate_or_up_idx=1,
                                                              H=H, n_I512_tiles_local=I // 512, I_local=I,
                                                              I_offset=0)
        return _to_hbm(nl, nisa, w_sb), _scale_rows_out(nl, nisa, s_sb), _to_hbm(nl, nisa, b_sb)

    return Inputs({"weight": w, "scale": sc, "bias": bias}, [w[1, :, 1], sc[1, :, 1], bias[1, :, 1]], tol=(0, 0),
                  kernel=load_gate_up_top, dtypes={"weight": "float4_e2m1fn_x4"})


def load_broadcast_down_weight_scale_bias(rng, m):
    """The MoE TKG down-projection loader, LNC=1: expert 0's weight and scales into SBUF (scales to rows
    0..3 of each quadrant) and its bias broadcast to tile_T rows; exact copies."""
    E, H, I, T = 2, 512, 1024, 4
    from nkicc.ir import numerics
    w = numerics.random_values(rng, "float8_e4m3fn_x4", (E, 128, I // 512, H))
    sc = rng.integers(120, 130, size=(E, 16, I // 512, H)).astype(np.uint8)
    bias = _rand(rng, (E, H), BF16)

    def load_down_top(weight, scale, bias):
        import nki.isa as nisa
        import nki.language as nl
        w_sb, s_sb, b_sb = m.load_broadcast_down_weight_scale_bias(weight, scale, bias, expert_idx=0, H=H,
                                                                     tile_I=128, n_I512_tiles=I // 512,
                                                                     tile_offset=0, tile_T=T)
        return _to_hbm(nl, nisa, w_sb), _scale_rows_out(nl, nisa, s_sb), _to_hbm(nl, nisa, b_sb)

    return Inputs({"weight": w, "scale": sc, "bias": bias}, [w[0], sc[0], np.broadcast_to(bias[0], (T, H))],
                  tol=(0, 0), kernel=load_down_top, dtypes={"weight": "float8_e4m3fn_x4"})


def _moe_mx_weights(rng, E, H, I, dtype):
    """MoE expert weights as the MX kernels take them, with their logical matrices:
    gate/up data [E, 128, 2, H/512, I] (element (p, k) lane l: hidden storage column l*H/4 + k*128 + p, the
    [T, 4, H/512, 128] view of the hidden states), scales [E, 16, 2, H/512, I]; down data [E, 128, I/512, H]
    (element (p, j) lane l: intermediate column j*512 + l*128 + p, the layout gate/up's PSUM tiles have),
    scales [E, 16, I/512, H]. Returns (gu, gu_sc, dn, dn_sc, G [E, 2, H, I], D [E, I, H]) float64."""
    from nkicc.ir import numerics
    nh, ni = H // 512, I // 512

    def data_and_logical(shape, group_axis):
        d = numerics.random_values(rng, dtype, shape)
        v = numerics.unpack(d, dtype).astype(np.float64).reshape(shape + (4,))
        sc_shape = list(shape)
        sc_shape[group_axis] = 16
        codes = rng.integers(123, 126, size=sc_shape).astype(np.uint8)
        scale = 2.0 ** (np.take(codes, np.arange(128) // 8, axis=group_axis).astype(np.float64) - 127)
        return d, codes, v * scale[..., None]

    gu, gu_sc, gv = data_and_logical((E, 128, 2, nh, I), 1)          # gv [E, p, 2, k, I, l]
    G = gv.transpose(0, 2, 5, 3, 1, 4).reshape(E, 2, H, I)          # hidden column l*H/4 + k*128 + p
    dn, dn_sc, dv = data_and_logical((E, 128, ni, H), 1)             # dv [E, p, j, H, l]
    D = dv.transpose(0, 2, 4, 1, 3).reshape(E, I, H)                 # intermediate j*512 + l*128 + p
    return gu, gu_sc, dn, dn_sc, G, D


def blockwise_mm_shard_intermediate_mx(rng, m):
    """MoE context encoding, blockwise, I sharded on 2 cores: each block of B token slots runs one expert,
    out[t] = sum over the slots of t of affinity[t, e] * (silu(x G_e) * (x U_e)) D_e (POST_SCALE), MXFP4
    weights, hidden states and intermediates quantized to MXFP8 on device."""
    T, H, I, E, B, N = 256, 512, 1024, 2, 256, 2
    gu, gu_sc, dn, dn_sc, G, D = _moe_mx_weights(rng, E, H, I, "float4_e2m1fn_x4")
    x = _rand(rng, (T, H), BF16)
    tpid = np.concatenate([rng.permutation(T) for _ in range(N)]).astype(np.int32)  # every token once per block
    b2e = np.array([[0], [1]], np.int32)
    aff = _rand(rng, (T * E, 1), BF16, lo=0.1, hi=1.0)
    # the biases, documented optional, are read unconditionally: gate/up bias [E, 128, 2, I/512, 4], element
    # (p, g, j, l) for intermediate column j*512 + l*128 + p of gate (g=0) / up (g=1); down bias [E, H], zero
    # here (each core's partial sum is documented to take it once, the I-sharded sum must not double it)
    gub = _rand(rng, (E, 128, 2, I // 512, 4), BF16, lo=-0.5, hi=0.5)
    gub_cols = _f(gub).transpose(0, 2, 3, 4, 1).reshape(E, 2, I)
    dnb = np.zeros((E, H), BF16)
    xs = _f(x).astype(np.float64)
    want = np.zeros((T, H))
    for blk in range(N):
        e = int(b2e[blk, 0])
        inter = _silu(xs @ G[e, 0] + gub_cols[e, 0]) * (xs @ G[e, 1] + gub_cols[e, 1])
        y = inter @ D[e] + _f(dnb[e])
        toks = tpid[blk * B:(blk + 1) * B]
        want[toks] += _f(aff).reshape(T, E)[toks, e:e + 1] * y[toks]
    kwargs = {"hidden_states": x, "expert_affinities_masked": aff, "gate_up_proj_weight": gu,
              "down_proj_weight": dn, "token_position_to_id": tpid, "block_to_expert": b2e,
              "gate_and_up_proj_bias": gub, "down_proj_bias": dnb,
              "gate_up_proj_scale": gu_sc, "down_proj_scale": dn_sc, "block_size": B,
              "expert_affinities_scaling_mode": m.ExpertAffinityScaleMode.POST_SCALE}
    return Inputs(kwargs, [want], tol=(0.08, 0.04 * np.abs(want).max()), grid=2,
                  dtypes={"gate_up_proj_weight": "float4_e2m1fn_x4", "down_proj_weight": "float4_e2m1fn_x4"})


def _moe_mx_inputs(rng, m, T, H, I, E, B, topk, dtype="float4_e2m1fn_x4", down_bias=True, clamp=None):
    """The blockwise MX MoE kernels' inputs (the layouts of _moe_mx_weights, biases as
    blockwise_mm_shard_intermediate_mx takes them) with _moe_routing's blocks: T tokens, row T of the
    hidden states the padding token (affinity zero). Returns (kwargs, want [T+1, H], where row T is scratch).
    out[t] = sum over the blocks holding t of affinity[t, e] * ((silu(g) * u) D_e + bd_e), g = x G_e + bg_e and
    u = x U_e + bu_e, each clamped to [lower, upper] where `clamp` gives
    (gate_lower, gate_upper, up_lower, up_upper) (the kernels' *_clamp_*_limit arguments)."""
    gu, gu_sc, dn, dn_sc, G, D = _moe_mx_weights(rng, E, H, I, dtype)
    pos, blk, aff = _moe_routing(rng, T, E, B, topk)
    x = _rand(rng, (T + 1, H), BF16)
    aff = aff.astype(BF16)
    gub = _rand(rng, (E, 128, 2, I // 512, 4), BF16, lo=-0.5, hi=0.5)  # (p, g, j, l): column j*512 + l*128 + p
    gub_cols = _f(gub).transpose(0, 2, 3, 4, 1).reshape(E, 2, I)
    dnb = _rand(rng, (E, H), BF16, lo=-4, hi=4) if down_bias else np.zeros((E, H), BF16)
    want = np.zeros((T + 1, H))
    for n, e in enumerate(blk.reshape(-1)):
        toks = pos[n * B:(n + 1) * B]
        xs = _f(x)[toks]
        g, u = xs @ G[e, 0] + gub_cols[e, 0], xs @ G[e, 1] + gub_cols[e, 1]
        if clamp is not None:
            g, u = np.clip(g, clamp[0], clamp[1]), np.clip(u, clamp[2], clamp[3])
        y = (_silu(g) * u) @ D[e] + _f(dnb[e])
        np.add.at(want, toks, _f(aff)[toks, e][:, None] * y)
    types = _common_types(m)
    kwargs = {"hidden_states": x, "expert_affinities_masked": aff.reshape(-1, 1), "gate_up_proj_weight": gu,
              "down_proj_weight": dn, "token_position_to_id": pos, "block_to_expert": blk,
              "gate_and_up_proj_bias": gub, "down_proj_bias": dnb, "gate_up_proj_scale": gu_sc,
              "down_proj_scale": dn_sc, "block_size": B,
              "expert_affinities_scaling_mode": types.ExpertAffinityScaleMode.POST_SCALE}
    if clamp is not None:
        kwargs.update(gate_clamp_lower_limit=clamp[0], gate_clamp_upper_limit=clamp[1],
                      up_clamp_lower_limit=clamp[2], up_clamp_upper_limit=clamp[3])
    return kwargs, want


def _mx_moe_tol(want):
    return (0.08, 0.04 * np.abs(want).max())  # hidden states and intermediates quantized to MXFP8 on device


def blockwise_mm_shard_intermediate_mx_hybrid(rng, m):
    """The hybrid variant: a static loop over the first blocks, then a dynamic loop while `conditions`
    marks the block active (1); N+1 conditions, the last 0. 383 tokens, top-2 of 2 experts: 4 full blocks,
    then a fifth all padding (0), never computed. The static count N - E = 3 is odd: the kernel takes 2,
    the other 2 active blocks run in the dynamic loop."""
    T, H, I, E, B = 383, 512, 1024, 2, 256
    kwargs, want = _moe_mx_inputs(rng, m, T, H, I, E, B, topk=2, down_bias=False)  # I-sharded: see above
    kwargs["token_position_to_id"] = np.concatenate([kwargs["token_position_to_id"], np.full(B, T, np.int32)])
    kwargs["block_to_expert"] = np.concatenate([kwargs["block_to_expert"], np.zeros((1, 1), np.int32)])
    N = kwargs["block_to_expert"].shape[0]
    assert N == 5
    conditions = np.array([1] * (N - 1) + [0, 0], np.int32)

    def check(outs):  # the padding row T is scratch
        return compare(np.asarray(outs[0]).reshape(T + 1, H)[:T], want[:T], _mx_moe_tol(want))

    return Inputs({"conditions": conditions, **kwargs}, check=check, grid=2,
                  dtypes={"gate_up_proj_weight": "float4_e2m1fn_x4", "down_proj_weight": "float4_e2m1fn_x4"})


def bwmm_shard_on_block_mx(rng, m):
    """MoE context encoding sharded on blocks (LNC=2): each core runs whole blocks (full I) and
    accumulates into its own half of the output [2, T+1, H], then the halves are summed into output[0]
    (output[1] zeroed). MXFP8 weights here; 255 tokens, top-2 of 4 experts, a block of 256 each, padded.
    With clamps on gate and up (each binds on a few percent of the values, x G ~ +-3.5 at the 5th/95th
    percentile); without limits the kernel passes op0=None to tensor_scalar, a skipped stage
    (tests/language/test_library_constructs.py covers that form)."""
    T, H, I, E, B = 255, 512, 512, 4, 256
    kwargs, want = _moe_mx_inputs(rng, m, T, H, I, E, B, topk=2, dtype="float8_e4m3fn_x4",
                                  clamp=(-3.0, 4.0, -4.0, 3.0))
    assert kwargs["block_to_expert"].shape[0] == 4

    def check(outs):
        got = np.asarray(outs[0])
        if got.size != 2 * (T + 1) * H:
            return False, float("inf"), f"output shape {list(got.shape)}, expected [2, {T + 1}, {H}]"
        got = got.reshape(2, T + 1, H)
        ok, err, msg = compare(got[0, :T], want[:T], _mx_moe_tol(want))  # row T (padding) is scratch
        if not ok:
            return ok, err, "output[0]: " + msg
        ok, err2, msg = compare(got[1, :T], np.zeros((T, H)), (0, 0))
        return ok, max(err, err2), ("" if ok else "output[1] (the reduced-away half): " + msg)

    return Inputs(kwargs, check=check, grid=2,
                  dtypes={"gate_up_proj_weight": "float8_e4m3fn_x4", "down_proj_weight": "float8_e4m3fn_x4"})


def moe_block_tkg_mx(rng, m):
    """The MoE block for token generation, all-expert MX mode (LNC=2): RMS norm, fused with the MXFP8
    quantization of its output, router logits y @ Wr, sigmoid affinities (router_pre_norm), top K, then every
    expert on every token with the affinities of the unselected experts masked to zero: out[t] = sum over the
    K selected e of affinity[t, e] * (silu(y G_e + bg_e) * (y U_e + bu_e)) D_e + bd_e) (POST_SCALE), MXFP4
    expert weights (the layouts of _moe_mx_weights). Returns (out [T, H], router logits [T, E]). The router
    weights are drawn so that each token's K-th and K+1-th logits are at least 0.1 apart."""
    B, S, H, I, E, K = 1, 4, 512, 512, 8, 2  # E >= 8: the router's max8; T % 4 == 0 (all-expert MX)
    T = B * S
    types = _common_types(m)
    x, g, y, wr, logits = _tkg_router(rng, B, S, H, E, K)
    gu, gu_sc, dn, dn_sc, G, D = _moe_mx_weights(rng, E, H, I, "float4_e2m1fn_x4")
    gub = _rand(rng, (E, 128, 2, I // 512, 4), BF16, lo=-0.5, hi=0.5)  # (p, g, j, l): column j*512 + l*128 + p
    gub_cols = _f(gub).transpose(0, 2, 3, 4, 1).reshape(E, 2, I)
    dnb = _rand(rng, (E, H), BF16, lo=-1, hi=1)
    aff = 1.0 / (1.0 + np.exp(-logits))
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :K]
    out = np.zeros((T, H))
    for t in range(T):
        for e in top[t]:
            inter = _silu(y[t] @ G[e, 0] + gub_cols[e, 0]) * (y[t] @ G[e, 1] + gub_cols[e, 1])
            out[t] += aff[t, e] * (inter @ D[e] + _f(dnb[e]))
    kwargs = {"inp": x, "gamma": g, "router_weights": wr, "expert_gate_up_weights": gu, "expert_down_weights": dn,
              "expert_gate_up_weights_scale": gu_sc, "expert_down_weights_scale": dn_sc,
              "expert_gate_up_bias": gub, "expert_down_bias": dnb,
              "top_k": K, "router_act_fn": types.RouterActFnType.SIGMOID, "router_pre_norm": True,
              "expert_affinities_scaling_mode": types.ExpertAffinityScaleMode.POST_SCALE,
              "is_all_expert": True, "rank_id": np.zeros((1, 1), np.int32)}

    def check(outs):
        ok, err, msg = compare(outs[0], out, _mx_moe_tol(out))
        if not ok:
            return ok, err, "out: " + msg
        ok, err2, msg = compare(outs[1], logits, (2e-2, 2e-2))
        return ok, max(err, err2), ("" if ok else "router_logits: " + msg)

    return Inputs(kwargs, check=check, grid=2,
                  dtypes={"expert_gate_up_weights": "float4_e2m1fn_x4", "expert_down_weights": "float4_e2m1fn_x4"})


def output_projection_cte_mx(rng, m):
    """output_projection_cte's MX path: bf16 attention [B, N, D, S] quantized to MXFP8 on device (its N*D
    axis viewed [N*D/512, 128, 4]), an MXFP4 weight [N*D/4, H] (packed row r holds rows 4r..4r+3) with
    scales [N*D/32, H]; out [B, S, H] in bf16."""
    B, N, D, S, H = 1, 4, 128, 128, 256
    a = _rand(rng, (B, N, D, S), BF16)
    w, w_sc, wv = _mx_weight(rng, N * D, H, "float4_e2m1fn_x4")
    want = np.einsum("bcs,ch->bsh", _f(a).reshape(B, N * D, S).astype(np.float64), wv)
    kwargs = {"attention": a, "weight": w, "quantization_type": m.QuantizationType.MX, "weight_scales": w_sc}
    return Inputs(kwargs, [want], tol=(0.05, 0.03 * np.abs(want).max()), dtypes={"weight": "float4_e2m1fn_x4"})


def rmsnorm_mx_quantize_tkg(rng, m):
    """Fused RMS norm + MX quantization (token generation, LNC=2): the normalized hidden [H0, B*S, H1]
    (hidden column j*128 + p at [p, t, j]) and its MXFP8 form [H0, H/512, B*S], whose element (p, k, t)
    lane l holds hidden column (l*H/512 + k)*128 + p. Each core does half the tokens; sendrecv swaps."""
    B, S, H = 1, 4, 1024
    x, g = _rand(rng, (B, S, H), BF16, lo=-2, hi=2), _rand(rng, (1, H), BF16, lo=0.5, hi=1.5)
    y = _rms_norm(x, g, 1e-6).reshape(B * S, H)                       # [T, H]
    T, H1 = B * S, H // 128
    want_out = y.reshape(T, H1, 128).transpose(2, 0, 1)               # [128, T, H1]
    want_q = y.reshape(T, 4, H // 512, 128).transpose(3, 2, 0, 1)     # [128, H/512, T, 4]

    def rmsnorm_mx_top(input, gamma):
        import nki.isa as nisa
        import nki.language as nl
        out = nl.ndarray((128, T, H1), dtype=input.dtype, buffer=nl.sbuf)
        q = nl.ndarray((128, H // 512, T), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        sc = nl.ndarray((128, H // 512, T), dtype=nl.uint8, buffer=nl.sbuf)
        m.rmsnorm_mx_quantize_tkg(input=input, gamma=gamma, output=out, output_quant=q, output_scale=sc)
        return _to_hbm(nl, nisa, out), _to_hbm(nl, nisa, q), _scale_rows_out(nl, nisa, sc)

    def check(outs):
        ok, err, msg = compare(outs[0], want_out, (2e-2, 2e-2))
        if not ok:
            return ok, err, "output: " + msg
        got_q = _mx_decode(outs[1], outs[2], "float8_e4m3fn_x4")
        ok, err2, msg = compare(got_q, want_q, (0.07, 0.02 * np.abs(want_q).max()))  # fp8 e4m3 of a bf16 value
        return ok, max(err, err2), ("" if ok else "output_quant: " + msg)

    return Inputs({"input": x, "gamma": g}, check=check, kernel=rmsnorm_mx_top, grid=2)


CASES.update({
    "rmsnorm_mx_quantize_tkg": Case("core/subkernels/rmsnorm_mx_quantize_tkg.py", "rmsnorm_mx_quantize_tkg",
                                    rmsnorm_mx_quantize_tkg, target="trn3"),
    "output_projection_cte[mx]": Case("core/output_projection/output_projection_cte/output_projection_cte.py",
                                      "output_projection_cte", output_projection_cte_mx, target="trn3"),
    "blockwise_mm_shard_intermediate_mx": Case("core/moe/moe_cte/bwmm_shard_on_I_mx.py",
                                               "blockwise_mm_shard_intermediate_mx",
                                               blockwise_mm_shard_intermediate_mx, target="trn3"),
    "blockwise_mm_shard_intermediate_mx_hybrid": Case("core/moe/moe_cte/bwmm_shard_on_I_mx.py",
                                                      "blockwise_mm_shard_intermediate_mx_hybrid",
                                                      blockwise_mm_shard_intermediate_mx_hybrid, target="trn3"),
    "moe_block_tkg[mx]": Case("core/moe_block/moe_block_tkg.py", "moe_block_tkg", moe_block_tkg_mx, target="trn3"),
    "bwmm_shard_on_block_mx": Case("core/moe/moe_cte/bwmm_shard_on_block_mx.py", "bwmm_shard_on_block_mx",
                                   bwmm_shard_on_block_mx, target="trn3"),
    "load_gate_up_weight_scale_bias": Case("core/moe/moe_tkg/gate_up_projection_mx.py",
                                           "load_gate_up_weight_scale_bias", load_gate_up_weight_scale_bias, target="trn3"),
    "load_broadcast_down_weight_scale_bias": Case("core/moe/moe_tkg/down_projection_mx.py",
                                                  "load_broadcast_down_weight_scale_bias",
                                                  load_broadcast_down_weight_scale_bias, target="trn3"),
    "qkv_cte[mx]": Case("core/qkv/qkv_cte.py", "qkv_cte", qkv_cte_mx, target="trn3"),
    "qkv_tkg[mx]": Case("core/qkv/qkv_tkg.py", "qkv_tkg", qkv_tkg_mx, target="trn3"),
    "gate_up_projection_mx_shard_I": Case("core/moe/moe_tkg/gate_up_projection_mx.py", "gate_up_projection_mx_shard_I",
                                          gate_up_projection_mx_shard_I, target="trn3"),
    "down_projection_mx": Case("core/moe/moe_tkg/down_projection_mx.py", "down_projection_mx", down_projection_mx, target="trn3"),
})


# --- more collectives and MX loads -------------------------------------------------------------------
# (a block of their own: other sessions add cases above)

def _ring_ranks(kernel, R, per_rank_args, **consts):
    """A host driver: the jit `kernel` (launched on its grid) on R ranks (nkicc.run_ranks), each rank its own
    arrays, the constants shared."""
    def host():
        import nkicc
        return tuple(nkicc.run_ranks(kernel, R, *per_rank_args, **consts))
    return host


def fine_grained_allgather(rng, m):
    """A ring all-gather over R ranks (one replica group) on 2 logical cores each: rank r holds rows [m, K];
    every rank gets all R ranks' rows, rank 0's first: [R, ...] with rank r's m rows at index r (the
    documented shape between, [R, LNC, channels, m/(LNC*channels), K] on this SBUF path, splits those rows in
    order). K = 256: two 128-column transpose tiles (the kernel reads whole 128-column tiles, so K is a
    multiple of 128 or below it)."""
    R, rows, K = 4, 32, 256  # LNC=2 at tp_degree 4: 2 channels, rows % (LNC * channels) == 0
    xs = [_rand(rng, (rows, K)) for _ in range(R)]
    want = np.stack(xs)  # [R, rows, K]
    host = _ring_ranks(m.fine_grained_allgather[2], R, [xs], tp_degree=R, num_groups=1)
    return Inputs({"lhs": xs[0], "tp_degree": R, "num_groups": 1}, [want] * R, tol=(0, 0), host=host)


def allgather_compute_matmul(rng, m):
    """All-gather of the row-sharded lhs over R ranks, then times each rank's own column shard of rhs:
    rank r gets concat(lhs_0..lhs_{R-1}) @ rhs_r, [R, ...] with the rows of rank j's lhs at index j (split in
    order as for fine_grained_allgather). LNC=2 (2 channels), K = 256: two 128-row contraction tiles."""
    R, rows, K, N = 4, 32, 256, 128
    xs = [_rand(rng, (rows, K)) for _ in range(R)]
    ws = [_rand(rng, (K, N)) for _ in range(R)]
    x = np.concatenate(xs).astype(np.float64)  # [R * rows, K]
    want = [(x @ _f(w)).reshape(R, rows, N) for w in ws]
    host = _ring_ranks(m.allgather_compute_matmul[2], R, [xs, ws], tp_degree=R, num_groups=1)
    return Inputs({"lhs": xs[0], "rhs": ws[0], "tp_degree": R, "num_groups": 1}, want,
                  tol=(1e-4, 1e-4 * max(np.abs(w).max() for w in want)), host=host)


def topk_reduce(rng, m):
    """The MoE top-K reduction after a sparse all_to_all_v (LNC=2, H split between the cores): input rows
    [n_src_ranks * T, H + 2] bf16, the last two columns one int32 (little-endian) global token index; out[t]
    = the sum of the first H columns of the rows whose index is t. Each token has K rows; the padding rows'
    indices are 2^16 + t' (t' < T): only their high half differs from a real token's, so the kernel must
    compare the whole int32."""
    n_src, T, K, H = 4, 16, 3, 256
    rows = n_src * T
    idx = np.concatenate([np.repeat(np.arange(T), K), (1 << 16) + rng.integers(0, T, rows - T * K)])
    idx = idx[rng.permutation(rows)].astype(np.int32)
    x = _rand(rng, (rows, H), BF16)
    inp = np.concatenate([x, idx.view(np.uint16).view(BF16).reshape(rows, 2)], axis=1)
    want = np.stack([_f(x)[idx == t].sum(axis=0) for t in range(T)])
    # bf16 accumulation: K - 1 roundings of partial sums below K in magnitude
    return Inputs({"input": inp, "T": T, "K": K}, [want], tol=(0, K * K * 2.0 ** -8), grid=2)


def mxfp_load_performance_wrapper(rng, m):
    """A bf16 [128, K] HBM tensor loaded K-major and quantized to MXFP8 (trn3): data [128, K/512 * 128]
    float8_e4m3fn_x4, the K/512 blocks of 512 columns side by side, element (p, kb*128 + r) lane l holding
    tensor[r, kb*512 + 4p + l] (512 columns onto 128 partitions x 4 lanes, the contraction layout the MX
    matmul reads); uint8 scales [128, K/512 * 128] on rows 0..3 of each quadrant, one per 8 partitions x 4
    lanes (32 consecutive columns of one row). The values span 2^-6 .. 2^6 between those 32-column groups.
    The other 112 scale rows are documented unused and never written: a top kernel of ours calls the
    sub-kernel (it returns SBUF tiles) and returns its data and the 16 scale rows (the whole scale tile
    would be E173, or under undefined="poison" hold the integer poison 4 in those rows)."""
    M, K = 128, 1024
    mag = 2.0 ** rng.integers(-6, 7, size=(M, K // 32))
    x = (rng.standard_normal((M, K)) * np.repeat(mag, 32, axis=1)).astype(BF16)
    want = _f(x).reshape(M, K // 512, 128, 4).transpose(2, 1, 0, 3).reshape(128, K // 512 * M, 4)
    group_max = np.abs(want).reshape(16, 8, -1, 4).max(axis=(1, 3))         # [16, K/512 * M]
    bound = np.repeat(group_max, 8, axis=0)[..., None] * 2.0 ** -14         # fp8 e4m3's subnormal steps

    def mxfp_load_top(tensor):
        import nki.isa as nisa
        import nki.language as nl
        data, scale = m.mxfp_load_performance_wrapper(tensor)
        return _to_hbm(nl, nisa, data), _scale_rows_out(nl, nisa, scale)

    def check(outs):
        got = _mx_decode(outs[0], outs[1], "float8_e4m3fn_x4")
        if got.shape != want.shape:
            return False, float("inf"), f"data {list(outs[0].shape)}, expected [128, {K // 512 * M}]"
        err = np.abs(got - want)
        bad = err > 2.0 ** -4 * np.abs(want) + bound  # e4m3: 3 mantissa bits, half an ulp
        if bad.any():
            i = tuple(int(v) for v in np.argwhere(bad)[0])
            return False, float(err.max()), f"{int(bad.sum())} of {bad.size} values differ, first at {list(i)}: " \
                                             f"got {got[i]:.6g}, expected {want[i]:.6g}"
        return True, float(err.max()), ""

    return Inputs({"tensor": x}, check=check, kernel=mxfp_load_top)


CASES.update({
    "fine_grained_allgather": Case("experimental/collectives/fg_allgather.py", "fine_grained_allgather",
                                   fine_grained_allgather),
    "allgather_compute_matmul": Case("experimental/collectives/fgcc.py", "allgather_compute_matmul",
                                     allgather_compute_matmul),
    "topk_reduce": Case("experimental/collectives/topk_reduce.py", "topk_reduce", topk_reduce),
    "mxfp_load_performance_wrapper": Case("experimental/mxfp_subkernels/mxfp_load_utils.py",
                                          "mxfp_load_performance_wrapper", mxfp_load_performance_wrapper,
                                          target="trn3"),
})
