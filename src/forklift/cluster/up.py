"""``up``: preflight, start every rank (workers first, head last), watch, and wait for a real token.

Works the same for one local node and for several nodes over SSH: every host is reached through its
Runner (node index -> Runner); rank logs live on the rank's own host and are read back through it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from forklift.cluster import hooks, procs, remote
from forklift.cluster.hosts import runners_for
from forklift.cluster.inventory import resolve as resolve_inventory
from forklift.cluster.modelfiles import local_listing
from forklift.cluster.phases import PHASE_NAMES, advance, relevant_tail, startup_hint
from forklift.cluster.preflight import PreflightReport, run_preflight
from forklift.cluster.record import RankState, RunRecord, run_dir, validate_name
from forklift.cluster.record import load as load_record
from forklift.errors import (
    EngineStartupError,
    ForkliftError,
    ModelNotFoundError,
    PortInUseError,
    RunAlreadyRunningError,
    RunNotFoundError,
)
from forklift.launch.model import Launch, NodePaths, RankLaunch
from forklift.launch.render import API_KEY_VAR, LAUNCHER_FILE, render
from forklift.model.resolve import local_path
from forklift.recipe.schema import Recipe
from forklift.runner import Runner
from forklift.runner.fanout import fan_out
from forklift.runner.ssh import default_ssh_config

EventFn = Callable[[str, str], None]
"""on_event(phase, detail): phase is one of PHASE_NAMES or 'preflight'/'prepare'."""

FAIL_GRACE_S = 8.0
"""SIGTERM grace when a start fails: short, so `up` fails within 30 s of a rank dying."""
_JOIN_RE = re.compile(r"world_size=\d+ rank=(\d+) .*distributed_init_method")
_RAY_NODE_RE = re.compile(r"^\s*(\d+)\s+node_[0-9a-f]+", re.M)


@dataclass
class UpResult:
    record: RunRecord
    ready_s: float
    first_token: str
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class Preflight:
    version: str
    model_dir: Path
    report: PreflightReport


def _noop(phase: str, detail: str) -> None:
    return None


def record_runners(record: RunRecord) -> dict[int, Runner]:
    """Runners for the nodes of a recorded run (with the ssh config it was started with)."""
    return runners_for(Recipe.model_validate(record.recipe), ssh_config=record.ssh_config)


def _node_index(rank: RankState) -> int:
    return rank.node_index if rank.node_index is not None else rank.rank


def is_alive(record: RunRecord, runners: Mapping[int, Runner] | None = None) -> bool:
    """Whether any process of the run still exists."""
    runners = runners or record_runners(record)
    return any(r.pgid and procs.pgid_alive(runners[_node_index(r)], r.pgid) for r in record.ranks)


def _model_dir(recipe: Recipe) -> tuple[Path, bool]:
    """The model directory as this machine knows it, and whether this machine has it."""
    try:
        return local_path(recipe.model, prepare_bundled=True), True
    except ModelNotFoundError:
        if all(not n.is_local for n in recipe.nodes) and recipe.model.source.startswith("/"):
            return Path(recipe.model.source), False  # only the nodes have it; the head's copy is the reference
        raise


def preflight(recipe: Recipe, name: str, on_event: EventFn = _noop,
              runners: Mapping[int, Runner] | None = None, *, raise_on_failure: bool = True) -> Preflight:
    """Checks that need no engine start, on every node in parallel: reachable, runtime and one vLLM
    version, model files, memory and disk, ports. Raises PreflightError naming every failing node."""
    validate_name(name)
    try:
        existing = load_record(name)
    except RunNotFoundError:
        existing = None
    if existing is not None and existing.status in ("starting", "ready") and is_alive(existing):
        raise RunAlreadyRunningError(
            f"a deployment named '{name}' is already running at {existing.endpoint}",
            fix=f"Stop it with `forklift down {name}`, or start this one with `--name OTHER`.",
        )
    runners = runners or runners_for(recipe, ssh_config=default_ssh_config())
    on_event("prepare", "resolving the model")
    model_dir, have_local = _model_dir(recipe)
    if recipe.head.is_local and not procs.port_free_local(recipe.serve.host, recipe.serve.port):
        holder = procs.port_holder_local(recipe.serve.port)
        raise PortInUseError(
            f"port {recipe.serve.port} on {recipe.serve.host} is already in use"
            + (f" by {holder}" if holder else ""),
            port=recipe.serve.port,
            holder=holder,
            fix=f"Stop that process, or pick another port: --set serve.port={recipe.serve.port + 1}",
        )
    on_event("preflight", f"checking {len(recipe.nodes)} node(s)")
    report = run_preflight(recipe, runners, model_dir, local_listing(model_dir) if have_local else None)
    if raise_on_failure:
        report.raise_if_failed()
    version = report.versions.get(recipe.head.host, "unknown")
    return Preflight(version, model_dir, report)


def _secret_values(secret_env: dict[str, str]) -> dict[str, str]:
    """{variable in the rank: its value}, read from this process's environment (never stored)."""
    env: dict[str, str] = {}
    for target, source in secret_env.items():
        value = os.environ.get(source)
        if value is None:
            raise ForkliftError(
                f"serve.api_key_env names {source}, but it is not set in this environment",
                fix=f"export {source}=... before `forklift up`, or remove serve.api_key_env.",
            )
        env[target] = value
    return env


