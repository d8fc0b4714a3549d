"""``down``, ``status`` and ``logs`` over a run record (every host reached through its Runner)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from forklift.cluster import head
from forklift.cluster.stop import record_runners, stop_all
from forklift.endpoint import Endpoint
from forklift.errors import ForkliftError, RunError
from forklift.host import procs, remote
from forklift.host.facts import probe
from forklift.launch.docker import LABEL_RUN_ID
from forklift.recipe.schema import Recipe
from forklift.record import RankState, RunRecord, SalvagedRank, salvage, save_status, set_aside, up_in_progress
from forklift.record import load as load_record
from forklift.record.supervisor import HeadRef, SupervisorState, load_state, save_state
from forklift.runner import LocalRunner, Runner
from forklift.runner.fanout import fan_out
from forklift.runner.ssh import SshRunner, default_ssh_config

GPU_SLACK_MIB = 1024
"""Accelerator memory within this much of the pre-launch baseline counts as released."""


@dataclass
class DownResult:
    name: str
    was_running: bool
    stopped_ranks: list[int]
    port_free: bool
    seconds: float
    hosts: list[str] = field(default_factory=list)
    accelerator: dict[str, str] = field(default_factory=dict)
    """host -> 'released' / 'still N MiB above baseline' (only hosts that report it, via nvidia-smi)."""
    killed: list[str] = field(default_factory=list)
    """Processes that ignored SIGTERM for timeouts.stop_s and were SIGKILLed."""
    supervisor: str | None = None
    """What became of the run's supervisor (stopped first, so it does not restart what `down` stops)."""


def _leftover_containers(record: RunRecord, runners: Mapping[int, Runner]) -> list[str]:
    hosts = sorted({r.node for r in record.ranks if r.container})
    found: list[str] = []
    for idx in hosts:
        res = runners[idx].run(["docker", "ps", "-aq", "--filter", f"label={LABEL_RUN_ID}={record.run_id}"], timeout=60)
        found += [f"container {c} on {runners[idx].host}" for c in res.stdout.split()]
    return found


def _wait_port_free(recipe: Recipe, head: Runner, timeout_s: float = 15) -> bool:
    """Wait until the head's serving port is free: bind-probe locally, /proc/net/tcp remotely."""
    port = recipe.serve.port
    if recipe.head.is_local:
        def free() -> bool:
            return procs.port_free_local(recipe.serve.host, port)
    else:
        def free() -> bool:
            return port not in (probe(head, ("ports",)).listening or ())
    deadline = time.monotonic() + timeout_s
    while not free():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


def _accelerators(record: RunRecord, runners: Mapping[int, Runner], recipe: Recipe,
                  timeout_s: float = 60) -> dict[str, str]:
    """Wait until each host's accelerator memory is back near its pre-launch baseline (it lags the kill)."""
    def one(idx: int) -> str:
        host = recipe.nodes[idx].host
        base = record.gpu_baseline_mib.get(host, [])
        mine = set(record.gpu_indices.get(host, range(len(base))))  # other GPUs' memory is not this run's
        deadline = time.monotonic() + timeout_s
        while True:
            now = probe(runners[idx], ("gpus",)).gpu_used_mib
            over = max((u - b for i, (u, b) in enumerate(zip(now, base, strict=False)) if i in mine), default=0)
            if over <= GPU_SLACK_MIB:
                return "released"
            if time.monotonic() > deadline:
                return f"still {over} MiB above its baseline"
            time.sleep(1.0)

    nodes = [i for i, n in enumerate(recipe.nodes) if n.host in record.gpu_baseline_mib and i in runners]
    done = fan_out(((i, i) for i in nodes), one)
    return {recipe.nodes[i].host: v for i, v in done.results.items()}


def _supervisor_alive(state: SupervisorState, runner: Runner) -> bool:
    """The recorded supervisor pid still runs `forklift ... supervise NAME` (a pid reused since, or another run's
    supervisor, is left alone); on a remote head (``state.head``) asked there through its Runner."""
    if state.pid is None or (state.head is None and state.host not in (None, socket.gethostname())):
        return False
    try:
        res = runner.run(["ps", "-ww", "-o", "stat=,args=", "-p", str(state.pid)], timeout=15)  # -ww: never cut
    except ForkliftError:  # an unreachable head: its supervisor cannot be seen from here
        return False
    text = res.stdout.strip()
    words = text.split()
    if not res.ok or text.startswith("Z") or "forklift" not in text or "supervise" not in words:
        return False
    after = words[words.index("supervise") + 1:]
    # `supervise NAME ...`, or a bare `supervise [--options]` (it takes the only run): never another run's
    return state.name in after or not [w for w in after if not w.startswith("-")]


