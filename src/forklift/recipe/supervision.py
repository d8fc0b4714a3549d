"""How long forklift waits (``timeouts:``) and what the supervisor does once the run serves
(``supervise:``).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from forklift.recipe.strict import Strict


class Timeouts(Strict):
    """How long forklift waits."""

    ready_s: float = Field(default=1800.0, gt=0, description="Startup until the first token.")
    stop_s: float = Field(default=30.0, gt=0, description="SIGTERM grace before SIGKILL in `down`.")
    join_s: float = Field(default=600.0, gt=0, description="Multi-node: until every rank has joined the head.")
    ssh_s: float = Field(default=60.0, gt=0, description="Per-host limit for one remote command.")


class Supervise(Strict):
    """What the supervisor (`forklift up --supervise`, `forklift supervise NAME`) does once the run serves: probe,
    and on a dead rank, a failed probe or a hung engine stop the whole deployment and start it again from its run
    record, with backoff and a cap."""

    interval_s: float = Field(default=15.0, gt=0, description="Seconds between probes (/health, every rank's pid, "
                              "one streamed token).")
    token_timeout_s: float = Field(default=60.0, gt=0, description="A healthy server that streams no token within "
                                   "this is hung.")
    max_restarts: int = Field(default=3, ge=0, description="At most this many restarts within `window_s`; one more "
                              "failure gives up (loudly: hook, record, exit 1).")
    window_s: float = Field(default=3600.0, gt=0, description="The window `max_restarts` counts in.")
    backoff_s: float = Field(default=10.0, ge=0, description="Wait before the first restart in the window; doubled "
                             "for each further one.")
    backoff_max_s: float = Field(default=300.0, ge=0, description="The longest wait between restarts.")
    memory_check: Literal["auto", "always", "never"] = Field(
        default="auto", description="Before a restart, wait until each node's MemAvailable is back within "
        "`memory_margin_gib` of what it was before the start, else refuse to restart. auto: unified-memory nodes "
        "only (GB10, CPU: host memory is the engine's; a discrete GPU's memory is `down`'s own check).",
    )
    memory_margin_gib: float = Field(default=2.0, ge=0, description="How far below its pre-start MemAvailable a "
                                     "node may stay and still count as released.")
    memory_wait_s: float = Field(default=60.0, ge=0, description="How long to wait for memory to come back.")
    where: Literal["head", "here"] = Field(
        default="head", description="Where `up --supervise` runs the supervisor. head: on node 0 (over SSH when "
        "node 0 is remote: forklift must be installed there; the record is copied into its forklift home, and "
        "`status` / `down` here read and stop it over SSH), so a control machine that sleeps does not stop it. "
        "here: on this machine.",
    )
    forklift: list[str] | None = Field(
        default=None, description="The argv that runs forklift on a remote head (default: the venv runtime's "
        "python with `-m forklift.cli.main`, else `forklift` on the head's PATH).",
    )
    on_event: list[str] | str | None = Field(
        default=None, description="Called on restart, give-up and recovery: an argv list (the event as JSON on "
        "stdin, its kind in $FORKLIFT_EVENT) or an http(s) URL (the event POSTed as JSON).",
    )

    @field_validator("forklift")
    @classmethod
    def _forklift(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not v[0].strip()):
            raise ValueError("give the argv that runs forklift on the head, e.g. ['/opt/forklift/bin/forklift']")
        return v

    @field_validator("on_event")
    @classmethod
    def _hook(cls, v: list[str] | str | None) -> list[str] | str | None:
        if isinstance(v, str) and not re.match(r"^https?://\S+$", v):
            raise ValueError(f"{v!r}: give an http(s) URL, or a command as an argv list (['notify-send', 'x'])")
        if isinstance(v, list) and (not v or not v[0].strip()):
            raise ValueError("the command's argv list must name a program")
        return v

    @model_validator(mode="after")
    def _backoff_order(self) -> Supervise:
        if self.backoff_max_s < self.backoff_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) is below backoff_s ({self.backoff_s})")
        return self
