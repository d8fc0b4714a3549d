"""The run record: the one artifact that ties ``up`` to every later command.

Stored as ``$FORKLIFT_HOME/runs/<name>/record.json``; rank logs sit beside it.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from forklift import paths
from forklift.errors import RunError, RunNotFoundError
from forklift.launch.model import Launch

Status = Literal["starting", "ready", "failed", "stopped"]
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class RankState(BaseModel):
    rank: int
    host: str
    pid: int | None = None
    pgid: int | None = None
    container: str | None = None
    log_path: str
    ssh: str | None = None
    node_index: int | None = None
    role: str = "engine"


class RunRecord(BaseModel):
    name: str
    run_id: str
    status: Status = "starting"
    created_at: float = Field(default_factory=time.time)
    recipe: dict[str, Any]
    launch: Launch
    ranks: list[RankState] = Field(default_factory=list)
    endpoint: str
    served_name: str
    vllm_version: str | None = None
    plan: dict[str, Any] | None = None
    patches: list[dict[str, Any]] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    phases: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    api_key_env: str | None = None
    ssh_config: str | None = None
    gpu_baseline_mib: dict[str, list[int]] = Field(default_factory=dict)

    def path(self) -> Path:
        return run_dir(self.name) / "record.json"

    def save(self) -> Path:
        target = self.path()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        os.replace(tmp, target)
        return target


def validate_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise RunError(
            f"invalid run name {name!r}",
            fix="Use letters, digits, '.', '_' or '-', starting with a letter or digit (max 63 chars).",
        )
    return name


def run_dir(name: str) -> Path:
    return paths.runs_dir() / validate_name(name)


def load(name: str) -> RunRecord:
    path = run_dir(name) / "record.json"
    if not path.is_file():
        known = list_names()
        raise RunNotFoundError(
            f"no run named '{name}'",
            fix=("Known runs: " + ", ".join(known)) if known else "Start one with `forklift up`.",
        )
    try:
        return RunRecord.model_validate_json(path.read_text())
    except (ValueError, json.JSONDecodeError) as exc:
        raise RunError(f"run record {path} is unreadable: {exc}", fix=f"Remove {path.parent} by hand.") from exc


def list_names() -> list[str]:
    root = paths.runs_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "record.json").is_file())


def list_records() -> list[RunRecord]:
    out = []
    for name in list_names():
        try:
            out.append(load(name))
        except RunError:
            continue
    return out


def resolve_name(name: str | None) -> str:
    """The run a command without a name means: the only one, or 'default'."""
    if name:
        return name
    names = list_names()
    if len(names) == 1:
        return names[0]
    if "default" in names or not names:
        return "default"
    raise RunError(
        f"several runs exist ({', '.join(names)}); say which",
        fix="Pass the run name, for example `forklift status " + names[0] + "`.",
    )


def save_status(record: RunRecord, status: Status) -> None:
    record.status = status
    record.save()
