"""``probe(deployment)``: start vLLM on the recipe's own nodes with dummy weights, follow every rank's log, stop
the deployment as soon as the KV cache is sized (and, on GPUs without enforce_eager, the CUDA graphs captured),
and store what the logs measured as a ``plan.probes.Probe`` for the planner.

The start is ``up``'s (preflight, patches, run folders, the same Runner per node, local, SSH or docker; a run
record under ``runs/probe-NAME`` so ``down`` can always clean up), without waiting for a token. Whatever happens
(measured, timeout, a rank dying, Ctrl-C or SIGTERM) every process is stopped before this returns or raises.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forklift.cluster.phases import PHASE_NAMES, advance
from forklift.cluster.ready import FAIL_GRACE_S, check_alive
from forklift.cluster.start import EventFn, _noop, prepare_nodes, start_ranks
from forklift.cluster.stop import StopReport, stop_all
from forklift.cluster.up import apply_patches, make_record, preflight
from forklift.errors import ProbeError
from forklift.host import remote
from forklift.launch.hosts import runners_for
from forklift.launch.render import render
from forklift.model.load import spec_for
from forklift.plan import Plan, Unplanned, calibrate, for_launch, probes, rules
from forklift.plan.core import context, hardware_identity, node_profiles, probe_settings
from forklift.plan.startlog import LogFacts, parse_log
from forklift.recipe.deployment import Deployment
from forklift.record import RunLock, RunRecord, validate_name
from forklift.runner import Runner
from forklift.runner.ssh import default_ssh_config

__all__ = ["ProbeProcess", "ProbeResult", "RankLog", "dry_run", "from_logs", "measured", "probe", "probe_deployment",
           "sized"]

STOP_GRACE_S = 10.0


@dataclass
class ProbeResult:
    probe: probes.Probe
    path: Path
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)
    """Processes that needed SIGKILL when the probe stopped them."""


def probe_deployment(deployment: Deployment) -> Deployment:
    """The deployment a probe starts: dummy weights (nothing read but config.json and the tokenizer), and no
    explicit KV budget (vLLM must profile to measure)."""
    r = deployment.recipe
    recipe = r.model_copy(update={"model": r.model.model_copy(update={"load_format": "dummy"}),
                                  "serve": r.serve.model_copy(update={"kv_cache_memory_bytes": None})})
    return deployment.model_copy(update={"recipe": recipe})


def default_name(deployment: Deployment) -> str:
    return f"probe-{deployment.name}"


@dataclass(frozen=True)
class ProbeProcess:
    """One process a probe would start."""

    host: str
    role: str
    rank: int
    env: dict[str, str]
    argv: list[str]


def dry_run(deployment: Deployment) -> list[ProbeProcess]:
    """What the probe would start, in start order: per process its host, role, env and argv (nothing is reached
    or started; node paths show as the run folder placeholders ``render`` uses)."""
    launch = render(for_launch(probe_deployment(deployment), force=True), run_id="RUNID")
    order = [*launch.ray, *[r for r in launch.ranks if r.rank != 0], launch.head]
    return [ProbeProcess(rl.host, rl.role, rl.rank, dict(rl.env), list(rl.argv)) for rl in order]


def sized(facts: LogFacts, *, platform: str, eager: bool, phase: str) -> bool:
    """Whether the head's log holds what a probe needs: the KV size (or vLLM's memory error), and on GPUs with
    CUDA graphs the capture's memory; the server starting to listen ends the wait in any case."""
    if phase in ("serving", "ready"):
        return True
    if facts.error in ("kv", "no_memory"):
        return True
    if facts.kv_tokens is None:
        return False
    if platform != "cuda" or eager:
        return True
    return facts.graph_capture_gib is not None or facts.cudagraph_actual_gib is not None


