"""Run records on disk: ``$FORKLIFT_HOME/runs/<name>/record.json`` (rank logs sit beside it), and where the
run's saved bench results are (``runs/<name>/bench/STAMP/results.json``: canary and monitor read them)."""

from __future__ import annotations

import json
from pathlib import Path

from forklift import paths
from forklift.errors import RunError, RunNotFoundError
from forklift.record.model import RunRecord, Status, migrate, run_dir, validate_name


def load(name: str) -> RunRecord:
    path = run_dir(name) / "record.json"
    if not path.is_file():
        known = list_names()
        raise RunNotFoundError(
            f"no run named '{name}'",
            fix=("Known runs: " + ", ".join(known)) if known else "Start one with `forklift up`.",
        )
    try:
        return RunRecord.model_validate(migrate(json.loads(path.read_text())))
    except (ValueError, json.JSONDecodeError, KeyError, TypeError) as exc:
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


__all__ = ["RunRecord", "list_names", "list_records", "load", "resolve_name", "run_dir", "save_status",
           "validate_name"]


def benches_dir(name: str) -> Path:
    return run_dir(name) / "bench"


def latest_bench(name: str) -> Path | None:
    """The newest ``results.json`` `forklift bench NAME` saved, or None."""
    folder = benches_dir(name)
    paths_ = list(folder.glob("*/results.json")) if folder.is_dir() else []
    return max(paths_, key=lambda p: (p.stat().st_mtime, p.name)) if paths_ else None