def _runner_for(state: SupervisorState, runner: Runner | None) -> Runner:
    if runner is not None:
        return runner
    return head.head_runner(state.head) if state.head is not None else LocalRunner()


def supervisor_state(name: str, runner: Runner | None = None) -> tuple[SupervisorState | None, bool]:
    """The run's supervisor state and whether its process runs now (on this machine, or on the remote head it was
    started on)."""
    state = load_state(name)
    if state is None:
        return None, False
    return state, _supervisor_alive(state, _runner_for(state, runner))


def stop_supervisor(name: str, *, grace_s: float = 60.0, runner: Runner | None = None) -> str | None:
    """SIGTERM the run's supervisor (its pid only: the ranks it started live in their own sessions), wait, then
    SIGKILL; mark its state stopped. None when there was none running (or it is this process). A supervisor on a
    remote head is signalled there, through the head's Runner."""
    state = load_state(name)
    if state is None or (state.head is None and state.pid == os.getpid()):
        return None
    runner = _runner_for(state, runner)
    alive = _supervisor_alive(state, runner)
    outcome = None
    if alive and state.pid is not None:
        runner.run(["kill", "-TERM", str(state.pid)], timeout=15)
        deadline = time.monotonic() + grace_s
        while _supervisor_alive(state, runner) and time.monotonic() < deadline:
            time.sleep(0.3)
        where = f" on {state.head.host}" if state.head is not None else ""
        outcome = f"supervisor pid {state.pid}{where} stopped"
        if _supervisor_alive(state, runner):
            runner.run(["kill", "-KILL", str(state.pid)], timeout=15)
            outcome = f"supervisor pid {state.pid}{where} killed after {grace_s:.0f} s"
    state = load_state(name) or state
    if state.state not in ("stopped", "gave-up"):
        state.state = "stopped"
        save_state(state)
    return outcome


def down(record: RunRecord, *, grace_s: float | None = None,
         runners: Mapping[int, Runner] | None = None) -> DownResult:
    """Stop the run's supervisor (when it has one), then every process of the run on every host (by recorded
    pgid / container id, never by name), then verify nothing remains, the ports are free and accelerator memory
    is back. Idempotent. Called by the supervisor itself, it leaves the supervisor running.

    Refused while another process's ``up`` of the run still holds its lock: that ``up`` would start the ranks it
    has not spawned yet after this returned, and save the run as ready over "stopped"."""
    starting = up_in_progress(record.name)
    if starting is not None and starting != os.getpid() and not (
            (supervising := load_state(record.name)) is not None
            and supervising.pid == starting):  # the supervisor's restart: stopped below
        who = f"pid {starting}" if starting else "another process"
        raise RunError(f"{record.name}: an `up` ({who}) is still starting it; stopping now would leave that `up` "
                       "to start the rest and report it ready",
                       fix=f"Stop that `up` (Ctrl-C in its terminal{f', or kill {starting}' if starting else ''}): "
                       f"it stops what it started. Then `forklift down {record.name}` clears anything left.")
    t0 = time.monotonic()
    recipe = record.recipe
    grace = grace_s if grace_s is not None else recipe.timeouts.stop_s
    ref = _head_of(record.name)
    if ref is not None:  # the head's supervisor pid now (a unit there may have started another since)
        head.sync(record, ref)
    supervisor = stop_supervisor(record.name, grace_s=grace + 30)
    if ref is not None:  # what the head's supervisor last started, in this machine's view
        record, _, problem = head.sync(record, ref)
        supervisor = "; ".join(x for x in (supervisor, problem) if x) or None
    elif supervisor is not None:
        record = load_record(record.name)  # the supervisor may have restarted it meanwhile: stop what runs now
    runners = runners or record_runners(record)
    alive = _alive(record, runners)
    stopped = stop_all(record, runners, grace_s=grace)
    leftovers = list(stopped.leftovers)
    still = {role: set(_alive(record, runners, roles=(role,))) for role in {r.role for r in record.ranks}}
    leftovers += [f"{r.role} {r.rank} on {r.host} (pgid {r.pgid})" for r in record.ranks if r.rank in still[r.role]]
    leftovers += _leftover_containers(record, runners)
    if leftovers:
        raise ForkliftError(
            f"{record.name}: processes survived SIGKILL: {', '.join(sorted(set(leftovers)))}",
            fix="Inspect them with `ps -s PGID` on that host; forklift never kills by name.",
        )
    port_free = _wait_port_free(recipe, runners[0])
    if not port_free:
        raise RunError(
            f"{record.name}: stopped, but port {recipe.serve.port} on {recipe.head.host} is still held",
            fix="That process is not part of this run; stop it yourself if it should not be there.",
        )
    accel = _accelerators(record, runners, recipe) if alive else {}
    save_status(record, "stopped")
    if ref is not None:
        supervisor = _stopped_on_head(record, ref, supervisor)
    hosts = sorted({r.host for r in record.ranks})
    return DownResult(record.name, bool(alive), sorted(set(alive)), port_free, round(time.monotonic() - t0, 2),
                      hosts, accel, stopped.killed, supervisor)


