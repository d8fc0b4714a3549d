"""Stopping a run's processes by recorded process group or container: head first, then the rest."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from forklift.host import procs
from forklift.launch.hosts import runners_for
from forklift.record import RankState, RunRecord
from forklift.runner import Runner, fan_out


def record_runners(record: RunRecord) -> dict[int, Runner]:
    """Runners for the nodes of a recorded run (with the ssh config it was started with)."""
    return runners_for(record.recipe, ssh_config=record.ssh_config)


def is_alive(record: RunRecord, runners: Mapping[int, Runner] | None = None) -> bool:
    """Whether any process of the run still exists."""
    runners = runners or record_runners(record)
    return any(r.pgid and procs.pgid_alive(runners[r.node], r.pgid) and not procs.recycled(runners[r.node], r.pgid,
                                                                                           r.started)
               for r in record.ranks)


def _stop_container(rank: RankState, runner: Runner, grace_s: float) -> bool:
    """docker stop + rm; then SIGKILL what the container left running on the host (``--pid=host`` containers
    leave their children, e.g. Ray's daemons, behind). True when something had to be killed."""
    assert rank.container is not None
    inside = procs.container_processes(runner, rank.container)
    t0 = time.monotonic()
    runner.run(["docker", "stop", "-t", str(int(grace_s)), rank.container], timeout=grace_s + 30)
    waited_out = time.monotonic() - t0 >= grace_s  # docker stop sent SIGKILL itself
    runner.run(["docker", "rm", "-f", rank.container], timeout=60)
    orphans = procs.kill_leftovers(runner, inside)
    return waited_out or bool(orphans)


def _stop_one(rank: RankState, runner: Runner, grace_s: float) -> procs.StopOutcome:
    if rank.container and _stop_container(rank, runner, grace_s):
        return "killed"
    if rank.pgid is None or procs.recycled(runner, rank.pgid, rank.started):
        return "gone"
    return procs.stop_group(runner, rank.pgid, grace_s=grace_s)


@dataclass
class StopReport:
    leftovers: list[str] = field(default_factory=list)
    """Processes that survived SIGKILL (or could not be reached)."""
    killed: list[str] = field(default_factory=list)
    """Processes that outlived SIGTERM's grace and needed SIGKILL."""


def stop_all(record: RunRecord, runners: Mapping[int, Runner], *, grace_s: float) -> StopReport:
    """Stop every process of the run by recorded pgid / container: the API head first (so clients see it
    go), then every other process in parallel. Reports what needed SIGKILL and what would not die."""
    head = [r for r in record.ranks if r.rank == 0 and r.role == "engine"]
    rest = [r for r in record.ranks if r not in head]
    report = StopReport()
    for group in (head, rest):
        done = fan_out(((i, r) for i, r in enumerate(group)), lambda r: _stop_one(r, runners[r.node], grace_s))
        for i, r in enumerate(group):
            what = f"{r.role} {r.rank} on {r.host} (pgid {r.pgid})"
            outcome = done.results.get(i, "survived")
            if outcome == "survived":
                why = f": {done.errors[i]}" if i in done.errors else ""
                report.leftovers.append(what + why)
            elif outcome == "killed":
                report.killed.append(what)
    return report