def prepare_nodes(recipe: Recipe, name: str, run_id: str, runners: Mapping[int, Runner]) -> dict[int, NodePaths]:
    """Make the run directory on every node; copy the vLLM launcher where forklift is not installed."""
    launcher = (Path(__file__).resolve().parent.parent / "engine" / "vllm_main.py").read_text()
    needs_launcher = recipe.runtime.kind == "docker"

    def one(idx: int) -> NodePaths:
        node, runner = recipe.nodes[idx], runners[idx]
        if node.is_local:
            folder, home = str(run_dir(name)), str(Path.home())
            Path(folder).mkdir(parents=True, exist_ok=True)
        else:
            home = remote.home_dir(runner)
            nodes_dir = f"{home}/.local/state/forklift/nodes"
            folder = f"{nodes_dir}/{name}-{run_id}"
            remote.remove_stale_run_dirs(runner, nodes_dir, name, keep=folder)
        if needs_launcher or not node.is_local:
            remote.write_text(runner, f"{folder}/{LAUNCHER_FILE}", launcher)
        else:
            runner.run(["mkdir", "-p", folder]).check()
        return NodePaths(run_dir=folder, home=home)

    done = fan_out(((i, i) for i in runners), one)
    done.raise_first()
    return done.results


def _spawn_group(recipe: Recipe, group: Sequence[RankLaunch], record: RunRecord,
                 runners: Mapping[int, Runner]) -> None:
    """Spawn a group of processes in parallel; record every one that started, then raise the first error."""
    def one(rl: RankLaunch) -> RankState:
        log_path = f"{rl.run_dir}/{rl.log_name}"
        spawned = runners[rl.node_index].spawn(rl.argv, log_path=log_path, env=rl.env,
                                               secret_env=_secret_values(rl.secret_env))
        return RankState(rank=rl.rank, host=rl.host, pid=spawned.pid, pgid=spawned.pid, container=rl.container,
                         log_path=log_path, ssh=recipe.nodes[rl.node_index].ssh, node_index=rl.node_index,
                         role=rl.role)

    done = fan_out(((i, rl) for i, rl in enumerate(group)), one)
    record.ranks.extend(done.results[i] for i in sorted(done.results))
    record.save()
    done.raise_first()


def ray_node_count(status_text: str) -> int:
    """Active nodes in `ray status` output."""
    active = status_text.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in status_text else ""
    return sum(int(m.group(1)) for m in _RAY_NODE_RE.finditer(active))


def wait_ray_nodes(recipe: Recipe, launch: Launch, record: RunRecord, runners: Mapping[int, Runner],
                   on_event: EventFn) -> None:
    """Poll `ray status` on the head until every node is registered (never a fixed sleep)."""
    assert launch.ray_status_argv is not None
    want = len(recipe.nodes)
    deadline = time.monotonic() + recipe.ray.start_timeout_s
    seen = 0
    while time.monotonic() < deadline:
        _check_alive(record, runners, "ray start")
        res = runners[0].run(launch.ray_status_argv, timeout=60)
        seen = ray_node_count(res.stdout) if res.ok else 0
        on_event("starting", f"ray: {seen}/{want} nodes registered")
        if seen >= want:
            return
        time.sleep(1.0)
    waiting = [r for r in record.ranks if r.role == "ray-worker"]
    rank = waiting[-1] if waiting else record.ranks[0]
    _fail(record, rank, f"Ray registered {seen} of {want} nodes within {recipe.ray.start_timeout_s:.0f} s; "
          f"workers that may not have joined: {', '.join(r.host for r in waiting)}", runners)


def start_ray_cluster(recipe: Recipe, launch: Launch, record: RunRecord, runners: Mapping[int, Runner],
                      on_event: EventFn = _noop) -> None:
    """`ray start --head`, then every worker in parallel, then wait until `ray status` lists every node."""
    _spawn_group(recipe, launch.ray[:1], record, runners)
    _spawn_group(recipe, launch.ray[1:], record, runners)
    wait_ray_nodes(recipe, launch, record, runners, on_event)