def _head_of(name: str) -> HeadRef | None:
    state = load_state(name)
    return state.head if state is not None else None


def _stopped_on_head(record: RunRecord, ref: HeadRef, supervisor: str | None) -> str | None:
    """The head's copy marked stopped (its unit must not bring the run back); a failure is said, not raised: the
    deployment is down."""
    state = load_state(record.name) or SupervisorState(name=record.name)
    try:
        head.mark_stopped(record, state, ref)
    except ForkliftError as exc:
        note = f"the record on {ref.host} still says {record.status}: {exc.message}"
        return f"{supervisor}; {note}" if supervisor else note
    return supervisor


def _alive(record: RunRecord, runners: Mapping[int, Runner], roles: tuple[str, ...] = ("engine",)) -> list[int]:
    live = [r for r in record.ranks if r.pgid is not None and r.role in roles]
    done = fan_out(((i, r) for i, r in enumerate(live)),
                   lambda r: procs.pgid_alive(runners[r.node], r.pgid or 0)
                   and not procs.recycled(runners[r.node], r.pgid or 0, r.started))
    return sorted(r.rank for i, r in enumerate(live) if done.results.get(i))


@dataclass
class StatusResult:
    name: str
    status: str
    """ready / starting / degraded / dead / orphaned (an `up` that is gone left processes) / failed / stopped."""
    endpoint: str
    served_name: str
    alive_ranks: list[int]
    """Engine ranks whose own pid lives."""
    dead_ranks: list[int]
    healthy: bool
    vllm_version: str | None
    record: RunRecord
    problems: list[str] = field(default_factory=list)
    """What is wrong, one line each: which pid is gone, what is left orphaned, health."""
    orphans: dict[str, list[int]] = field(default_factory=dict)
    """'rank N on HOST' -> live pids of its process group whose rank process is gone (or of a stopped run)."""
    fix: str | None = None
    supervisor: dict[str, object] | None = None
    """The supervisor's state (running, phase, restarts in the window, last cause, last recovery), if it has one."""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "status": self.status,
            "endpoint": self.endpoint,
            "served_name": self.served_name,
            "healthy": self.healthy,
            "alive_ranks": self.alive_ranks,
            "dead_ranks": self.dead_ranks,
            "problems": self.problems,
            "orphans": self.orphans,
            "fix": self.fix,
            "vllm_version": self.vllm_version,
            "run_id": self.record.run_id,
            "ranks": [r.model_dump() for r in self.record.ranks],
            "timings": self.record.timings,
            "error": self.record.error,
            "supervisor": self.supervisor,
        }


@dataclass
class _Liveness:
    pid_alive: bool
    group: list[int]


