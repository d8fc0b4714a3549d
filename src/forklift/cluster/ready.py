"""Waiting for a started run to really answer: phases from the head's log, every rank alive, every rank
joined, ``/health`` 200 and a streamed token through the endpoint client. A death fails fast with the
root-cause lines and doctor's finding."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import NoReturn

import httpx

from forklift.cluster.diagnose import diagnose_run
from forklift.cluster.phases import PHASE_NAMES, advance, relevant_tail, startup_hint
from forklift.cluster.stop import stop_all
from forklift.endpoint import Endpoint
from forklift.errors import EndpointError, EngineStartupError, ForkliftError
from forklift.host import procs, remote
from forklift.record import RankState, RunRecord
from forklift.runner import LocalRunner, Runner, fan_out

EventFn = Callable[[str, str], None]
FAIL_GRACE_S = 8.0
"""SIGTERM grace when a start fails: short, so `up` fails within 30 s of a rank dying."""
_JOIN_RE = re.compile(r"world_size=\d+ rank=(\d+) .*distributed_init_method")


def rank_log(record: RunRecord, rank: RankState, runners: Mapping[int, Runner], lines: int = 400) -> list[str]:
    try:
        return remote.tail(runners[rank.node], rank.log_path, lines)
    except ForkliftError:
        return []


def diagnosis(record: RunRecord, runners: Mapping[int, Runner]) -> str | None:
    """doctor's top finding for a failed start over every rank's log (the one diagnosis `forklift doctor RUN`
    gives), as one line: title (category): fix. None when doctor names nothing or the logs cannot be read."""
    try:
        return diagnose_run(record, runners, nodes=False).top_line()
    except ForkliftError:
        return None


def fail(record: RunRecord, rank: RankState, message: str, runners: Mapping[int, Runner]) -> NoReturn:
    """Record the failure, stop everything, and raise EngineStartupError with the rank's root-cause lines,
    doctor's finding and the recipe key most likely to change."""
    lines = rank_log(record, rank, runners)
    tail = relevant_tail(lines)
    hint = startup_hint(tail)
    record.status = "failed"
    record.error = message
    record.save()
    finding = diagnosis(record, runners)
    stop_all(record, runners, grace_s=FAIL_GRACE_S)
    fix = f"doctor: {finding} " if finding else ""
    fix += f"Most likely key: {hint[0]} ({hint[1]}). " if hint else ""
    fix += f"Full log: `forklift logs {record.name} --rank {rank.rank}`; diagnosis: `forklift doctor {record.name}`."
    raise EngineStartupError(message, rank=rank.rank, host=rank.host, log_tail=tail, log_path=rank.log_path, fix=fix)


def check_alive(record: RunRecord, runners: Mapping[int, Runner], phase: str) -> None:
    live = [r for r in record.ranks if r.pgid is not None]
    done = fan_out(((i, r) for i, r in enumerate(live)), lambda r: procs.pid_alive(runners[r.node], r.pgid or 0))
    for i, r in enumerate(live):
        if i in done.errors:
            fail(record, r, f"{r.host} stopped answering during startup ({phase}): {done.errors[i]}", runners)
        if not done.results[i]:
            what = "rank" if r.role == "engine" else r.role
            fail(record, r, f"{what} {r.rank} on {r.host} exited during startup (phase: {phase})", runners)


def _not_joined(record: RunRecord, runners: Mapping[int, Runner]) -> list[RankState]:
    """Engine ranks whose log shows no distributed init: the ones that never reached the head."""
    ranks = [r for r in record.ranks if r.role == "engine"]
    silent = [r for r in ranks if not any(_JOIN_RE.search(x) for x in rank_log(record, r, runners, 2000))]
    return silent or [r for r in ranks if r.rank != 0]


REFUSALS_TO_FAIL = 3
"""The same 4xx answer this many times in a row from a healthy server ends the wait: it is not 'not ready yet'."""
_TRANSIENT_4XX = (408, 425, 429)


class _Refusals:
    """Counts identical client-error answers from a healthy server (a wrong served name answers 404 for ever)."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.count = 0

    def see(self, exc: Exception | None) -> str | None:
        """The server's words once the same 4xx came REFUSALS_TO_FAIL times in a row, else None."""
        code = getattr(exc, "status_code", None)
        if exc is None or code is None or not 400 <= code < 500 or code in _TRANSIENT_4XX:
            self.last, self.count = None, 0
            return None
        words = str(exc)
        self.count = self.count + 1 if words == self.last else 1
        self.last = words
        return words if self.count >= REFUSALS_TO_FAIL else None


