"""The supervisor's state beside the run record: ``runs/NAME/supervisor.json`` (what ``status`` shows and ``down``
reads to stop it first) and ``runs/NAME/supervisor-events.jsonl`` (every event, one JSON object a line).

Kept apart from record.json because ``up`` writes a fresh record on every restart, and the supervisor's restarts,
causes and pid must outlive that.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from forklift.errors import StateDirError
from forklift.record.run_record import run_dir

SupervisorPhase = Literal["starting", "watching", "recovering", "backing-off", "gave-up", "stopped"]
EventKind = Literal["started", "failure", "down", "restart", "recovered", "give-up", "stopped"]


class Incident(BaseModel):
    """One failure the supervisor saw and what it made of it."""

    at: float
    cause: str
    finding: str | None = None
    """doctor's top finding (title, category and fix) from every rank's log, when it had one."""
    logs: str | None = None
    """The folder the rank logs and node facts were saved to."""


class HeadRef(BaseModel):
    """Where a run's supervisor runs when that is a remote head (kept in this machine's ``supervisor.json``)."""

    host: str
    """Node 0's name in the recipe."""
    ssh: str
    """How this machine reaches it."""
    ssh_config: str | None = None
    """The ssh config this machine reaches it with (the run's)."""
    home: str
    """The head's forklift home (its record is ``HOME/runs/NAME/record.json``)."""
    forklift: list[str] = Field(default_factory=list)
    """The argv that runs forklift there."""
    log: str | None = None
    """The supervisor's output on the head."""


class SupervisorState(BaseModel):
    """``runs/NAME/supervisor.json``."""

    name: str
    state: SupervisorPhase = "starting"
    pid: int | None = None
    """The supervisor's own pid (its own session: pid == pgid), on ``host``."""
    host: str | None = None
    started_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    restarts: list[float] = Field(default_factory=list)
    """When each restart began (epoch seconds), newest last; the window counts these."""
    last_cause: Incident | None = None
    last_recovery_at: float | None = None
    last_recovery_s: float | None = None
    """Seconds from noticing the failure to serving again."""
    startup_findings: list[str] = Field(default_factory=list)
    """What each failed start in a row said (emptied by a recovery): the same twice is deterministic."""
    baseline_mem_available: dict[str, int] = Field(default_factory=dict)
    """Per host, MemAvailable (bytes) before the run's start: the memory gate compares with it."""
    boot_ids: dict[str, str] = Field(default_factory=dict)
    """Per host, /proc/sys/kernel/random/boot_id while the run served: a different one means that node rebooted and
    the pids recorded there are not the run's any more."""
    gave_up: str | None = None
    """Why the supervisor gave up, when it did."""
    head: HeadRef | None = None
    """Set on the control machine when the supervisor runs on a remote head: this state is then a copy of the
    head's, read over SSH (``status``), and the pid is the head's."""

    def restarts_in(self, window_s: float, now: float) -> int:
        return sum(1 for t in self.restarts if now - t < window_s)


def state_path(name: str) -> Path:
    return run_dir(name) / "supervisor.json"


def events_path(name: str) -> Path:
    return run_dir(name) / "supervisor-events.jsonl"


def load_state(name: str) -> SupervisorState | None:
    """The run's supervisor state, or None when it never had one (or it cannot be read)."""
    try:
        return SupervisorState.model_validate_json(state_path(name).read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError):
        return None


def save_state(state: SupervisorState) -> Path:
    target = state_path(state.name)
    state.updated_at = time.time()
    tmp = target.with_suffix(f".json.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StateDirError(f"cannot write the supervisor state {target}: {exc.strerror or exc}",
                            fix=f"Fix the permissions of {target.parent} or set FORKLIFT_HOME.") from None
    return target


def append_event(name: str, event: dict[str, Any]) -> None:
    """Append one event to the run's event log (never raises: an event that cannot be kept must not stop recovery)."""
    try:
        path = events_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, default=str) + "\n")
    except OSError:
        pass


def read_events(name: str) -> list[dict[str, Any]]:
    try:
        lines = events_path(name).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


__all__ = ["EventKind", "HeadRef", "Incident", "SupervisorPhase", "SupervisorState", "append_event", "events_path",
           "load_state", "read_events", "save_state", "state_path"]
