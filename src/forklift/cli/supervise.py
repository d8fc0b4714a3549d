"""``forklift supervise NAME``: watch a run in the foreground and keep it serving (what `up --supervise` starts
detached and what the systemd unit execs)."""

from __future__ import annotations

import os
import time

import typer

from forklift.cli.common import NameArg, console, err_console
from forklift.record import resolve_name


def supervise_cmd(name: NameArg = None) -> None:
    """Probe a run every supervise.interval_s; on a dead rank, a failed probe or a hung engine stop it whole and
    start it again from its record (backoff, a cap per window); exit 3 when it gives up."""
    from forklift.supervise import Supervisor

    def say(line: str) -> None:
        err_console.print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", highlight=False, markup=False,
                          soft_wrap=True)

    supervisor = Supervisor(resolve_name(name), say=say)
    note = supervisor.run(os.getpid())
    console.print(note, highlight=False, soft_wrap=True)
    raise typer.Exit(0)


def register(app: typer.Typer) -> None:
    app.command("supervise")(supervise_cmd)
