"""One progress bar per node (bytes landed, bytes/s) for pull, sync and image sync."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from forklift.cli.common import err_console
from forklift.distribution.transfer import Progress as NodeProgress
from forklift.distribution.transfer import ProgressFn


def rate_text(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e6:8.1f} MB/s"


@contextmanager
def node_bars(*, disable: bool) -> Iterator[ProgressFn]:
    """A callback for the library's progress events, drawing one bar per (node, phase) on stderr."""
    columns = (TextColumn("{task.description:<22}"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[rate]}"),
               TimeRemainingColumn())
    lock = threading.Lock()
    tasks: dict[tuple[str, str], TaskID] = {}
    with Progress(*columns, console=err_console, transient=False, disable=disable) as bars:
        def update(p: NodeProgress) -> None:
            with lock:
                key = (p.host, p.phase)
                if key not in tasks:
                    tasks[key] = bars.add_task(f"{p.host} {p.phase}", total=p.total or None, rate="")
                bars.update(tasks[key], completed=p.done, total=p.total or None, rate=rate_text(p.rate))

        yield update