def _liveness(record: RunRecord, runners: Mapping[int, Runner]) -> dict[int, _Liveness]:
    """Per index in record.ranks: whether the rank's own pid lives, and the live pids of its session."""
    def one(r: RankState) -> _Liveness:
        runner = runners[r.node]
        if r.pgid and procs.recycled(runner, r.pgid, r.started):  # another process has the id now
            return _Liveness(False, [])
        group = procs.session_pids(runner, r.pgid) if r.pgid else []
        alive = r.pid in group if r.pid is not None else bool(group)
        if r.pid is not None and not alive and not group:
            alive = procs.pid_alive(runner, r.pid)
        return _Liveness(alive, group)

    done = fan_out(((i, r) for i, r in enumerate(record.ranks)), one)
    return {i: done.results.get(i, _Liveness(False, [])) for i in range(len(record.ranks))}


def status(record: RunRecord, runners: Mapping[int, Runner] | None = None) -> StatusResult:
    """The run's state from what is there now, not only from what the record last said: each rank's pid, its
    process group, /health, and whether the `up` that started it still holds the run's lock."""
    ref = _head_of(record.name)
    head_problem = None
    if ref is not None:  # the head's supervisor may have restarted the run: read what runs now
        record, _, head_problem = head.sync(record, ref)
    runners = runners or record_runners(record)
    live = _liveness(record, runners)
    out = StatusResult(record.name, record.status, record.endpoint, record.served_name, [], [], False,
                       record.vllm_version, record)
    for i, r in enumerate(record.ranks):
        what = f"{r.role} {r.rank} on {r.host}" if r.role != "engine" else f"rank {r.rank} on {r.host}"
        if r.role == "engine":
            (out.alive_ranks if live[i].pid_alive else out.dead_ranks).append(r.rank)
        if not live[i].pid_alive and record.status in ("ready", "starting"):
            out.problems.append(f"{what}: pid {r.pid} is gone")
        leftover = [p for p in live[i].group if p != r.pid] if not live[i].pid_alive else []
        if record.status in ("failed", "stopped"):
            leftover = live[i].group
        if leftover:
            out.orphans[what] = leftover
            out.problems.append(f"{what}: {len(leftover)} process(es) of its group still run (pids "
                                f"{', '.join(map(str, leftover[:8]))})")
    out.alive_ranks.sort()
    out.dead_ranks.sort()
    anything = any(x.pid_alive or x.group for x in live.values())
    if anything:
        with Endpoint(record.endpoint) as endpoint:
            out.healthy = endpoint.healthy(timeout=3)
    out.status = _state(record, out, anything)
    out.supervisor = supervisor_summary(record)
    if head_problem is not None:
        out.problems.append(head_problem)
    if out.status in ("degraded", "dead", "orphaned") or out.orphans:
        out.fix = (f"`forklift down {record.name}` stops every process the run recorded (and their groups), "
                   f"then `forklift up` starts it again; `forklift doctor {record.name}` says why it broke.")
    return out


def supervisor_summary(record: RunRecord, now: float | None = None) -> dict[str, object] | None:
    state, alive = supervisor_state(record.name)
    if state is None:
        return None
    cause = state.last_cause
    return {"state": state.state, "running": alive, "pid": state.pid, "host": state.host,
            "on_head": state.head.host if state.head is not None else None,
            "log": state.head.log if state.head is not None else None,
            "restarts_in_window": state.restarts_in(record.recipe.supervise.window_s, now or time.time()),
            "max_restarts": record.recipe.supervise.max_restarts, "window_s": record.recipe.supervise.window_s,
            "restarts_total": len(state.restarts), "last_cause": cause.cause if cause else None,
            "last_finding": cause.finding if cause else None, "last_cause_at": cause.at if cause else None,
            "incident_logs": cause.logs if cause else None, "last_recovery_at": state.last_recovery_at,
            "last_recovery_s": state.last_recovery_s, "gave_up": state.gave_up}


def _state(record: RunRecord, out: StatusResult, anything: bool) -> str:
    engine_dead = bool(out.dead_ranks)
    if record.status == "starting":
        if up_in_progress(record.name) is not None:
            return "starting"
        if not anything:
            out.problems.append("the `up` that started it ended before the run was ready; nothing of it runs")
            return "dead"
        out.problems.append("the `up` that started it is gone (killed?) and left these processes running")
        return "orphaned"
    if record.status == "ready":
        if not anything:
            return "dead"
        if not out.healthy:
            out.problems.append(f"{record.endpoint}/health does not answer")
        if engine_dead or out.orphans or not out.healthy or any(p.endswith("is gone") for p in out.problems):
            return "degraded"
        return "ready"
    return record.status


