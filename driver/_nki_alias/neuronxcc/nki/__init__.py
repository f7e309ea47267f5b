"""`import neuronxcc.nki as nki`: NKI 0.1 served by nkicc (docs/dialects.md).

`nki.language` and `nki.isa` are NKI 0.1's (nkicc.language.legacy_nl and
legacy_isa: index grids, masks, instructions that return their result, block
dimensions); `nki.jit` compiles with nkicc, as `import nki` does. The 0.1
runtime entry points run on nkicc's simulators: `simulate_kernel` and
`baremetal` on the machine simulator (what nkicc has in place of a device),
`benchmark` reports the timing model's estimate of the kernel's latency,
marked as an estimate, in place of a measurement.
"""
import sys
import types
import zlib

import numpy as np

import nkicc
import nkicc.language.legacy_isa as isa
import nkicc.language.legacy_nl as language
import nkicc.language.typing as typing
from nkicc.ir import dtypes as _dtypes
from nkicc.language.grid import unsupported as _unsupported
from nkicc.language.tracing import current_builder as _current_builder, user_loc as _user_loc
from nkicc.language.tensor import unsupported_name as _unsupported_name

import nki as _nki

__nki_dialect__ = "0.1"

def jit(fn=None, **options):
    """`@nki.jit`, `@nki.jit(mode="simulation")`, ...: an nkicc jit kernel."""
    return _nki.jit(fn, **options)


def simulate_kernel(kernel, *args, **kwargs):
    """`nki.simulate_kernel(kernel, *arrays)`: run on numpy arrays, return numpy arrays."""
    return nkicc.simulate(kernel)(*args, **kwargs)


def baremetal(kernel=None, **_device_options):
    """`@nki.baremetal` / `nki.baremetal(kernel)(*arrays)`: on nkicc, the machine simulator
    (the device options, save_neff_name, artifacts_dir, ..., have nothing to do)."""
    if kernel is None:
        return lambda k: baremetal(k)
    return _nki.jit(getattr(kernel, "fn", kernel))


class LatencyEstimate:
    """`benchmark_result.nc_latency` of 0.1: here every percentile is the timing model's one
    estimate (a simulator has no run-to-run spread), in microseconds."""
    is_estimate = True

    def __init__(self, total_us: float) -> None:
        self.total_us = total_us

    def get_latency_percentile(self, percentile: int) -> float:
        return self.total_us

    def __repr__(self) -> str:
        return f"{self.total_us:.3f} us (estimated by nkicc's timing model, not measured)"


class BenchmarkResult:
    def __init__(self, total_us: float) -> None:
        self.nc_latency = LatencyEstimate(total_us)


class Benchmarked:
    """A kernel under `nki.benchmark`: each call runs it on the machine simulator with timing
    and keeps the estimate in `benchmark_result`."""

    def __init__(self, kernel, warmup: int, iters: int) -> None:
        self.kernel = _nki.jit(getattr(kernel, "fn", kernel))
        self.warmup, self.iters = warmup, iters
        self.benchmark_result = None

    def __call__(self, *args, **kwargs):
        args, kwargs = [_input(a, n) for n, a in enumerate(args)], {k: _input(v, k) for k, v in kwargs.items()}
        compiled = self.kernel.compile(*args, **kwargs)
        compiled.timing = True
        out = compiled.run(*[a for a in args if isinstance(a, np.ndarray)],
                           **{k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)})
        total = compiled.sim.total_ns / 1000.0
        self.benchmark_result = BenchmarkResult(total)
        print(f"nkicc: {compiled.name}: {total:.3f} us estimated by the timing model (nki.benchmark: "
              f"not a measurement; warmup={self.warmup}, iters={self.iters} have nothing to repeat)",
              file=sys.stderr)
        return out


def _input(x, which):
    """0.1's benchmark takes tensor types (`nt.tensor[[250, 512], nl.float32]`) and makes the
    inputs itself: random ones here (never all-ones), the same for every run."""
    spec = x.spec if isinstance(x, typing.TensorType) else None
    if spec is None:
        return x
    seed = zlib.crc32(str(which).encode())
    values = np.random.default_rng(seed).uniform(-1.0, 1.0, spec[0]).astype(np.float32)
    return values.astype(_dtypes.storage(spec[1]))


def benchmark(kernel=None, warmup: int = 5, iters: int = 10, **_device_options):
    """`nki.benchmark(warmup=, iters=)(kernel)`: the timing model's estimate, marked as one."""
    if kernel is None:
        return lambda k: Benchmarked(k, warmup, iters)
    return Benchmarked(kernel, warmup, iters)


profile = benchmark  # 0.1's profiler writes device traces; nkicc gives the estimate (nkicc run --timeline draws one)

def _switch(fn=None, **_options):
    """A compiler switch of 0.1 (`@nki.compiler.skip_middle_end_transformations`, ...): it
    changes how the vendor's compiler optimises, not what the kernel computes; nkicc's passes
    run as they always do."""
    return fn if fn is not None else (lambda f: f)


class _Buffer:
    """`ncc.sbuf` / `ncc.psum`: automatic allocation is nkicc's own, and so is the placement a
    direct allocator (`mod_alloc`, `alloc`, ...) asks for. The vendor's compiler orders
    instructions on tiles placed by hand by their addresses, so what a kernel computes is its
    program order wherever its tiles lie: nkicc's alloc pass places them, and W161 at the line
    says the timing is that of nkicc's placement, not the hand-placed one."""

    def __init__(self, buffer: str) -> None:
        self.buffer = buffer

    def auto_alloc(self, *_args, **_kwargs):
        return getattr(language, self.buffer)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def allocator(*_args, **_kwargs):
            builder = _current_builder()
            if builder is not None:  # (a module may name it outside a kernel: `sb_mod = ncc.sbuf.mod_alloc`)
                builder.warn("W161", f"nki.compiler.{self.buffer}.{name} (direct allocation, NKI 0.1): nkicc's "
                             f"alloc pass places these tiles; the values follow program order, the timing "
                             f"estimate is for nkicc's placement", _user_loc(2))
            return getattr(language, self.buffer)
        return allocator


class _Compiler(types.ModuleType):
    """`neuronxcc.nki.compiler` (`ncc`): 0.1's compiler switches, ignored, and its direct
    allocation (`buffer=ncc.sbuf.mod_alloc(...)`), whose tiles nkicc's alloc pass places (W161);
    any other name is E161, naming the guide's section."""
    skip_middle_end_transformations = enable_stack_allocator = force_auto_alloc = staticmethod(_switch)
    no_reorder = staticmethod(lambda *_a, **_k: None)  # a loop directive: nkicc keeps program order anyway
    sbuf, psum = _Buffer("sbuf"), _Buffer("psum")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _unsupported(f"nki.compiler.{name}", "allocation")


compiler = _Compiler(__name__ + ".compiler")
sys.modules[__name__ + ".compiler"] = compiler
sys.modules[__name__ + ".language"] = language
sys.modules[__name__ + ".isa"] = isa
sys.modules[__name__ + ".isa.constants"] = _nki.isa.constants
sys.modules[__name__ + ".typing"] = typing

__all__ = ["jit", "simulate_kernel", "baremetal", "benchmark", "profile", "language", "isa", "typing", "compiler"]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module 'neuronxcc.nki' has no attribute {name!r}")
    raise _unsupported_name("neuronxcc.nki", name)
