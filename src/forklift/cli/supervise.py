"""``forklift supervise NAME``: watch a run in the foreground and keep it serving (what `up --supervise` starts
detached and what the systemd unit execs). ``--receive`` is the head's side of a supervisor started from a control
machine: the run's record arrives on stdin."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Annotated

import typer

from forklift.cli.common import NameArg, console, err_console
from forklift.record import resolve_name

ReceiveOpt = Annotated[bool, typer.Option("--receive", hidden=True, help="Read the run's record and supervisor state "
                                          "as JSON on stdin (sent by a control machine) and keep them here.")]
DetachOpt = Annotated[bool, typer.Option("--detach", help="Start the supervisor detached and return: on the head "
                                         "when node 0 is remote (supervise.where: head; forklift must be installed "
                                         "there), else here.")]


def supervise_cmd(name: NameArg = None, receive: ReceiveOpt = False, detach: DetachOpt = False) -> None:
    """Probe a run every supervise.interval_s; on a dead rank, a failed probe or a hung engine stop it whole and
    start it again from its record (backoff, a cap per window); exit 3 when it gives up."""
    if receive:
        from forklift.supervise.remote import receive as take

        sys.stdout.write(json.dumps(take(sys.stdin.read(), detach=detach)) + "\n")  # one line: the receipt
        return
    if detach:
        from forklift.cli.status import load_run
        from forklift.supervise.remote import attach

        state = attach(load_run(name))
        where = f" on {state.head.host}" if state.head is not None else ""
        console.print(f"supervising {state.name}{where} (pid {state.pid}); `forklift status {state.name}` shows it, "
                      f"`forklift down {state.name}` stops both", highlight=False, soft_wrap=True)
        return
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