def _follow(record: RunRecord, runners: Mapping[int, Runner], *, platform: str, eager: bool, timeout_s: float,
            on_event: EventFn) -> dict[str, float]:
    """Read the head's log until ``sized``; fail fast when a rank dies; ProbeError after ``timeout_s``."""
    head = next(r for r in record.ranks if r.rank == 0 and r.role == "engine")
    t0 = time.monotonic()
    phase, offset, lines = "starting", 0, []
    reached = {"starting": 0.0}
    on_event("starting", "")
    while True:
        new, offset = remote.read_from(runners[head.node], head.log_path, offset)
        lines += new
        now = advance(phase, new)
        if now != phase:
            for p in PHASE_NAMES[PHASE_NAMES.index(phase) + 1: PHASE_NAMES.index(now) + 1]:
                reached.setdefault(p, round(time.monotonic() - t0, 2))
            phase = now
            on_event(phase, "")
        facts = parse_log("\n".join(lines))
        if sized(facts, platform=platform, eager=eager, phase=phase):
            reached["sized"] = round(time.monotonic() - t0, 2)
            detail = f"{facts.kv_tokens:,} KV tokens" if facts.kv_tokens is not None else f"error: {facts.error}"
            on_event("sized", detail)
            return reached
        check_alive(record, runners, phase)
        if time.monotonic() - t0 > timeout_s:
            raise ProbeError(f"vLLM did not log its KV cache size within {timeout_s:.0f} s (last phase: {phase})",
                             fix="Give it longer (`forklift probe --timeout SECONDS`, or --set "
                             f"timeouts.ready_s=SECONDS), or read the log: `forklift logs {record.name} --rank 0`.")
        time.sleep(1.0)


@dataclass(frozen=True)
class RankLog:
    """One engine process's log, as read back from its node."""

    node: int
    host: str
    log_path: str
    text: str
    head: bool = False


def _rank_terms(log: RankLog, stages: list[int]) -> tuple[probes.RankTerms, LogFacts]:
    facts = parse_log(log.text)
    graphs = facts.cudagraph_actual_gib if facts.cudagraph_actual_gib is not None else facts.graph_capture_gib
    terms = probes.RankTerms(
        node=log.node, host=log.host, pp_stages=stages or [0], log_path=log.log_path, weights_gib=facts.weights_gib,
        activation_gib=facts.activation_gib, non_torch_gib=facts.non_torch_gib, cudagraph_gib=graphs,
        cudagraph_estimate_gib=facts.cudagraph_estimate_gib, available_kv_gib=facts.available_kv_gib,
        requested_gib=facts.requested_gib, memory_total_gib=facts.memory_total_gib, cpu_kv_gib=facts.cpu_kv_gib)
    return terms, facts


def from_logs(deployment: Deployment, logs: Sequence[RankLog], *, vllm_build: str, wall_s: float = 0.0,
              run_name: str | None = None) -> probes.Probe:
    """The probe the ranks' logs describe, keyed by this deployment's hardware identity, the nodes' vLLM build, the
    model config hash and the settings as vLLM resolves them (pure: the logs are text)."""
    src = spec_for(deployment.recipe.model)
    plat = node_profiles(deployment)[0].kind
    ctx = context(deployment, src, rules.rules_for(vllm_build.split("+")[0] if plat == "cuda" else None))
    read = [_rank_terms(log, ctx.place.stages_of(log.node)) for log in logs]
    head = next((f for (_, f), log in zip(read, logs, strict=True) if log.head), read[0][1])
    if head.kv_tokens is None and head.error is None:
        raise ProbeError("the head's log has no KV cache size ('KV cache size: N tokens') and no memory error",
                         fix=f"Read it: `forklift logs {run_name or 'RUN'} --rank 0`.")
    ranks = [t for t, _ in read]
    pools = [t.available_kv_gib for t in ranks if t.available_kv_gib is not None]
    pool_gib = min(pools) if pools else next((t.cpu_kv_gib for t in ranks if t.cpu_kv_gib is not None), None)
    pool = int(pool_gib * probes.GIB) if pool_gib is not None else None
    tokens = head.kv_tokens or 0
    hardware, settings = hardware_identity(ctx), probe_settings(ctx)
    config_hash = calibrate.fingerprint(src.spec)
    return probes.Probe(
        key=probes.key_of(hardware, vllm_build, config_hash, settings), recipe=deployment.recipe.name,
        hosts=[n.host for n in deployment.nodes], hardware=hardware, vllm_build=vllm_build, platform=ctx.st.platform,
        model=src.spec.name, architecture=src.spec.architecture, config_hash=config_hash, settings=settings,
        kv_tokens=tokens, block_size=head.block_size, kv_pool_bytes=pool,
        kv_bytes_per_token=pool / tokens if pool and tokens else None,
        cudagraph_subtracted=any(t.cudagraph_estimate_gib is not None for t in ranks),
        error=head.error, ranks=ranks, wall_s=round(wall_s, 2), run_name=run_name)


