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


class NodeFacts(BaseModel):
    """One node's measured facts. ``None`` means not measured."""

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


# --------------------------------------------------------------------------------------------- measuring a node

_GIB_KB = 1024 * 1024
_SMI = ["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"]


def _meminfo(text: str) -> dict[str, float]:
    """/proc/meminfo values in GiB (MemTotal, MemAvailable, ...)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) / _GIB_KB
    return out


def _gpus(text: str) -> tuple[list[str], list[int], list[int]]:
    names, totals, frees = [], [], []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        names.append(parts[0])
        totals.append(int(parts[1]) if parts[1].isdigit() else 0)
        frees.append(int(parts[2]) if parts[2].isdigit() else 0)
    return names, totals, frees


def measure(runner: Runner, host: str | None = None) -> NodeFacts:
    """What a node has now, through its runner (SshRunner for a remote node): memory (MemTotal, MemAvailable, which
    bounds vLLM's startup request on unified memory) and its GPUs (nvidia-smi; none on CPU nodes or when absent)."""
    from forklift.errors import HardwareError
    from forklift.hardware.detect import profile_for_gpu

    mem = runner.run(["cat", "/proc/meminfo"], timeout=30)
    if not mem.ok:
        raise HardwareError(f"{runner.host}: cannot read /proc/meminfo: {mem.stderr.strip()[-200:]}",
                            fix="Check the SSH target and that the node runs Linux.")
    info = _meminfo(mem.stdout)
    smi = runner.run(_SMI, timeout=30)
    names, totals, frees = _gpus(smi.stdout) if smi.ok else ([], [], [])
    profile = profile_for_gpu(names[0]) if names else None
    return NodeFacts(host=host or runner.host, source=f"forklift hw --node ({runner.host})",
                     mem_total_gib=round(info["MemTotal"], 2) if "MemTotal" in info else None,
                     mem_available_gib=round(info["MemAvailable"], 2) if "MemAvailable" in info else None,
                     gpu_name=names[0] if names else None, gpu_count=len(names) or None, gpu_total_mib=totals,
                     gpu_free_mib=frees, hardware=profile)
