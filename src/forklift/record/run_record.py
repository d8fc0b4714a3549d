"""The run record: the one artifact that ties ``up`` to every later command, typed and versioned.

Schema 2 keeps the plan (which carries the resolved Deployment) or the reason there is none, the Launch that
``up`` ran, the pins (what exactly ran), per-rank processes, timings and status. Records written by earlier
forklift versions are migrated when read (``migrate``); nothing re-derives what ``up`` decided.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from forklift import paths
from forklift.errors import RunNameError, StateDirError
from forklift.launch.launch_spec import Launch
from forklift.plan.result import Plan, Unplanned
from forklift.recipe.deployment import Deployment
from forklift.recipe.schema import Recipe

SCHEMA_VERSION = 2
Status = Literal["starting", "ready", "failed", "stopped"]
Planned = Annotated[Plan | Unplanned, Field(discriminator="kind")]


class RankState(BaseModel):
    """One process ``up`` started: where it runs and how to reach and stop it."""

    rank: int
    host: str
    pid: int | None = None
    pgid: int | None = None
    container: str | None = None
    log_path: str
    ssh: str | None = None
    node_index: int | None = None
    role: str = "engine"
    started: str | None = None
    """The process's start time (field 22 of /proc/PID/stat) when it was spawned: a pid that now names a process
    started at another time was reused, and nothing of this rank is left to signal."""

    @property
    def node(self) -> int:
        return self.node_index if self.node_index is not None else self.rank


class PatchPin(BaseModel):
    """A patch applied on a node, with the hashes of the files it left."""

    id: str
    host: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    """Patched file (relative to site-packages) -> sha256 after patching."""


class Pins(BaseModel):
    """What exactly ran, so a later run can be compared with (or restored to) this one."""

    forklift_version: str | None = None
    vllm_version: str | None = None
    """As the head reported it (``0.32.0+cpu``, ``0.26.0``)."""
    vllm_versions: dict[str, str] = Field(default_factory=dict)
    """Per node host."""
    vllm_build: str | None = None
    """The head's build: distribution, version, commit and install source where known."""
    vllm_builds: dict[str, str] = Field(default_factory=dict)
    """Per node host."""
    image: str | None = None
    image_digest: str | None = None
    image_digests: dict[str, str] = Field(default_factory=dict)
    """Per node host (docker runtime)."""
    model_revision: str | None = None
    """Hub commit when known, else ``sha256:...`` of config.json + the safetensors index."""
    recipe_hash: str | None = None
    patches: list[PatchPin] = Field(default_factory=list)
    host_stacks: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Per node host: kernel, driver, cuda, nccl, nic_firmware, os (as preflight read them; a fact the node could
    not read is absent)."""


class RunRecord(BaseModel):
    """``$FORKLIFT_HOME/runs/<name>/record.json``."""

    schema_version: int = SCHEMA_VERSION
    name: str
    run_id: str
    status: Status = "starting"
    created_at: float = Field(default_factory=time.time)
    plan: Planned
    launch: Launch
    ranks: list[RankState] = Field(default_factory=list)
    endpoint: str
    served_name: str
    pins: Pins = Field(default_factory=Pins)
    patches: list[dict[str, Any]] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    phases: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    ssh_config: str | None = None
    gpu_baseline_mib: dict[str, list[int]] = Field(default_factory=dict)
    gpu_indices: dict[str, list[int]] = Field(default_factory=dict)
    """Per host, the GPUs the run's ranks see (CUDA_VISIBLE_DEVICES); a host absent here uses all of them."""

    def path(self) -> Path:
        return run_dir(self.name) / "record.json"

    def save(self) -> Path:
        """Write the record atomically; returns its path."""
        target = self.path()
        tmp = target.with_suffix(f".json.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(self.model_dump_json(indent=2))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StateDirError(f"cannot write the run record {target}: {exc.strerror or exc}",
                                fix="Set FORKLIFT_HOME to a folder you can write, or free space / fix the "
                                f"permissions of {target.parent}.") from None
        return target

    @property
    def deployment(self) -> Deployment:
        return self.plan.deployment

    @property
    def recipe(self) -> Recipe:
        return self.plan.deployment.recipe

    @property
    def vllm_version(self) -> str | None:
        return self.pins.vllm_version

    @property
    def api_key_env(self) -> str | None:
        return self.recipe.serve.api_key_env

    @property
    def planned(self) -> Plan | None:
        """The plan when there is one (None for an Unplanned start)."""
        return self.plan if isinstance(self.plan, Plan) else None


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def validate_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise RunNameError(
            f"invalid run name {name!r}",
            fix="Use letters, digits, '.', '_' or '-', starting with a letter or digit (max 63 chars).",
        )
    return name


def run_dir(name: str) -> Path:
    return paths.runs_dir() / validate_name(name)


_V1_PLAN_EXTRAS = ("decode_tok_s_single", "decode_tok_s_aggregate", "prefill_tok_s")


def _v1_plan(data: dict[str, Any], deployment: Deployment) -> dict[str, Any]:
    par = deployment.recipe.parallel
    decisions = {"pp_layer_partition": par.pp_layer_partition}
    old = data.get("plan")
    if isinstance(old, dict) and "ranks" in old:
        body = {k: v for k, v in old.items() if k not in _V1_PLAN_EXTRAS}
        candidate = {**body, "kind": "plan", "deployment": deployment, "decisions": decisions}
        try:
            return Plan.model_validate(candidate).model_dump(mode="json")
        except ValueError:
            pass
    error = old.get("error") if isinstance(old, dict) else None
    return {"kind": "unplanned", "deployment": deployment.model_dump(mode="json"), "decisions": decisions,
            "error": error or "no plan in a record written before schema 2", "error_type": "MigratedRecord"}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON in any known schema -> schema 2 (what ``RunRecord.model_validate`` reads)."""
    version = int(data.get("schema_version", 1))
    if version >= SCHEMA_VERSION:
        return data
    out = dict(data)
    recipe = Recipe.model_validate(out.pop("recipe"))
    deployment = Deployment(recipe=recipe, origin=f"run record {data.get('name')} (schema 1)")
    out["plan"] = _v1_plan(out, deployment)
    out["pins"] = {"vllm_version": out.pop("vllm_version", None)}
    out.pop("api_key_env", None)
    out["schema_version"] = SCHEMA_VERSION
    return out