def measured(deployment: Deployment, record: RunRecord, runners: Mapping[int, Runner], *, vllm_build: str,
             wall_s: float) -> tuple[probes.Probe, list[RankLog]]:
    """``from_logs`` over every engine rank's log, read back through its node's Runner (and the logs)."""
    logs = [RankLog(node=r.node, host=r.host, log_path=r.log_path, head=r.rank == 0,
                    text="\n".join(remote.tail(runners[r.node], r.log_path)))
            for r in record.ranks if r.role == "engine"]
    return from_logs(deployment, logs, vllm_build=vllm_build, wall_s=wall_s, run_name=record.name), logs


def keep_logs(probe: probes.Probe, logs: Sequence[RankLog]) -> probes.Probe:
    """Copy each rank's log beside the probe (the run folder's are rotated by the next start) and point the
    probe's ranks at the copies."""
    folder = probes.probe_dir(probe.config_hash)
    folder.mkdir(parents=True, exist_ok=True)
    kept: dict[int, str] = {}
    for log in logs:
        path = folder / f"{probe.key}.node{log.node}.log"
        path.write_text(log.text + "\n")
        kept[log.node] = str(path)
    ranks = [r.model_copy(update={"log_path": kept.get(r.node, r.log_path)}) for r in probe.ranks]
    return probe.model_copy(update={"ranks": ranks})


def ctx_platform(plan: Plan | Unplanned) -> str:
    return plan.platform if isinstance(plan, Plan) else "cuda"


def probe(deployment: Deployment, *, name: str | None = None, on_event: EventFn = _noop,
          runners: Mapping[int, Runner] | None = None, timeout_s: float | None = None) -> ProbeResult:
    """Measure the deployment's memory on its own nodes and store the probe (``plan`` uses it from then on).
    Raises PreflightError naming failing nodes, EngineStartupError when a rank dies (with doctor's finding),
    ProbeError on timeout; every process is stopped first."""
    name = name or default_name(deployment)
    validate_name(name)
    with RunLock(name):
        return _probe(probe_deployment(deployment), name, on_event, runners, timeout_s)


def _probe(deployment: Deployment, name: str, on_event: EventFn, runners: Mapping[int, Runner] | None,
           timeout_s: float | None) -> ProbeResult:
    t0 = time.monotonic()
    recipe = deployment.recipe
    plan = for_launch(deployment, force=True)
    ssh_config = default_ssh_config()
    runners = dict(runners) if runners is not None else runners_for(recipe, ssh_config=ssh_config)
    pre = preflight(plan, name, runners=runners, run_id=secrets.token_hex(6), on_event=on_event)
    pre.report.raise_if_failed()
    on_event("prepare", f"applying {len(recipe.patches)} patch(es)" if recipe.patches else "run directories")
    patches = apply_patches(recipe, runners)
    prepare_nodes(recipe, name, pre.paths, runners)
    record, _ = make_record(plan, name, pre, patches, ssh_config, runners)
    record.save()
    platform = ctx_platform(plan)
    eager = recipe.serve.enforce_eager or platform == "cpu"
    stop = StopReport()
    try:
        start_ranks(recipe, record.launch, record, runners, on_event)
        reached = _follow(record, runners, platform=platform, eager=eager,
                          timeout_s=timeout_s or recipe.timeouts.ready_s, on_event=on_event)
    except BaseException as exc:
        stop = stop_all(record, runners, grace_s=FAIL_GRACE_S)
        if record.status != "failed":
            record.status = "stopped" if isinstance(exc, KeyboardInterrupt) else "failed"
            record.error = record.error or f"probe: {type(exc).__name__}: {exc}"
        record.save()
        raise
    on_event("stopping", "the KV cache is sized: stopping every rank")
    stop = stop_all(record, runners, grace_s=STOP_GRACE_S)
    record.status = "stopped"
    record.save()
    if stop.leftovers:
        raise ProbeError(f"processes survived the probe's stop: {'; '.join(stop.leftovers)}",
                         fix=f"`forklift down {name}` stops them (or kill the named process groups).")
    wall = time.monotonic() - t0
    result, logs = measured(deployment, record, runners, vllm_build=pre.version, wall_s=wall)
    result = keep_logs(result, logs)
    path = probes.store(result)
    return ProbeResult(probe=result, path=path, wall_s=round(wall, 2), phases=reached, killed=stop.killed)
