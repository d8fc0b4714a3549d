"""Run records on disk: ``$FORKLIFT_HOME/runs/<name>/record.json`` (rank logs sit beside it), and where the
run's saved bench results are (``runs/<name>/bench/STAMP/results.json``: canary and monitor read them)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from forklift import paths
from forklift.errors import RecordNewerError, RunError, RunNotFoundError, UnreadableRecordError
from forklift.record.run_record import SCHEMA_VERSION, RunRecord, Status, migrate, run_dir, validate_name


def load(name: str) -> RunRecord:
    path = run_dir(name) / "record.json"
    if not path.is_file():
        known = list_names()
        raise RunNotFoundError(
            f"no run named '{name}'",
            fix=("Known runs: " + ", ".join(known)) if known else "Start one with `forklift up`.",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _unreadable(name, path, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _unreadable(name, path, f"a JSON {type(data).__name__}, not an object")
    version = data.get("schema_version", 1)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise RecordNewerError(
            f"run record {path} was written by a newer forklift (schema {version}; this one reads up to "
            f"{SCHEMA_VERSION})",
            fix="Use the forklift that started the run (or upgrade this one): `pip install -U forklift`.",
        )
    try:
        return RunRecord.model_validate(migrate(data))
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        first = str(exc).splitlines()
        raise _unreadable(name, path, " ".join(first[:3])) from None


def _unreadable(name: str, path: Path, why: str) -> UnreadableRecordError:
    left = salvage(name)
    running = f"; it may still run {left.describe()}" if left.ranks else ""
    return UnreadableRecordError(
        f"run record {path} is unreadable: {why}{running}",
        fix=f"`forklift down {name}` stops what the record still names (process groups, port) and sets the "
        f"record aside; then `forklift up` can use the name again.",
    )


@dataclass
class SalvagedRank:
    host: str
    ssh: str | None
    pgid: int


@dataclass
class Salvaged:
    """What an unreadable record still says about processes that may be running."""

    name: str
    ranks: list[SalvagedRank] = field(default_factory=list)
    port: int | None = None
    endpoint: str | None = None

    def describe(self) -> str:
        groups = ", ".join(f"pgid {r.pgid} on {r.host}" for r in self.ranks)
        return groups + (f", port {self.port}" if self.port else "")


_PGID_RE = re.compile(r'"pgid":\s*(\d+)')
_HOST_RE = re.compile(r'"host":\s*"([^"]+)"')
_SSH_RE = re.compile(r'"ssh":\s*"([^"]+)"')
_ENDPOINT_RE = re.compile(r'"endpoint":\s*"(https?://[^"]+?:(\d+))"')


def salvage(name: str) -> Salvaged:
    """The rank process groups, hosts and port an unreadable record still holds (pattern-matched from its text:
    it may be truncated, not JSON, or of another shape)."""
    out = Salvaged(name)
    try:
        text = (run_dir(name) / "record.json").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for m in _PGID_RE.finditer(text):  # the rank object around each pgid, closed or cut off
        start = text.rfind("{", 0, m.start()) + 1
        end = text.find("}", m.end())
        body = text[start:end if end >= 0 else len(text)]
        host, ssh = _HOST_RE.search(body), _SSH_RE.search(body)
        if host:
            out.ranks.append(SalvagedRank(host.group(1), ssh.group(1) if ssh else None, int(m.group(1))))
    endpoint = _ENDPOINT_RE.search(text)
    if endpoint:
        out.endpoint, out.port = endpoint.group(1), int(endpoint.group(2))
    return out


def set_aside(name: str) -> Path:
    """Move an unreadable record out of the way (kept beside, as record.json.unreadable) so the name is free."""
    path = run_dir(name) / "record.json"
    target = path.with_name("record.json.unreadable")
    path.replace(target)
    return target


def list_names() -> list[str]:
    root = paths.runs_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "record.json").is_file())


def list_records() -> list[RunRecord]:
    """Every readable record (``list_unreadable`` has the rest)."""
    out = []
    for name in list_names():
        try:
            out.append(load(name))
        except RunError:
            continue
    return out


def list_unreadable() -> list[tuple[str, RunError]]:
    """(name, why) for every record that cannot be read."""
    out = []
    for name in list_names():
        try:
            load(name)
        except RunError as exc:
            out.append((name, exc))
    return out


def resolve_name(name: str | None) -> str:
    """The run a command without a name means: the only one, or 'default'. A name given is checked (it becomes a
    path, a unit name, a credentials file name)."""
    if name:
        return validate_name(name)
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


__all__ = ["RunRecord", "Salvaged", "SalvagedRank", "benches_dir", "latest_bench", "list_names", "list_records",
           "list_unreadable", "load", "resolve_name", "run_dir", "salvage", "save_status", "set_aside", "validate_name"]


def benches_dir(name: str) -> Path:
    return run_dir(name) / "bench"


def latest_bench(name: str) -> Path | None:
    """The newest ``results.json`` `forklift bench NAME` saved, or None."""
    folder = benches_dir(name)
    paths_ = list(folder.glob("*/results.json")) if folder.is_dir() else []
    return max(paths_, key=lambda p: (p.stat().st_mtime, p.name)) if paths_ else None
