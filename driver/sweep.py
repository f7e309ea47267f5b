"""`nkicc tune` / `nkicc.tune()`: sweep a kernel's compile-time constants (and
targets) over their cross product; each variant is compiled and simulated
(timing on) as one task on a Dask cluster, and the variants are ranked by the
simulator's estimated time.

Each task runs `nkicc simulate FILE.py::KERNEL --const ... --report R` in a
process of its own (nkicc.child), so a row is exactly what that command, typed
by hand, reports, and the best row's command line can be pasted to see it
again. A variant that fails (a user error in that variant, a timeout, a worker
that dies) is one row with a one-line error; the others go on.

Workers load the kernel by its path: with `cluster=` the file (and whatever it
imports) must be at the same path on every worker's machine, e.g. a shared
filesystem or the same checkout.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
import os
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from .child import run_nkicc
from .cluster import Counts, connect, default_workers, run_tasks
from .ir import NkiccError
from .language.kernel_trace import inspect_unwrap
from .loader import const_value, resolve_kernel
from .passes import registry, resolve_target
from .specs import TensorSpec
from .task_progress import progress_bar


@dataclass(frozen=True)
class VariantTask:
    """What a worker is sent for one variant: the `nkicc` arguments to run."""
    index: int
    args: tuple[str, ...]
    timeout: float | None


@dataclass
class Row:
    """One variant of a sweep and what its compile and simulation reported.
    status: "ok", "failed" (error says why, in one line), "timeout", or
    "not run" (the sweep was stopped first). Times: estimated_us is the
    simulator's estimate of the kernel on the device; compile_s / trace_s /
    simulate_s are host seconds spent compiling, tracing and simulating it;
    engines maps each engine to the percent of the estimated time it was busy."""
    index: int
    values: dict
    status: str = "ok"
    command: str = ""
    estimated_us: float | None = None
    compile_s: float | None = None
    trace_s: float | None = None
    simulate_s: float | None = None
    wall_s: float | None = None
    spills: int | None = None
    spill_bytes: int | None = None
    engines: dict = field(default_factory=dict)
    cache: str | None = None
    error: str | None = None
    worker: str | None = None
    rank: int | None = None


@dataclass
class TuneResult:
    """The rows of a sweep, best first (failed and unrun rows last, in sweep order)."""
    kernel: str
    sweeps: dict
    rows: list[Row]
    wall_s: float
    workers: int
    interrupted: bool = False

    @property
    def best(self) -> Row | None:
        return self.rows[0] if self.rows and self.rows[0].status == "ok" else None

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "sweeps": self.sweeps, "wall_s": round(self.wall_s, 3),
                "workers": self.workers, "interrupted": self.interrupted,
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), default=str, **kw)


def tune(kernel, sweeps: Mapping[str, Iterable], *, args: Mapping | None = None, consts: Mapping | None = None,
         targets: str | Sequence[str] | None = None, inputs: str = "random", seed: int = 0,
         workers: int | None = None, cluster: str | None = None, timeout: float | None = None,
         cache: bool = True, options: Sequence[str] = (),
         progress: bool | Callable[[Counts], None] | None = None) -> TuneResult:
    """Compile and simulate every variant of `kernel` in the cross product of
    `sweeps` ({"TILES": [1, 2, 4], ...}, constant parameters of the kernel) and
    `targets`, on a Dask cluster; rows ranked by estimated time.

    kernel: "FILE.py::KERNEL", or a kernel (an @nkicc.jit function) defined in a
    .py file. args: tensor specs {name: "float32[128,512]" | TensorSpec | array}
    for parameters without an annotation; consts: fixed constants. workers: size
    of the local cluster (default: one per core); cluster: "tcp://HOST:PORT" of
    an existing Dask scheduler instead. timeout: seconds per variant. options:
    more `nkicc simulate` flags (["--disable-pass", "licm"]). progress: True for
    a live progress bar (rich; also in a notebook), or a function called with
    the done / failed / running counts while the sweep runs.
    Ctrl-C stops the sweep: the rows that finished are returned, the rest
    "not run". In a script, call it under `if __name__ == "__main__":` (the
    local cluster's worker processes import the main module)."""
    t0 = time.perf_counter()
    spec, shown = _kernel_ref(kernel)
    sweeps = {str(k): list(v) for k, v in sweeps.items()}
    target_list = _targets(targets)
    consts = dict(consts or {})
    _check_sweeps(sweeps, consts, target_list)
    arg_items = [f"{k}={_spec_text(v)}" for k, v in (args or {}).items()]
    if inputs not in ("random", "ones"):
        inputs = os.path.abspath(inputs)
    variants = _variants(sweeps, target_list)
    _check_kernel(spec, arg_items, consts, variants[0], target_list)

    base = ["simulate", spec, *_flags("--arg", arg_items)]
    tail = ["--inputs", inputs, "--seed", str(seed), *options, *([] if cache else ["--no-cache"])]
    rows, tasks = [], []
    for i, values in enumerate(variants):
        const_items = [f"{k}={_literal(v)}"
                       for k, v in {**consts, **{k: v for k, v in values.items() if k != "target"}}.items()]
        target = ["--target", values["target"]] if "target" in values else []
        argv = [*base, *_flags("--const", const_items), *target, *tail]
        rows.append(Row(i, values, command=_command_line(argv, spec, shown)))
        tasks.append(VariantTask(i, tuple(argv), timeout))
    name = spec.rsplit("::", 1)[1]
    keys = [f"nkicc-tune-{name}-{i}-{os.urandom(4).hex()}" for i in range(len(tasks))]
    n_workers = workers or (None if cluster else min(default_workers(), len(tasks)))
    with progress_bar(progress, len(tasks), "variants") as on_progress, connect(n_workers, cluster) as client:
        n_workers = len(client.nthreads())
        outcomes, interrupted = run_tasks(client, measure, tasks, keys,
                                          failed=lambda r: r.status != "ok", on_progress=on_progress)
    for row, outcome in zip(rows, outcomes):
        if outcome.state == "done":
            measured = outcome.value
            measured.values, measured.command = row.values, row.command
            measured.worker = outcome.worker
            rows[row.index] = measured
        else:
            row.status, row.error, row.worker = outcome.state, outcome.error, outcome.worker
    return TuneResult(shown, sweeps, rank(rows), time.perf_counter() - t0, n_workers, interrupted)


def rank(rows: list[Row]) -> list[Row]:
    """Finished rows by estimated time (ties in sweep order), then the rest in sweep order."""
    ok = sorted((r for r in rows if r.status == "ok"), key=lambda r: (r.estimated_us, r.index))
    for i, r in enumerate(ok, 1):
        r.rank = i
    return ok + sorted((r for r in rows if r.status != "ok"), key=lambda r: r.index)


def measure(task: VariantTask) -> Row:
    """(On a worker.) Compile and simulate one variant in a child process; its
    report becomes the row."""
    with tempfile.TemporaryDirectory(prefix="nkicc-tune-") as folder:
        report_path = os.path.join(folder, "report.json")
        result = run_nkicc([*task.args, "--report", report_path], timeout=task.timeout)
        row = Row(task.index, {}, wall_s=round(result.seconds, 3))
        if not result.ok:
            row.status = "timeout" if result.timed_out else "failed"
            row.error = result.error_line()
            return row
        try:
            with open(report_path) as f:
                report = json.load(f)
        except (OSError, ValueError) as exc:
            row.status, row.error = "failed", f"internal error in nkicc: no simulation report ({exc})"
            return row
    return fill_row(row, report)


def fill_row(row: Row, report: dict) -> Row:
    """A variant's row from its compile report (with the simulation report under "sim")."""
    sim = report.get("sim") or {}
    row.estimated_us = round(sim.get("total_ns", 0.0) / 1000, 3)
    row.compile_s = report.get("compile_s")
    row.trace_s = report.get("trace_s")
    row.simulate_s = sim.get("wall_s")
    row.spills = len(report.get("notes", {}).get("alloc", {}).get("spills", []))
    row.spill_bytes = sim.get("spill_bytes")
    # the simulation report's engine active percentages, as `nkicc simulate` prints them
    row.engines = {name: round(e.get("active_pct", 0.0), 1) for name, e in sim.get("engines", {}).items()}
    row.cache = (report.get("cache") or {}).get("kernel")
    if not sim:
        row.status, row.error = "failed", "error[E172] no timed simulation (the program was not lowered)"
    return row


def parse_sweep(text: str) -> tuple[str, list]:
    """`NAME=v1,v2,...` -> (NAME, values); values are Python literals where they
    parse as such (so `T=(1,2),(2,4)` is two tuples), else strings."""
    if "=" not in text:
        raise NkiccError("E201", f"--sweep {text!r} is not NAME=v1,v2,...", None, "write --sweep NAME=v1,v2,...")
    name, values = (s.strip() for s in text.split("=", 1))
    try:
        parsed = ast.literal_eval(f"[{values}]")
    except (ValueError, SyntaxError):
        parsed = [const_value(v.strip()) for v in values.split(",")]
    if not name.isidentifier() or not parsed:
        raise NkiccError("E201", f"--sweep {text!r}", None, "write --sweep NAME=v1,v2,... with at least one value")
    return name, parsed


# --- helpers -------------------------------------------------------------------------------


def _kernel_ref(kernel) -> tuple[str, str]:
    """(absolute FILE.py::KERNEL for the workers, the name as the user sees it)."""
    if isinstance(kernel, str):
        if "::" not in kernel:
            raise NkiccError("E200", f"cannot tell the kernel in {kernel!r}", None, "write FILE.py::KERNEL")
        path, name = kernel.rsplit("::", 1)
        if not os.path.isfile(path):
            raise NkiccError("E200", f"no such kernel file: {path}", None, "give the path to a .py file")
        return f"{os.path.abspath(path)}::{name}", kernel
    fn = inspect_unwrap(getattr(kernel, "fn", kernel))
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    name = getattr(fn, "__name__", "?")
    if not path or not os.path.isfile(path) or fn.__qualname__ != name:
        raise NkiccError("E200", f"kernel {name} is not defined at the top level of a .py file", None,
                         "workers load kernels by path: move it into a module, or pass 'FILE.py::KERNEL'")
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    return f"{os.path.abspath(path)}::{name}", f"{shown}::{name}"


def _targets(targets) -> list[str] | None:
    if targets is None:
        return None
    items = [t.strip() for t in (targets.split(",") if isinstance(targets, str) else targets) if t.strip()]
    return items or None


def _check_sweeps(sweeps: dict, consts: dict, targets) -> None:
    if not sweeps and not targets:
        raise NkiccError("E201", "nothing to sweep", None, "give --sweep NAME=v1,v2,... (or --target t1,t2)")
    for name, values in sweeps.items():
        if not values:
            raise NkiccError("E201", f"--sweep {name} has no values", None, "write --sweep NAME=v1,v2,...")
        if name in consts:
            raise NkiccError("E201", f"{name} is both swept and a --const", None, "give it one way")
        if name == "target":
            raise NkiccError("E201", "the target is swept with --target t1,t2", None, "drop --sweep target=...")


def _variants(sweeps: dict, targets) -> list[dict]:
    dims = dict(sweeps)
    if targets:
        dims["target"] = targets
    names = list(dims)
    return [dict(zip(names, combo)) for combo in itertools.product(*dims.values())]


def _check_kernel(spec: str, arg_items: list[str], consts: dict, first: dict, targets) -> None:
    """One line here rather than the same failure in every row: the kernel file,
    its parameters and the targets, checked once before the sweep."""
    values = {**consts, **{k: v for k, v in first.items() if k != "target"}}
    resolve_kernel(spec, arg_items, [f"{k}={_literal(v)}" for k, v in values.items()])
    if targets:
        reg = registry()
        for t in targets:
            resolve_target(t, reg)


def _literal(value) -> str:
    """A constant as --const reads it back: a word that is no Python literal
    stays bare (MODE=fast), anything else is its repr."""
    if isinstance(value, str) and value and const_value(value) == value and value.strip() == value:
        return value
    return repr(value)


def _spec_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, TensorSpec):
        return str(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return str(TensorSpec.of_array(value))
    raise NkiccError("E201", f"argument spec {value!r}", None, "give 'float32[128,512]', a TensorSpec or an array")


def _flags(flag: str, items: list[str]) -> list[str]:
    return [x for item in items for x in (flag, item)]


def _command_line(argv: list[str], spec: str, shown: str) -> str:
    return "nkicc " + shlex.join(shown if a == spec else a for a in argv)