def start_ranks(recipe: Recipe, launch: Launch, record: RunRecord, runners: Mapping[int, Runner],
                on_event: EventFn = _noop) -> None:
    """Start every process in order, saving the record after each group so `down` can always clean up:
    Ray head, Ray workers (then wait until all registered), engine workers, the head last."""
    if launch.ray:
        start_ray_cluster(recipe, launch, record, runners, on_event)
    workers = [r for r in launch.ranks if r.rank != 0]
    if workers:
        _spawn_group(recipe, workers, record, runners)
    _spawn_group(recipe, [launch.head], record, runners)


def first_token(endpoint: str, model: str, api_key: str | None, timeout: float = 120.0) -> str:
    """Stream one chat completion; return the first content token (raises on any failure)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{endpoint}/v1/chat/completions", json=body, headers=headers,
                      timeout=timeout) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                if text:
                    return str(text)
    raise EngineStartupError("the server answered but streamed no token",
                             fix="Run `forklift check` to see what the endpoint returns.")


def _health(endpoint: str) -> bool:
    try:
        return httpx.get(f"{endpoint}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def rank_log(record: RunRecord, rank: RankState, runners: Mapping[int, Runner], lines: int = 400) -> list[str]:
    try:
        return remote.tail(runners[_node_index(rank)], rank.log_path, lines)
    except ForkliftError:
        return []


def _fail(record: RunRecord, rank: RankState, message: str, runners: Mapping[int, Runner]) -> None:
    lines = rank_log(record, rank, runners)
    tail = relevant_tail(lines)
    hint = startup_hint(tail)
    finding = hooks.diagnosis(lines, record.vllm_version)
    record.status = "failed"
    record.error = message
    record.save()
    stop_all(record, runners, grace_s=FAIL_GRACE_S)
    fix = f"doctor: {finding} " if finding else ""
    fix += f"Most likely key: {hint[0]} ({hint[1]}). " if hint else ""
    fix += f"Full log: `forklift logs {record.name} --rank {rank.rank}`; diagnosis: `forklift doctor {record.name}`."
    raise EngineStartupError(message, rank=rank.rank, host=rank.host, log_tail=tail,
                             log_path=rank.log_path, fix=fix)


def _stop_one(rank: RankState, runner: Runner, grace_s: float) -> procs.StopOutcome:
    if rank.container:
        t0 = time.monotonic()
        runner.run(["docker", "stop", "-t", str(int(grace_s)), rank.container], timeout=grace_s + 30)
        waited_out = time.monotonic() - t0 >= grace_s  # docker stop sent SIGKILL itself
        runner.run(["docker", "rm", "-f", rank.container], timeout=60)
        if waited_out:
            return "killed"
    if rank.pgid is None:
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
        done = fan_out(((i, r) for i, r in enumerate(group)), lambda r: _stop_one(r, runners[_node_index(r)], grace_s))
        for i, r in enumerate(group):
            what = f"{r.role} {r.rank} on {r.host} (pgid {r.pgid})"
            outcome = done.results.get(i, "survived")
            if outcome == "survived":
                why = f": {done.errors[i]}" if i in done.errors else ""
                report.leftovers.append(what + why)
            elif outcome == "killed":
                report.killed.append(what)
    return report


def _check_alive(record: RunRecord, runners: Mapping[int, Runner], phase: str) -> None:
    live = [r for r in record.ranks if r.pgid is not None]
    done = fan_out(((i, r) for i, r in enumerate(live)),
                   lambda r: procs.pid_alive(runners[_node_index(r)], r.pgid or 0))
    for i, r in enumerate(live):
        if i in done.errors:
            _fail(record, r, f"{r.host} stopped answering during startup ({phase}): {done.errors[i]}", runners)
        if not done.results[i]:
            what = "rank" if r.role == "engine" else r.role
            _fail(record, r, f"{what} {r.rank} on {r.host} exited during startup (phase: {phase})", runners)


def _not_joined(record: RunRecord, runners: Mapping[int, Runner]) -> list[RankState]:
    """Engine ranks whose log shows no distributed init: the ones that never reached the head."""
    ranks = [r for r in record.ranks if r.role == "engine"]
    silent = [r for r in ranks if not any(_JOIN_RE.search(x) for x in rank_log(record, r, runners, 2000))]
    return silent or [r for r in ranks if r.rank != 0]


def wait_ready(record: RunRecord, runners: Mapping[int, Runner], *, timeout_s: float, join_s: float,
               api_key: str | None, on_event: EventFn) -> tuple[str, dict[str, float]]:
    """Follow the head log for phases; fail fast if any rank dies or a rank never joins;
    ready = every rank alive + /health 200 + a streamed token."""
    t0 = time.monotonic()
    head = next(r for r in record.ranks if r.rank == 0 and r.role == "engine")
    head_runner = runners[_node_index(head)]
    multi = len({_node_index(r) for r in record.ranks}) > 1
    offset = 0
    phase = "starting"
    reached: dict[str, float] = {"starting": 0.0}
    on_event(phase, "")
    while True:
        lines, offset = remote.read_from(head_runner, head.log_path, offset)
        new_phase = advance(phase, lines)
        if new_phase != phase:
            for p in PHASE_NAMES[PHASE_NAMES.index(phase) + 1 : PHASE_NAMES.index(new_phase) + 1]:
                reached.setdefault(p, round(time.monotonic() - t0, 2))
            phase = new_phase
            on_event(phase, "")
        _check_alive(record, runners, phase)
        elapsed = time.monotonic() - t0
        if multi and phase == "starting" and elapsed > join_s:
            silent = _not_joined(record, runners)
            names = ", ".join(f"rank {r.rank} on {r.host}" for r in silent)
            _fail(record, silent[0], f"{names} never joined the head within {join_s:.0f} s", runners)
        if _health(record.endpoint):
            try:
                token = first_token(record.endpoint, record.served_name, api_key)
            except (httpx.HTTPError, EngineStartupError) as exc:
                on_event(phase, f"health ok, first token not yet: {type(exc).__name__}")
            else:
                _check_alive(record, runners, "ready")
                reached["ready"] = round(time.monotonic() - t0, 2)
                on_event("ready", token)
                return token, reached
        if elapsed > timeout_s:
            _fail(record, head, f"not ready after {timeout_s:.0f} s (last phase: {phase})", runners)
        time.sleep(1.0)


def up(recipe: Recipe, *, name: str = "default", on_event: EventFn = _noop,
       runners: Mapping[int, Runner] | None = None, force: bool = False) -> UpResult:
    """Start the deployment described by recipe and return once it streams a real token."""
    t0 = time.monotonic()
    recipe = resolve_inventory(recipe)
    ssh_config = default_ssh_config()
    runners = dict(runners) if runners is not None else runners_for(recipe, ssh_config=ssh_config)
    pre = preflight(recipe, name, on_event, runners)
    on_event("preflight", "planning memory")
    plan = hooks.plan_for(recipe, pre.version, force=force)
    on_event("prepare", f"applying {len(recipe.patches)} patch(es)" if recipe.patches else "no patches")
    patches = hooks.apply_patches(recipe, runners)
    run_id = secrets.token_hex(6)
    on_event("prepare", "creating run directories on every node")
    node_paths = prepare_nodes(recipe, name, run_id, runners)
    launch = render(recipe, pre.model_dir, run_id=run_id, node_paths=node_paths)
    record = RunRecord(
        name=name,
        run_id=run_id,
        recipe=recipe.model_dump(mode="json"),
        launch=launch,
        endpoint=launch.endpoint,
        served_name=launch.served_name,
        vllm_version=pre.version,
        api_key_env=recipe.serve.api_key_env,
        ssh_config=ssh_config,
        gpu_baseline_mib=pre.report.gpu_baseline_mib,
        plan=plan,
        patches=patches,
    )
    # only the head's engine carries the key; a missing one fails here, before anything starts
    api_key = _secret_values(launch.head.secret_env).get(API_KEY_VAR)
    record.timings["preflight_s"] = round(time.monotonic() - t0, 2)
    record.save()
    try:
        start_ranks(recipe, launch, record, runners, on_event)
        token, reached = wait_ready(record, runners, timeout_s=recipe.timeouts.ready_s,
                                    join_s=recipe.timeouts.join_s, api_key=api_key, on_event=on_event)
    except KeyboardInterrupt:
        stop_all(record, runners, grace_s=FAIL_GRACE_S)
        record.status = "stopped"
        record.error = "interrupted during startup"
        record.save()
        raise
    except EngineStartupError:
        raise
    except Exception as exc:
        stop_all(record, runners, grace_s=FAIL_GRACE_S)
        record.status = "failed"
        record.error = f"{type(exc).__name__}: {exc}"
        record.save()
        raise
    record.status = "ready"
    record.phases = reached
    record.timings["start_to_ready_s"] = reached["ready"]
    record.timings["total_s"] = round(time.monotonic() - t0, 2)
    record.save()
    return UpResult(record=record, ready_s=reached["ready"], first_token=token, phases=reached)
