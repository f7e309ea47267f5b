"""The `nkicc` command line.

Exit codes: 0 ok, 1 user error (one line: code, kernel file:line, fix),
2 usage, 3 compile budget exceeded, 4 internal error.
"""
from __future__ import annotations

import ast
import json
import os
import runpy
import sys
import traceback
from typing import List, Optional

import numpy as np
import typer

from .ir import NkiccError
from .report import summary_lines
from .specs import TensorSpec, annotated_specs, parameters

app = typer.Typer(
    help="Compile NKI kernels with loops kept rolled, and simulate them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_USER, EXIT_USAGE, EXIT_BUDGET, EXIT_INTERNAL = 1, 2, 3, 4


def _fail(err: NkiccError) -> None:
    typer.echo(err.one_line(), err=True)
    raise typer.Exit(EXIT_USER)


def _warn(compiled) -> None:
    for line in compiled.report["warnings"]:
        typer.echo(line, err=True)


def _parse_pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise NkiccError("E201", f"{what} {item!r} is not NAME=VALUE", None, f"write {what} NAME=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _const_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _resolve(target: str, args: list[str], consts: list[str]):
    """Load FILE::KERNEL and split its parameters into tensor specs and constants."""
    from .loader import load_kernel
    from .trace import inspect_unwrap

    kernel = load_kernel(target)
    fn = inspect_unwrap(getattr(kernel, "fn", kernel))
    given = {k: TensorSpec.parse(v) for k, v in _parse_pairs(args, "--arg").items()}
    constants = {k: _const_value(v) for k, v in _parse_pairs(consts, "--const").items()}
    defaults = annotated_specs(fn)
    params = parameters(fn)
    names = {p.name for p in params}
    for k in list(given) + list(constants):
        if k not in names:
            raise NkiccError("E201", f"kernel {fn.__name__} has no parameter {k!r}", None,
                             f"its parameters are {', '.join(names)}")
    specs: dict[str, TensorSpec] = {}
    missing = []
    for p in params:
        if p.name in given:
            specs[p.name] = given[p.name]
        elif p.name in constants:
            continue
        elif p.name in defaults:
            specs[p.name] = defaults[p.name]
        elif p.default is p.empty:
            missing.append(p.name)
    if missing:
        raise NkiccError("E201", f"kernel {fn.__name__} needs a spec for {', '.join(missing)}", None,
                         "add --arg NAME=DTYPE[D0,D1,...] (tensors) or --const NAME=VALUE")
    return fn, specs, constants


@app.command("compile")
def compile_cmd(
    target: str = typer.Argument(..., help="The kernel: FILE.py::KERNEL"),
    arg: List[str] = typer.Option([], "--arg", help="A tensor argument: NAME=DTYPE[D0,D1,...], e.g. At=float32[4096,32768]"),
    const: List[str] = typer.Option([], "--const", help="A compile-time constant: NAME=VALUE (a Python literal)"),
    print_ir: bool = typer.Option(False, "--print-ir", help="Print the rolled IR"),
    report: Optional[str] = typer.Option(None, "--report", help="Write the compile report as JSON to this file"),
):
    """Trace and compile a kernel; print what it cost and how its loops were kept rolled."""
    from .api import _compile

    try:
        fn, specs, constants = _resolve(target, arg, const)
        compiled = _compile(fn, specs, constants, None)
    except NkiccError as err:
        _fail(err)
    _warn(compiled)
    if print_ir:
        typer.echo(compiled.print_ir())
    for line in summary_lines(compiled.report):
        typer.echo(line)
    if report:
        with open(report, "w") as f:
            json.dump(compiled.report, f, indent=2)


def _inputs(compiled, how: str, seed: int) -> dict[str, np.ndarray]:
    from .ir import dtypes

    rng = np.random.default_rng(seed)
    if how not in ("random", "ones"):
        if not os.path.isfile(how):
            raise NkiccError("E201", f"--inputs {how!r} is neither random, ones nor an .npz file", None,
                             "use --inputs random, --inputs ones or --inputs FILE.npz")
        data = np.load(how)
        return {k: data[k] for k in compiled.ir.args}
    out = {}
    for name, spec in compiled.specs.items():
        dt = dtypes.storage(spec.dtype)
        if how == "ones":
            out[name] = np.ones(spec.shape, dtype=dt)
        elif np.issubdtype(dt, np.integer):
            out[name] = rng.integers(0, 16, size=spec.shape).astype(dt)
        else:
            out[name] = rng.standard_normal(spec.shape, dtype=np.float32).astype(dt)
    return out


@app.command("simulate")
def simulate_cmd(
    target: str = typer.Argument(..., help="The kernel: FILE.py::KERNEL"),
    arg: List[str] = typer.Option([], "--arg", help="A tensor argument: NAME=DTYPE[D0,D1,...]"),
    const: List[str] = typer.Option([], "--const", help="A compile-time constant: NAME=VALUE"),
    inputs: str = typer.Option("random", "--inputs", help="random, ones, or an .npz file with one array per argument"),
    seed: int = typer.Option(0, "--seed", help="Seed for --inputs random"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Save the outputs to this .npz file"),
):
    """Compile a kernel and run it on the simulator; print output shapes and statistics."""
    from .api import _compile

    try:
        fn, specs, constants = _resolve(target, arg, const)
        compiled = _compile(fn, specs, constants, None)
        arrays = _inputs(compiled, inputs, seed)
        _warn(compiled)
        result = compiled.run(**arrays)
    except NkiccError as err:
        _fail(err)
    outs = result if isinstance(result, tuple) else (() if result is None else (result,))
    for name, value in zip(compiled.ir.outputs, outs):
        v = np.asarray(value, dtype=np.float64)
        nan = int(np.isnan(v).sum())
        finite = v[np.isfinite(v)]
        stats = (f"min {finite.min():.6g}  max {finite.max():.6g}  mean {finite.mean():.6g}  std {finite.std():.6g}"
                 if finite.size else "no finite values")
        typer.echo(f"{name}: {value.dtype}{list(value.shape)}  {stats}  nan {nan}")
    if output:
        np.savez(output, **dict(zip(compiled.ir.outputs, outs)))


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_cmd(
    ctx: typer.Context,
    script: str = typer.Argument(..., help="A Python script written for NKI (import nki, nki.language, nki.isa)"),
):
    """Run an NKI script unchanged, with nkicc behind `import nki` (a real installed nki is never shadowed)."""
    from .loader import enable_nki_alias

    if not os.path.isfile(script):
        _fail(NkiccError("E200", f"no such script: {script}", None, "give the path to a .py file"))
    enable_nki_alias()
    sys.argv = [script, *ctx.args]
    folder = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, folder)
    try:
        runpy.run_path(script, run_name="__main__")
    except NkiccError as err:
        _fail(err)


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except NkiccError as err:
        typer.echo(err.one_line(), err=True)
        sys.exit(EXIT_USER)
    except Exception:  # a bug in nkicc, not in the kernel
        typer.echo("internal error in nkicc (please report it with the traceback below):", err=True)
        traceback.print_exc()
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
