"""What forklift measured on a node (``forklift hw --node HOST``), kept under ``$FORKLIFT_HOME/facts/``.

The planner prefers a measured figure to a profile's nominal one: on unified-memory hosts (GB10) the memory
free at launch, not the nominal total, bounds what vLLM may request.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forklift import paths

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class NodeFacts(BaseModel):
    """One node's measured facts. ``None`` means not measured."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str
    measured_at: float = Field(default_factory=time.time)
    source: str = "forklift hw"
    mem_total_gib: float | None = None
    mem_available_gib: float | None = None
    """MemAvailable when measured: on unified memory this bounds vLLM's startup request."""
    gpu_name: str | None = None
    gpu_count: int | None = None
    gpu_total_mib: list[int] = Field(default_factory=list)
    gpu_free_mib: list[int] = Field(default_factory=list)
    hardware: str | None = None
    """The hardware profile the node matched, when one did."""

    @property
    def age_s(self) -> float:
        return max(0.0, time.time() - self.measured_at)


def facts_dir() -> Path:
    return paths.home() / "facts"


def _file(host: str) -> Path:
    return facts_dir() / f"{_SAFE.sub('_', host)}.json"


def load(host: str) -> NodeFacts | None:
    """The last facts measured on ``host``, or None (missing or unreadable files are simply unknown)."""
    path = _file(host)
    try:
        return NodeFacts.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None


def save(facts: NodeFacts) -> Path:
    path = _file(facts.host)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(facts.model_dump(mode="json"), indent=2))
    os.replace(tmp, path)
    return path