def _answers(endpoint: Endpoint, model: str, phase: str, on_event: EventFn,
             refusals: _Refusals) -> str | None:
    """The first streamed token once /health is 200, else None (a refused stream is 'not yet'). Raises
    EndpointError when a healthy server refuses the request the same way REFUSALS_TO_FAIL times in a row."""
    if not endpoint.healthy():
        return None
    try:
        token = endpoint.first_token(model)
    except (httpx.HTTPError, EndpointError) as exc:
        words = refusals.see(exc)
        if words is not None:
            raise EndpointError(words, fix=getattr(exc, "fix", None)) from exc
        detail = f"HTTP {exc.status_code}" if isinstance(exc, EndpointError) and exc.status_code else ""
        on_event(phase, f"health ok, first token not yet: {type(exc).__name__} {detail}".strip())
        return None
    refusals.see(None)
    return token


def check_owner(record: RunRecord, head: RankState, runners: Mapping[int, Runner]) -> None:
    """Fail unless the process listening on the run's port belongs to this run's head rank (another server on the
    same port, e.g. a second `up` racing this one, may have answered). Unknown holders are given the benefit."""
    runner = runners[head.node]
    holder = procs.port_holder(runner, record.recipe.serve.port, python=_python(record, runner))
    if holder is None:
        return
    ours = set(procs.session_pids(runner, head.pgid or 0)) if head.pgid else set()
    if head.container:
        ours |= {pid for pid, _ in procs.container_processes(runner, head.container)}
    if holder.pid not in ours:
        fail(record, head, f"port {record.recipe.serve.port} on {head.host} is answered by {holder}, not by this "
             f"run's head (pid {head.pid})", runners)


def _python(record: RunRecord, runner: Runner) -> str:
    return sys.executable if isinstance(runner, LocalRunner) else "python3"


class _PhaseTracker:
    """Follows the head's log and records when each phase was first reached."""

    def __init__(self, on_event: EventFn) -> None:
        self.t0 = time.monotonic()
        self.phase = "starting"
        self.reached: dict[str, float] = {"starting": 0.0}
        self.offset = 0
        self.on_event = on_event
        on_event(self.phase, "")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def follow(self, runner: Runner, log_path: str) -> None:
        lines, self.offset = remote.read_from(runner, log_path, self.offset)
        new = advance(self.phase, lines)
        if new != self.phase:
            for p in PHASE_NAMES[PHASE_NAMES.index(self.phase) + 1 : PHASE_NAMES.index(new) + 1]:
                self.reached.setdefault(p, round(self.elapsed, 2))
            self.phase = new
            self.on_event(new, "")


def wait_ready(record: RunRecord, runners: Mapping[int, Runner], *, timeout_s: float, join_s: float,
               api_key: str | None, on_event: EventFn) -> tuple[str, dict[str, float]]:
    """Follow the head log for phases; fail fast if any rank dies or a rank never joins;
    ready = every rank alive + /health 200 + a streamed token."""
    head = next(r for r in record.ranks if r.rank == 0 and r.role == "engine")
    multi = len({r.node for r in record.ranks}) > 1
    track = _PhaseTracker(on_event)
    refusals = _Refusals()
    with Endpoint(record.endpoint, api_key=api_key, timeout=120) as endpoint:
        while True:
            track.follow(runners[head.node], head.log_path)
            check_alive(record, runners, track.phase)
            if multi and track.phase == "starting" and track.elapsed > join_s:
                silent = _not_joined(record, runners)
                names = ", ".join(f"rank {r.rank} on {r.host}" for r in silent)
                fail(record, silent[0], f"{names} never joined the head within {join_s:.0f} s", runners)
            try:
                token = _answers(endpoint, record.served_name, track.phase, on_event, refusals)
            except EndpointError as exc:
                fail(record, head, f"the server is up but refuses every request: {exc}", runners)
            if token is not None:
                check_alive(record, runners, "ready")
                check_owner(record, head, runners)
                track.reached["ready"] = round(track.elapsed, 2)
                on_event("ready", token)
                return token, track.reached
            if track.elapsed > timeout_s:
                fail(record, head, f"not ready after {timeout_s:.0f} s (last phase: {track.phase})", runners)
            time.sleep(1.0)
