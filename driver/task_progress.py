"""The progress of tasks on the cluster (nkicc.cluster.run_tasks): a live
rich bar for `nkicc tune`'s variants and `nkicc run --shards`' shards."""
from __future__ import annotations

import contextlib
from typing import Iterator

from .cluster import Counts


@contextlib.contextmanager
def progress_bar(progress, total: int, what: str):
    """The progress callback for run_tasks: `progress` itself, or a rich bar for True."""
    if progress is True:
        from rich.console import Console  # rich: only when a bar is drawn (start-up)
        with live_progress(Console(), total, what) as update:
            yield update
    else:
        yield progress or None


@contextlib.contextmanager
def live_progress(console, total: int, what: str = "variants") -> Iterator:
    """A rich progress bar (done / failed / running, elapsed, ETA); yields the
    callback that run_tasks feeds with counts."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("[green]{task.fields[done]} done[/] [red]{task.fields[failed]} failed[/] "
                          "[yellow]{task.fields[running]} running[/] of {task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(what, total=total, done=0, failed=0, running=0)

        def update(c: Counts) -> None:
            bar.update(task, completed=c.done + c.failed, done=c.done, failed=c.failed, running=c.running)
        yield update