def rank_state(record: RunRecord, rank: int) -> RankState:
    """The engine process of a rank; for Ray workers (no engine there), the node's `ray start`."""
    matches = [r for r in record.ranks if r.rank == rank]
    for r in sorted(matches, key=lambda r: r.role != "engine"):
        return r
    raise RunError(f"{record.name} has no rank {rank}",
                   fix=f"Ranks: {', '.join(str(r) for r in sorted({x.rank for x in record.ranks})) or 'none'}.")


def log_path(record: RunRecord, rank: int) -> str:
    return rank_state(record, rank).log_path


def read_log(record: RunRecord, rank: int = 0, tail: int | None = None,
             runners: Mapping[int, Runner] | None = None) -> list[str]:
    """A rank's log, read on the host it runs on; a RunError when the file is not there."""
    state = rank_state(record, rank)
    runners = runners or record_runners(record)
    lines = remote.tail(runners[state.node], state.log_path, tail)
    if not lines and runners[state.node].run(["test", "-f", state.log_path], timeout=30).returncode != 0:
        raise RunError(f"{record.name}: rank {rank}'s log {state.log_path} is not on {state.host} any more",
                       fix=f"It was removed with its run folder; `forklift doctor {record.name}` reads what is left "
                           "(the record, the node's kernel log).")
    return lines


def follow_log(record: RunRecord, rank: int = 0, poll_s: float = 0.5,
               runners: Mapping[int, Runner] | None = None) -> Iterator[str]:
    """Yield new lines as they are written (until the caller stops iterating)."""
    state = rank_state(record, rank)
    runner = (runners or record_runners(record))[state.node]
    offset = 0
    while True:
        lines, offset = remote.read_from(runner, state.log_path, offset)
        yield from lines
        time.sleep(poll_s)


_SPAWNED = ("vllm", "ray", "docker", "forklift")
"""Words one of the programs `up` starts has in its command line: a salvaged process group is signalled only when
its leader still runs one of them (a group id from a broken record may have been reused since)."""


def _salvaged_runner(rank: SalvagedRank) -> Runner:
    if rank.ssh is None and rank.host in ("localhost", "127.0.0.1", "::1"):
        return LocalRunner()
    return SshRunner(rank.ssh or rank.host, name=rank.host, ssh_config=default_ssh_config())


def _ours(runner: Runner, pgid: int) -> bool:
    res = runner.run(["ps", "-ww", "-o", "args=", "-p", str(pgid)], timeout=15)
    return res.ok and any(word in res.stdout for word in _SPAWNED)


def down_unreadable(name: str, *, grace_s: float = 30.0) -> DownResult:
    """``down`` for a run whose record cannot be read: stop the process groups its text still names (when their
    leader is still a program `up` starts), check the port, and set the record aside so the name is free."""
    t0 = time.monotonic()
    stop_supervisor(name, grace_s=grace_s + 30)
    left = salvage(name)
    stopped: list[int] = []
    killed: list[str] = []
    for rank in left.ranks:
        runner = _salvaged_runner(rank)
        if not procs.pgid_alive(runner, rank.pgid) or not _ours(runner, rank.pgid):
            continue
        outcome = procs.stop_group(runner, rank.pgid, grace_s=grace_s)
        if outcome == "survived":
            raise ForkliftError(f"{name}: process group {rank.pgid} on {rank.host} survived SIGKILL",
                                fix=f"Inspect it with `ps -s {rank.pgid}` on {rank.host}.")
        stopped.append(rank.pgid)
        if outcome == "killed":
            killed.append(f"pgid {rank.pgid} on {rank.host}")
    port_free = True
    local_head = bool(left.ranks) and left.ranks[0].ssh is None
    if left.port and local_head:
        deadline = time.monotonic() + 15
        while not (port_free := procs.port_free_local("127.0.0.1", left.port)) and time.monotonic() < deadline:
            time.sleep(0.3)
    set_aside(name)
    return DownResult(name, bool(stopped), stopped, port_free, round(time.monotonic() - t0, 2),
                      sorted({r.host for r in left.ranks}), {}, killed)
