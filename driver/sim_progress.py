"""A progress line on stderr while `nkicc simulate` runs a long simulation (a
full-size kernel takes a minute): instructions executed of the compiled
program's count, and the time so far.

It reads the simulator's `executed` counter from a thread, so the simulator
pays nothing for it. A loop nest that runs batched advances the count at
once when its data has moved, so the bar moves in steps; the time shows the
run is alive in between. Drawn only on a terminal, and only after the run
has taken `after` seconds, so quick runs and captured output stay as they
were."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator


@contextlib.contextmanager
def simulation_progress(compiled, console=None, after: float = 1.0, every: float = 0.25) -> Iterator[None]:
    """While the body runs, show how far `compiled`'s simulation is (CompiledKernel.running)."""
    from rich.console import Console

    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_draw, args=(compiled, console, after, every, stop), daemon=True,
                              name="nkicc-sim-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _draw(compiled, console, after: float, every: float, stop: threading.Event) -> None:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

    start = time.monotonic()
    if stop.wait(after):
        return
    total = compiled.report.get("instructions_compiled_executed")
    columns = (SpinnerColumn(), TextColumn("simulating {task.description}"), BarColumn(),
               TextColumn("{task.fields[count]}{task.fields[seconds]:.0f} s"))
    # (no redirection: what the kernel or the script prints meanwhile stays on its own stream)
    with Progress(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task(compiled.name, total=None, count="", seconds=0.0)
        while True:
            sim = getattr(compiled, "running", None)  # None: a multi-core launch, whose count is not kept here
            if sim is not None and total:
                done = min(sim.executed, total)
                bar.update(task, total=total, completed=done, count=f"{done:,}/{total:,} instructions, ")
            bar.update(task, seconds=time.monotonic() - start)
            if stop.wait(every):
                return
