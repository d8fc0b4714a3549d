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
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forklift import paths

if TYPE_CHECKING:
    from forklift.runner.base import Runner

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class MeasuredNode(BaseModel):
    """One node's measured facts as the planner reads them (a summary of ``host.HostFacts``, saved per host).
    ``None`` means not measured."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

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


def load(host: str) -> MeasuredNode | None:
    """The last facts measured on ``host``, or None (missing or unreadable files are simply unknown)."""
    path = _file(host)
    try:
        return MeasuredNode.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None


def save(facts: MeasuredNode) -> Path:
    path = _file(facts.host)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(facts.model_dump(mode="json"), indent=2))
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------- measuring a node

_GIB = 1 << 30
_MIB = 1 << 20


def _gib(value: int | None) -> float | None:
    return None if value is None else round(value / _GIB, 2)


def measure(runner: Runner, host: str | None = None) -> MeasuredNode:
    """What a node has now, through its runner (SshRunner for a remote node): memory (MemTotal, MemAvailable, which
    bounds vLLM's startup request on unified memory) and its GPUs (nvidia-smi; none on CPU nodes or when absent)."""
    from forklift.errors import HardwareError
    from forklift.hardware.detect import profile_for_gpu
    from forklift.host.facts import probe

    found = probe(runner, ("memory", "gpus"))
    if found.memory is None:
        raise HardwareError(f"{runner.host}: cannot read /proc/meminfo: {found.unread.get('memory', '')}",
                            fix="Check the SSH target and that the node runs Linux.")
    gpus = found.gpus or ()
    names = [g.name for g in gpus]
    return MeasuredNode(host=host or runner.host, source=f"forklift hw --node ({runner.host})",
                        mem_total_gib=_gib(found.mem_total), mem_available_gib=_gib(found.mem_available),
                        gpu_name=names[0] if names else None, gpu_count=len(names) or None,
                        gpu_total_mib=[(g.total_bytes or 0) // _MIB for g in gpus],
                        gpu_free_mib=[(g.free_bytes or 0) // _MIB for g in gpus],
                        hardware=profile_for_gpu(names[0]) if names else None)
