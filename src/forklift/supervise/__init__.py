"""Keep a deployment serving: probe it, and on a failure stop it whole and start it again from its run record
(backoff, a cap per window, no retry of a start that fails the same way twice, a memory gate), with an event hook;
and the systemd unit that runs the supervisor at boot.

``policy`` is the pure core; ``loop.Supervisor`` does the I/O; ``service`` renders and installs the unit.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Mapping

from forklift.record import RunRecord, run_dir
from forklift.record.supervisor import SupervisorState, load_state, save_state
from forklift.runner import LocalRunner, Runner
from forklift.supervise.loop import Supervisor, baseline

SUPERVISOR_LOG = "supervisor.out"
"""The supervisor's output beside the record (not *.log: `up` moves the previous start's logs aside)."""


def command(name: str, python: str | None = None) -> list[str]:
    """The supervisor's argv: what `up --supervise` spawns and what the systemd unit execs."""
    return [python or sys.executable, "-m", "forklift.cli.main", "supervise", name]


def spawn(record: RunRecord, mem_before: Mapping[str, int], *, runner: Runner | None = None,
          secrets: Mapping[str, str] | None = None) -> SupervisorState:
    """Start ``forklift supervise NAME`` detached in its own session on this machine (it outlives the caller; its
    pid is recorded in supervisor.json, which `forklift down` reads to stop it first). ``secrets``: variables its
    environment gets besides this process's (the API key a remote control machine sent)."""
    runner = runner or LocalRunner()
    state = load_state(record.name) or SupervisorState(name=record.name)
    state.baseline_mem_available = dict(mem_before)
    state.state = "starting"
    state.head = None
    state.gave_up = None
    state.startup_findings = []  # this start succeeded: no failed start in a row any more
    state.started_at = time.time()
    save_state(state)
    spawned = runner.spawn(command(record.name), log_path=str(run_dir(record.name) / SUPERVISOR_LOG),
                           secret_env=secrets)
    state.pid = spawned.pid
    state.host = socket.gethostname()
    save_state(state)
    return state


__all__ = ["SUPERVISOR_LOG", "Supervisor", "baseline", "command", "spawn"]
