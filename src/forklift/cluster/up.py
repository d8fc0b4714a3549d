"""``up(plan)``: preflight every node, apply patches, start every rank (workers first, head last), watch, and
wait for a real token. The same for one local node and for several over SSH: every host is reached through
its Runner; rank logs live on the rank's own host and are read back through it.

The steps: gate (a plan that does not fit is refused unless forced) -> node paths -> render(plan) -> preflight
(runtime, one vLLM version, model files, memory, disk, ports) and node checks -> patches -> run folders ->
start -> ready. The run record is written before the first process starts and after every group.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift import speculative
from forklift.cluster.pins import collect as collect_pins
from forklift.cluster.preflight import PreflightReport, run_preflight
from forklift.cluster.ready import FAIL_GRACE_S, wait_ready
from forklift.cluster.start import EventFn, _noop, prepare_nodes, reach_nodes, secret_values, start_ranks
from forklift.cluster.stop import is_alive, stop_all
from forklift.distribution.modelfiles import cache_repo_dir, hub_cache, local_listing, snapshot_dir
from forklift.errors import (
    DoesNotFitError,
    EngineStartupError,
    ForkliftError,
    ModelNotFoundError,
    NodeError,
    PatchError,
    PlanError,
    PortInUseError,
    RunAlreadyRunningError,
    RunNotFoundError,
    Terminated,
)
from forklift.hardware.profiles import node_profile
from forklift.host import procs
from forklift.launch.flags import API_KEY_VAR
from forklift.launch.hosts import runners_for
from forklift.launch.launch_spec import Launch, NodePaths
from forklift.launch.render import python_for, render
from forklift.model.resolve import hf_cache_path, local_path
from forklift.node import preflight as node_preflight
from forklift.node import resolve_profile
from forklift.patches import recipes as recipe_patches
from forklift.plan import Plan, Unplanned, rules
from forklift.plan.make import make
from forklift.recipe import exposure
from forklift.recipe.exposure import open_without_key
from forklift.recipe.schema import Recipe
from forklift.record import PatchPin, RankState, RunLock, RunRecord, validate_name
from forklift.record import load as load_record
from forklift.results import CheckResult
from forklift.runner import Runner, fan_out
from forklift.runner.ssh import default_ssh_config

__all__ = ["Preflight", "UpResult", "apply_patches", "gate", "make_record", "preflight", "up"]


@dataclass
class UpResult:
    record: RunRecord
    ready_s: float
    first_token: str
    phases: dict[str, float] = field(default_factory=dict)
    warnings: list[CheckResult] = field(default_factory=list)
    """Node checks that warned (refused instead with ``strict``)."""


@dataclass
class Preflight:
    version: str
    report: PreflightReport
    launch: Launch
    paths: dict[int, NodePaths]


def gate(plan: Plan | Unplanned, *, force: bool) -> None:
    """Refuse a plan that says vLLM will not start (the ten-minute load that ends in '0.16 GiB KV available')
    unless ``force``; say the first step of advice that makes it fit."""
    if force or not isinstance(plan, Plan) or plan.fits:
        return
    first = next((a for a in plan.advice if a.fits), plan.advice[0] if plan.advice else None)
    lead = f"{first.action} (--set {' --set '.join(first.set)}): {first.effect}. " if first else ""
    name = plan.deployment.recipe.name or ""
    raise DoesNotFitError(f"the plan says this will not start: {plan.error}",
                          fix=lead + f"See `forklift plan {name}` for every option, `--apply` to take the advice, "
                          "or --force to start anyway.")


def _for_version(plan: Plan | Unplanned, version: str) -> Plan | Unplanned:
    """The plan again when the nodes run a vLLM whose sizing rules differ from the ones planned with."""
    if not isinstance(plan, Plan) or plan.platform != "cuda":
        return plan
    base = version.split("+")[0]
    try:
        if rules.rules_for(base).matched == rules.rules_for(plan.vllm_version).matched:
            return plan
    except PlanError:  # the nodes' version did not parse ("unknown"): keep the plan made
        return plan
    again = make(plan.deployment, vllm_version=base)
    return again.model_copy(update={"decisions": plan.decisions})


def _reference(recipe: Recipe) -> Path | None:
    """This machine's copy of the model, to compare the nodes' copies with (None: compare with a node's)."""
    if recipe.model.is_hub_id and recipe.model.path is None:
        return hf_cache_path(recipe.model.source, recipe.model.revision)
    try:
        return local_path(recipe.model, prepare_bundled=True)
    except ModelNotFoundError:
        if any(n.is_local for n in recipe.nodes) and not recipe.model.path:
            raise
        return None


def _node_model_paths(recipe: Recipe, launch: Launch, runners: Mapping[int, Runner],
                      paths: Mapping[int, NodePaths]) -> dict[int, str]:
    """Where each node's weights are: the launch's host path, or a hub id's snapshot in the node's cache."""
    out: dict[int, str] = {}
    for rl in [*launch.ray, *launch.ranks]:
        if rl.node_index in out:
            continue
        if rl.model_path is not None:
            out[rl.node_index] = rl.model_path
            continue
        env = {**recipe.env, **recipe.nodes[rl.node_index].env}
        cache = hub_cache(runners[rl.node_index], env, paths[rl.node_index].home)
        found = snapshot_dir(runners[rl.node_index], recipe.model.source, recipe.model.revision, cache)
        out[rl.node_index] = found or cache_repo_dir(cache, recipe.model.source)
    return out


def _refuse_running(name: str) -> None:
    try:
        existing = load_record(name)
    except RunNotFoundError:
        return
    if existing.status in ("starting", "ready") and is_alive(existing):
        raise RunAlreadyRunningError(
            f"a deployment named '{name}' is already running at {existing.endpoint}",
            fix=f"Stop it with `forklift down {name}`, or start this one with `--name OTHER`.",
        )


def preflight(plan: Plan | Unplanned, name: str, *, runners: Mapping[int, Runner] | None = None,
              run_id: str = "RUNID", on_event: EventFn = _noop) -> Preflight:
    """Checks that need no engine start, on every node in parallel: reachable, runtime and one vLLM version,
    model files where the launch will look for them, memory and disk, ports. Never raises for a node: the
    report says which failed (``report.raise_if_failed()``)."""
    recipe = plan.deployment.recipe
    validate_name(name)
    _refuse_running(name)
    runners = runners or runners_for(recipe, ssh_config=default_ssh_config())
    if recipe.head.is_local and not procs.port_free_local(recipe.serve.host, recipe.serve.port):
        holder = procs.port_holder_local(recipe.serve.port)
        raise PortInUseError(
            f"port {recipe.serve.port} on {recipe.serve.host} is already in use" + (f" by {holder}" if holder else ""),
            port=recipe.serve.port, holder=holder,
            fix=f"Stop that process, or pick another port: --set serve.port={recipe.serve.port + 1}",
        )
    on_event("prepare", "resolving the model and each node's paths")
    reference = _reference(recipe)
    reached = reach_nodes(recipe, name, run_id, runners)
    if reached.errors:  # every unreachable node named, nothing else to check
        shown = render(plan, run_id=run_id)
        report = PreflightReport(checks=[
            CheckResult("reachable", "fail", str(exc), fix=exc.fix if isinstance(exc, ForkliftError) else None,
                        host=recipe.nodes[i].host) for i, exc in reached.errors.items()])
        return Preflight("unknown", report, shown, {})
    paths = reached.results
    launch = render(plan, run_id=run_id, node_paths=paths)
    on_event("preflight", f"checking {len(recipe.nodes)} node(s)")
    report = run_preflight(recipe, runners, _node_model_paths(recipe, launch, runners, paths),
                           local_listing(reference) if reference is not None else None)
    return Preflight(report.versions.get(recipe.head.host, "unknown"), report, launch, paths)


def node_checks(recipe: Recipe, runners: Mapping[int, Runner], *, strict: bool) -> list[CheckResult]:
    """``forklift node``'s preflight on every node: the warnings (raises NodeError for them with ``strict``)."""
    def one(idx: int) -> list[CheckResult]:
        name = node_profile(recipe.nodes[idx].hardware) or "auto"
        return node_preflight(runners[idx], resolve_profile(runners[idx], name))

    done = fan_out(((i, i) for i in runners), one)
    warns = [c for res in done.results.values() for c in res if c.status in ("warn", "fail")]
    if strict and warns:
        listed = "; ".join(f"{c.host}: {c.id}: {c.summary}" for c in warns)
        raise NodeError(f"{len(warns)} node check(s) warned and --strict is set: {listed}",
                        fix="Run `forklift node apply` on those nodes, or drop --strict.")
    return warns


def apply_patches(recipe: Recipe, runners: Mapping[int, Runner]) -> list[dict[str, Any]]:
    """Apply and verify the recipe's patches on every node (venv runtime) before any rank starts. With docker
    each container's launcher applies them before vLLM is imported: this returns what it will apply
    (``container_patches`` reads the hashes back from the logs once the run is ready)."""
    if not recipe.patches:
        return []
    if recipe.runtime.kind != "venv":  # forklift-patches: applied in each container (engine/vllm_main.py)
        return recipe_patches.planned(recipe)
    from forklift.patches import apply_for_recipe

    python = python_for(recipe)
    done = fan_out(runners.items(), lambda r: apply_for_recipe(r, python, recipe.patches))
    for idx, exc in done.errors.items():
        if isinstance(exc, ForkliftError):
            raise exc
        raise PatchError(f"{recipe.nodes[idx].host}: applying patches failed: {exc}")
    overrides = {r.id: {"any_version": r.any_version, "because": r.because} for r in recipe.patches}
    return [{**p.to_json(), **overrides.get(p.id, {})} for idx in sorted(done.results) for p in done.results[idx]]


def container_patches(record: RunRecord, runners: Mapping[int, Runner]) -> list[dict[str, Any]]:
    """forklift-patches: what every container's launcher logged it applied (file hashes), per container."""
    recipe = record.recipe

    def one(rank: RankState) -> list[dict[str, Any]]:
        found = recipe_patches.read_applied(runners[rank.node], rank.log_path, rank.host, recipe)
        return [{**e, "container": rank.container} for e in found]

    done = fan_out(((i, r) for i, r in enumerate(record.ranks) if r.container), one)
    return [e for i in sorted(done.results) for e in done.results[i]]


def visible_gpus(recipe: Recipe, launch: Launch) -> dict[str, list[int]]:
    """Per host, the GPU indices the ranks are limited to by CUDA_VISIBLE_DEVICES (the rank's env, else this
    process's for local nodes); hosts whose ranks see every GPU are left out."""
    out: dict[str, list[int]] = {}
    for rl in launch.processes:
        node = recipe.nodes[rl.node_index]
        value = rl.env.get("CUDA_VISIBLE_DEVICES")
        if value is None and node.is_local:
            value = os.environ.get("CUDA_VISIBLE_DEVICES")
        if value is not None and all(p.strip().isdigit() for p in value.split(",") if p.strip()):
            out.setdefault(node.host, [])
            out[node.host] = sorted({*out[node.host], *(int(p) for p in value.split(",") if p.strip())})
    return out


def make_record(plan: Plan | Unplanned, name: str, pre: Preflight, patches: list[dict[str, Any]],
            ssh_config: str | None, runners: Mapping[int, Runner]) -> tuple[RunRecord, list[CheckResult]]:
    launch = pre.launch
    pins, warnings = collect_pins(plan.deployment.recipe, launch, pre.report.versions, patches, runners,
                                  pre.paths[launch.head.node_index].home, pre.report.stacks)
    return RunRecord(name=name, run_id=launch.run_id or "", plan=plan, launch=launch, endpoint=launch.endpoint,
                     served_name=launch.served_name, pins=pins, patches=patches, ssh_config=ssh_config,
                     gpu_baseline_mib=pre.report.gpu_baseline_mib,
                     gpu_indices=visible_gpus(plan.deployment.recipe, launch)), warnings


def _start_and_wait(record: RunRecord, runners: Mapping[int, Runner], api_key: str | None,
                    on_event: EventFn) -> tuple[str, dict[str, float]]:
    recipe = record.recipe
    try:
        start_ranks(recipe, record.launch, record, runners, on_event)
        return wait_ready(record, runners, timeout_s=recipe.timeouts.ready_s, join_s=recipe.timeouts.join_s,
                          api_key=api_key, on_event=on_event)
    except EngineStartupError:
        raise
    except BaseException as exc:
        stop_all(record, runners, grace_s=FAIL_GRACE_S)
        interrupted = isinstance(exc, KeyboardInterrupt)
        signal_name = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        record.status = "stopped" if interrupted else "failed"
        record.error = (f"interrupted during startup ({signal_name})" if interrupted
                        else f"{type(exc).__name__}: {exc}")
        record.save()
        raise


def up(plan: Plan | Unplanned, *, name: str = "default", on_event: EventFn = _noop,
       runners: Mapping[int, Runner] | None = None, force: bool = False, strict: bool = False,
       check_nodes: bool = True) -> UpResult:
    """Start the plan's deployment and return once it streams a real token. Raises DoesNotFitError for a plan
    that does not fit (unless ``force``), PreflightError naming every failing node, NodeError for node checks
    with ``strict``, EngineStartupError with the root cause and doctor's finding when a rank dies."""
    validate_name(name)
    with RunLock(name):  # one `up` per name, from preflight until ready / failed / stopped
        return _up(plan, name=name, on_event=on_event, runners=runners, force=force, strict=strict,
                   check_nodes=check_nodes)


def _up(plan: Plan | Unplanned, *, name: str, on_event: EventFn, runners: Mapping[int, Runner] | None,
        force: bool, strict: bool, check_nodes: bool) -> UpResult:
    t0 = time.monotonic()
    gate(plan, force=force)
    recipe = plan.deployment.recipe
    exposed = open_without_key(recipe)
    if strict and exposed:
        raise NodeError(f"{exposed}, and --strict is set", fix=exposure.FIX)
    ssh_config = default_ssh_config()
    runners = dict(runners) if runners is not None else runners_for(recipe, ssh_config=ssh_config)
    run_id = secrets.token_hex(6)
    pre = preflight(plan, name, runners=runners, run_id=run_id, on_event=on_event)
    pre.report.raise_if_failed()
    warnings = node_checks(recipe, runners, strict=strict) if check_nodes else []
    warnings += [c for c in pre.report.checks if c.status == "warn"]  # e.g. a link net check measured degraded
    plan = _for_version(plan, pre.version)
    gate(plan, force=force)
    if not force:  # [speculative] the rules again, for the vLLM release the nodes run
        speculative.check(recipe, vllm_version=pre.version, default_version=rules.default_version())
    on_event("prepare", f"applying {len(recipe.patches)} patch(es)" if recipe.patches else "no patches")
    patches = apply_patches(recipe, runners)
    on_event("prepare", "creating run directories on every node")
    prepare_nodes(recipe, name, pre.paths, runners)
    record, pin_warnings = make_record(plan, name, pre, patches, ssh_config, runners)
    warnings += pin_warnings
    api_key = secret_values(pre.launch.head.secret_env).get(API_KEY_VAR)  # a missing key fails before any start
    record.timings["preflight_s"] = round(time.monotonic() - t0, 2)
    record.save()
    token, reached = _start_and_wait(record, runners, api_key, on_event)
    if recipe.patches and recipe.runtime.kind == "docker":  # forklift-patches: hashes from the containers' logs
        record.patches = container_patches(record, runners)
        record.pins.patches = [PatchPin(**p) for p in recipe_patches.pins(record.patches)]
    record.status = "ready"
    record.phases = reached
    record.timings["start_to_ready_s"] = reached["ready"]
    record.timings["total_s"] = round(time.monotonic() - t0, 2)
    record.save()
    return UpResult(record=record, ready_s=reached["ready"], first_token=token, phases=reached, warnings=warnings)
