"""``up``: preflight, start every rank (workers first, head last), watch, and wait for a real token."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from forklift.cluster import procs
from forklift.cluster.engine import vllm_version
from forklift.cluster.hosts import runner_for
from forklift.cluster.phases import PHASE_NAMES, advance, relevant_tail, startup_hint
from forklift.cluster.record import RankState, RunRecord, run_dir, validate_name
from forklift.cluster.record import load as load_record
from forklift.cluster.runner import Runner
from forklift.errors import (
    EngineStartupError,
    ForkliftError,
    PortInUseError,
    RunAlreadyRunningError,
    RunNotFoundError,
)
from forklift.launch.model import Launch
from forklift.launch.render import python_for, render
from forklift.model.resolve import local_path
from forklift.recipe.schema import Node, Recipe

EventFn = Callable[[str, str], None]
"""on_event(phase, detail): phase is one of PHASE_NAMES or 'preflight'/'prepare'."""


@dataclass
class UpResult:
    record: RunRecord
    ready_s: float
    first_token: str
    phases: dict[str, float] = field(default_factory=dict)


def _noop(phase: str, detail: str) -> None:
    return None


def is_alive(record: RunRecord) -> bool:
    """Whether any process of the run still exists."""
    for rank in record.ranks:
        node = _node_for(record, rank.rank)
        runner = runner_for(node)
        if rank.pgid and procs.pgid_alive(runner, rank.pgid):
            return True
    return False


def _node_for(record: RunRecord, rank: int) -> Node:
    recipe = Recipe.model_validate(record.recipe)
    node_index = next((r.node_index for r in record.launch.ranks if r.rank == rank), rank)
    return recipe.nodes[node_index]


def preflight(recipe: Recipe, name: str, on_event: EventFn = _noop) -> tuple[str, Path]:
    """Checks that need no engine start: name free, engine installed, port free, model present.

    Returns (vLLM version, local model path).
    """
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
    on_event("preflight", "checking the engine")
    head_runner = runner_for(recipe.head)
    version = vllm_version(head_runner, python_for(recipe))
    if recipe.head.is_local and not procs.port_free_local(recipe.serve.host, recipe.serve.port):
        holder = procs.port_holder_local(recipe.serve.port)
        raise PortInUseError(
            f"port {recipe.serve.port} on {recipe.serve.host} is already in use"
            + (f" by {holder}" if holder else ""),
            port=recipe.serve.port,
            holder=holder,
            fix=f"Stop that process, or pick another port: --set serve.port={recipe.serve.port + 1}",
        )
    on_event("prepare", "resolving the model")
    model_dir = local_path(recipe.model, prepare_bundled=True)
    return version, model_dir


def _rank_env(launch_env: dict[str, str], secret_env: dict[str, str]) -> dict[str, str]:
    env = dict(launch_env)
    for target, source in secret_env.items():
        value = os.environ.get(source)
        if value is None:
            raise ForkliftError(
                f"serve.api_key_env names {source}, but it is not set in this environment",
                fix=f"export {source}=... before `forklift up`, or remove serve.api_key_env.",
            )
        env[target] = value
    return env


def start_ranks(recipe: Recipe, launch: Launch, record: RunRecord, runners: dict[int, Runner]) -> None:
    """Spawn every rank in launch order, saving the record after each so `down` can always clean up."""
    folder = run_dir(record.name)
    for rl in launch.ranks:
        log_path = str(folder / f"rank{rl.rank}.log")
        Path(log_path).unlink(missing_ok=True)
        env = _rank_env(rl.env, rl.secret_env)
        spawned = runners[rl.rank].spawn(rl.argv, log_path=log_path, env=env)
        record.ranks.append(RankState(rank=rl.rank, host=rl.host, pid=spawned.pid, pgid=spawned.pid,
                                      log_path=log_path, ssh=recipe.nodes[rl.node_index].ssh))
        record.save()


def _read_new(path: str, offset: int) -> tuple[list[str], int]:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    if not data:
        return [], offset
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return [], offset
    text = data[:cut].decode("utf-8", "replace")
    return text.splitlines(), offset + cut


def _tail_lines(path: str, limit: int = 400) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            return fh.read().decode("utf-8", "replace").splitlines()[-limit:]
    except FileNotFoundError:
        return []


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
    import json

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


def _fail(record: RunRecord, rank: RankState, message: str, runners: dict[int, Runner], grace_s: float) -> None:
    lines = _tail_lines(rank.log_path)
    tail = relevant_tail(lines)
    hint = startup_hint(tail)
    record.status = "failed"
    record.error = message
    record.save()
    stop_all(record, runners, grace_s=grace_s)
    fix = f"Most likely key: {hint[0]} ({hint[1]}). " if hint else ""
    fix += f"Full log: `forklift logs {record.name} --rank {rank.rank}`; diagnosis: `forklift doctor {record.name}`."
    raise EngineStartupError(message, rank=rank.rank, host=rank.host, log_tail=tail,
                             log_path=rank.log_path, fix=fix)


def stop_all(record: RunRecord, runners: dict[int, Runner], *, grace_s: float) -> list[str]:
    """Stop every rank (head first so clients see it go); return the ranks that would not die."""
    leftovers = []
    for rank in sorted(record.ranks, key=lambda r: r.rank):
        if rank.pgid is None:
            continue
        if not procs.stop_group(runners[rank.rank], rank.pgid, grace_s=grace_s):
            leftovers.append(f"rank {rank.rank} on {rank.host} (pgid {rank.pgid})")
    return leftovers


def wait_ready(record: RunRecord, runners: dict[int, Runner], *, timeout_s: float, grace_s: float,
               api_key: str | None, on_event: EventFn) -> tuple[str, dict[str, float]]:
    """Follow the head log for phases; fail fast if any rank dies; ready = /health 200 + a streamed token."""
    t0 = time.monotonic()
    head = next(r for r in record.ranks if r.rank == 0)
    host, port = _host_port(record.endpoint)
    offset = 0
    phase = "starting"
    reached: dict[str, float] = {"starting": 0.0}
    on_event(phase, "")
    while True:
        lines, offset = _read_new(head.log_path, offset)
        new_phase = advance(phase, lines)
        if new_phase != phase:
            for p in PHASE_NAMES[PHASE_NAMES.index(phase) + 1 : PHASE_NAMES.index(new_phase) + 1]:
                reached.setdefault(p, round(time.monotonic() - t0, 2))
            phase = new_phase
            on_event(phase, "")
        for rank in record.ranks:
            if rank.pgid is not None and not procs.pid_alive(runners[rank.rank], rank.pgid):
                _fail(record, rank, f"rank {rank.rank} on {rank.host} exited during startup "
                      f"(phase: {phase})", runners, grace_s)
        if procs.port_open(host, port) and _health(record.endpoint):
            try:
                token = first_token(record.endpoint, record.served_name, api_key)
            except (httpx.HTTPError, EngineStartupError) as exc:
                on_event(phase, f"health ok, first token not yet: {type(exc).__name__}")
            else:
                reached["ready"] = round(time.monotonic() - t0, 2)
                on_event("ready", token)
                return token, reached
        if time.monotonic() - t0 > timeout_s:
            _fail(record, head, f"not ready after {timeout_s:.0f} s (last phase: {phase})", runners, grace_s)
        time.sleep(1.0)


def _host_port(endpoint: str) -> tuple[str, int]:
    url = httpx.URL(endpoint)
    return url.host, url.port or 80


def up(recipe: Recipe, *, name: str = "default", on_event: EventFn = _noop) -> UpResult:
    """Start the deployment described by recipe and return once it streams a real token."""
    t0 = time.monotonic()
    version, model_dir = preflight(recipe, name, on_event)
    launch = render(recipe, model_dir)
    runners = {rl.rank: runner_for(recipe.nodes[rl.node_index]) for rl in launch.ranks}
    record = RunRecord(
        name=name,
        run_id=secrets.token_hex(6),
        recipe=recipe.model_dump(mode="json"),
        launch=launch,
        endpoint=launch.endpoint,
        served_name=launch.served_name,
        vllm_version=version,
        api_key_env=recipe.serve.api_key_env,
    )
    record.timings["preflight_s"] = round(time.monotonic() - t0, 2)
    api_key = os.environ.get(recipe.serve.api_key_env) if recipe.serve.api_key_env else None
    try:
        start_ranks(recipe, launch, record, runners)
        token, reached = wait_ready(record, runners, timeout_s=recipe.timeouts.ready_s,
                                    grace_s=recipe.timeouts.stop_s, api_key=api_key, on_event=on_event)
    except KeyboardInterrupt:
        stop_all(record, runners, grace_s=recipe.timeouts.stop_s)
        record.status = "stopped"
        record.error = "interrupted during startup"
        record.save()
        raise
    except ForkliftError:
        raise
    except Exception as exc:
        stop_all(record, runners, grace_s=recipe.timeouts.stop_s)
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
