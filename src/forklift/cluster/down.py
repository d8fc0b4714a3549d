"""``down``, ``status`` and ``logs`` over a run record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from forklift.cluster import procs
from forklift.cluster.hosts import runner_for
from forklift.cluster.record import RunRecord, save_status
from forklift.cluster.runner import Runner
from forklift.cluster.up import _node_for, stop_all
from forklift.errors import ForkliftError, RunError
from forklift.recipe.schema import Recipe


@dataclass
class DownResult:
    name: str
    was_running: bool
    stopped_ranks: list[int]
    port_free: bool
    seconds: float


def _runners(record: RunRecord) -> dict[int, Runner]:
    return {r.rank: runner_for(_node_for(record, r.rank)) for r in record.ranks}


def down(record: RunRecord, *, grace_s: float | None = None) -> DownResult:
    """Stop every process of the run, then verify none remains and the port is free. Idempotent."""
    t0 = time.monotonic()
    recipe = Recipe.model_validate(record.recipe)
    grace = grace_s if grace_s is not None else recipe.timeouts.stop_s
    runners = _runners(record)
    alive = [r.rank for r in record.ranks if r.pgid is not None and procs.pgid_alive(runners[r.rank], r.pgid)]
    leftovers = stop_all(record, runners, grace_s=grace)
    if leftovers:
        raise ForkliftError(
            f"{record.name}: processes survived SIGKILL: {', '.join(leftovers)}",
            fix="Inspect them with `ps -g PGID` on that host; forklift never kills by name.",
        )
    port_free = True
    if recipe.head.is_local:
        deadline = time.monotonic() + 15
        while not (port_free := procs.port_free_local(recipe.serve.host, recipe.serve.port)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
        if not port_free:
            holder = procs.port_holder_local(recipe.serve.port)
            raise RunError(
                f"{record.name}: stopped, but port {recipe.serve.port} is still held"
                + (f" by {holder}" if holder else ""),
                fix="That process is not part of this run; stop it yourself if it should not be there.",
            )
    save_status(record, "stopped")
    return DownResult(record.name, bool(alive), alive, port_free, round(time.monotonic() - t0, 2))


@dataclass
class StatusResult:
    name: str
    status: str
    endpoint: str
    served_name: str
    alive_ranks: list[int]
    dead_ranks: list[int]
    healthy: bool
    vllm_version: str | None
    record: RunRecord

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "status": self.status,
            "endpoint": self.endpoint,
            "served_name": self.served_name,
            "healthy": self.healthy,
            "alive_ranks": self.alive_ranks,
            "dead_ranks": self.dead_ranks,
            "vllm_version": self.vllm_version,
            "run_id": self.record.run_id,
            "ranks": [r.model_dump() for r in self.record.ranks],
            "timings": self.record.timings,
            "error": self.record.error,
        }


def status(record: RunRecord) -> StatusResult:
    runners = _runners(record)
    alive: list[int] = []
    dead: list[int] = []
    for r in record.ranks:
        ok = r.pgid is not None and procs.pgid_alive(runners[r.rank], r.pgid)
        (alive if ok else dead).append(r.rank)
    healthy = False
    if alive:
        try:
            healthy = httpx.get(f"{record.endpoint}/health", timeout=3).status_code == 200
        except httpx.HTTPError:
            healthy = False
    state: str = record.status
    if state in ("ready", "starting") and not alive:
        state = "dead"
    elif state == "ready" and dead:
        state = "degraded"
    return StatusResult(record.name, state, record.endpoint, record.served_name, alive, dead, healthy,
                        record.vllm_version, record)


def log_path(record: RunRecord, rank: int) -> str:
    for r in record.ranks:
        if r.rank == rank:
            return r.log_path
    raise RunError(f"{record.name} has no rank {rank}",
                   fix=f"Ranks: {', '.join(str(r.rank) for r in record.ranks) or 'none'}.")


def read_log(record: RunRecord, rank: int = 0, tail: int | None = None) -> list[str]:
    path = log_path(record, rank)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    return lines[-tail:] if tail else lines


def follow_log(record: RunRecord, rank: int = 0, poll_s: float = 0.5) -> Iterator[str]:
    """Yield new lines as they are written (until the caller stops iterating)."""
    path = log_path(record, rank)
    offset = 0
    while True:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(offset)
                chunk = fh.read()
                offset = fh.tell()
        except FileNotFoundError:
            chunk = ""
        yield from chunk.splitlines()
        time.sleep(poll_s)
