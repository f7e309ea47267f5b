"""The Python face of nkicc: `jit`, `compile`, `simulate`."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np

from .ir import Kernel, NkiccError, count_instructions, format_kernel
from .ir import dtypes as ir_dtypes
from .simulator import run_reference
from .report import peak_rss_mb
from .specs import TensorSpec, bind_call, constant_key
from .trace import TraceResult, inspect_unwrap, trace_kernel


@dataclass
class CompiledKernel:
    """A traced (and, as passes land, compiled) kernel for one argument signature."""
    name: str
    ir: Kernel
    specs: dict[str, TensorSpec]
    constants: dict
    trace: TraceResult
    compile_s: float = 0.0
    report: dict = field(default_factory=dict)

    def run(self, *arrays, **named) -> np.ndarray | tuple[np.ndarray, ...] | None:
        inputs = dict(zip(self.ir.args, arrays))
        inputs.update(named)
        missing = [a for a in self.ir.args if a not in inputs]
        if missing:
            raise NkiccError("E002", f"kernel {self.name} needs arrays for {', '.join(missing)}", None)
        for name in self.ir.args:
            check_array(name, inputs[name], self.specs[name])
        outputs = run_reference(self.ir, inputs)
        values = [outputs[o] for o in self.ir.outputs]
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def print_ir(self) -> str:
        return format_kernel(self.ir)


def check_array(name: str, array, spec: TensorSpec) -> None:
    a = np.asarray(array)
    if tuple(a.shape) != spec.shape:
        raise NkiccError("E002", f"argument {name} has shape {list(a.shape)}, the kernel was compiled for "
                                 f"{list(spec.shape)}", None, "pass an array of the compiled shape")


def compile(kernel, *args, name: str | None = None, unroll: bool = False, **named) -> CompiledKernel:  # noqa: A001
    """Trace `kernel` for the given arguments: numpy arrays, TensorSpecs or
    strings like "float32[128,512]" for tensors; anything else is a constant.
    `unroll=True` traces every static loop iteration by iteration (NKI's own
    semantics; the reference the rolled trace is tested against)."""
    fn = inspect_unwrap(getattr(kernel, "fn", kernel))
    specs, constants, _ = bind_call(fn, args, named, allow_specs=True)
    return _compile(fn, specs, constants, name, unroll=unroll)


def _compile(fn, specs: dict[str, TensorSpec], constants: dict, name: str | None,
             unroll: bool = False) -> CompiledKernel:
    result = trace_kernel(fn, specs, constants, name, unroll=unroll)
    t0 = time.perf_counter()
    kernel = result.kernel
    compile_s = time.perf_counter() - t0
    compiled = CompiledKernel(kernel.name, kernel, specs, constants, result, compile_s)
    compiled.report = build_report(compiled)
    return compiled


def build_report(c: CompiledKernel) -> dict:
    counts = count_instructions(c.ir)
    return {
        "kernel": c.name,
        "args": {k: str(v) for k, v in c.specs.items()},
        "constants": {k: repr(v) for k, v in c.constants.items()},
        "trace_s": round(c.trace.seconds, 6),
        "trace_attempts": c.trace.attempts,
        "compile_s": round(c.compile_s, 6),
        "total_s": round(c.trace.seconds + c.compile_s, 6),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "instructions_rolled": counts.rolled,
        "instructions_unrolled": counts.unrolled,
        "instructions_executed": counts.executed,
        "loops": dict(c.trace.loops),
        "warnings": [w.one_line() for w in c.trace.warnings],
    }


class JitKernel:
    """`@nkicc.jit`: call with numpy arrays, get numpy arrays back. Compiled
    once per argument signature (shapes, dtypes and constant values)."""

    def __init__(self, fn, **options) -> None:
        self.fn = fn
        self.options = options
        self._compiled: dict[tuple, CompiledKernel] = {}
        functools.update_wrapper(self, fn)

    def signature(self, args, kwargs) -> tuple[tuple, dict, dict, dict]:
        specs, constants, arrays = bind_call(inspect_unwrap(self.fn), args, kwargs)
        key = (tuple((k, str(v)) for k, v in specs.items()),
               tuple((k, constant_key(v)) for k, v in constants.items()))
        return key, specs, constants, arrays

    def compile(self, *args, **kwargs) -> CompiledKernel:
        key, specs, constants, _ = self.signature(args, kwargs)
        if key not in self._compiled:
            self._compiled[key] = _compile(inspect_unwrap(self.fn), specs, constants, None, **self.options)
        return self._compiled[key]

    def __call__(self, *args, **kwargs):
        key, specs, constants, arrays = self.signature(args, kwargs)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = _compile(inspect_unwrap(self.fn), specs, constants, None, **self.options)
        return compiled.run(**arrays)

    @property
    def compiled(self) -> list[CompiledKernel]:
        return list(self._compiled.values())


def jit(fn=None, **options):
    """Decorator: `@nkicc.jit` or `@nkicc.jit(...)`."""
    if fn is None:
        return lambda f: JitKernel(f, **options)
    return JitKernel(fn, **options)


def simulate(kernel):
    """`nkicc.simulate(kernel)(*arrays)`: compile for these arrays and run."""
    jk = kernel if isinstance(kernel, JitKernel) else JitKernel(inspect_unwrap(kernel))
    return jk
