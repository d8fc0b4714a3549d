"""What this machine has: CPU, memory, GPUs (through nvidia-smi when present), and the matching profile."""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from forklift.hardware.profiles import HardwareProfile, for_gpu, profiles

if TYPE_CHECKING:
    from forklift.host.facts import HostFacts

_GIB = 2**30
def profile_for_gpu(name: str) -> str | None:
    """The profile of an nvidia-smi GPU name (each profile's ``gpu_names`` in profiles.yaml), or None."""
    found = for_gpu(name)
    return found.name if found else None


class Gpu(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    index: int
    name: str
    memory_gib: float
    profile: str | None


class LocalHardware(BaseModel):
    """The local machine, measured now."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    hostname: str
    cpu_model: str
    cores: int
    amx: bool
    memory_total_gib: float
    memory_available_gib: float
    gpus: list[Gpu]
    profile: str

    def as_profile(self) -> HardwareProfile:
        """The matching profile with this machine's measured memory (for planning on this host)."""
        base = profiles()[self.profile]
        if base.kind == "cpu":
            return base.model_copy(update={"memory_gib": round(self.memory_total_gib, 2),
                                           "available_gib": round(self.memory_available_gib, 2), "amx": self.amx})
        if base.unified:
            return base.model_copy(update={"available_gib": round(self.memory_available_gib, 2)})
        return base


def _cpuinfo() -> tuple[str, bool]:
    model, amx = platform.processor() or platform.machine(), False
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model, amx
    for line in text.splitlines():
        if line.startswith("model name") and ":" in line:
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and "amx_tile" in line.split():
            amx = True
    return model, amx


@cache
def local_amx() -> bool:
    """Whether this CPU has AMX tiles (vLLM-CPU picks its MLA kernel, and so the block size, by this)."""
    return _cpuinfo()[1]


def _gpus(found: HostFacts) -> list[Gpu]:
    return [Gpu(index=g.index, name=g.name, memory_gib=round((g.total_bytes or 0) / _GIB, 2),
                profile=profile_for_gpu(g.name)) for g in found.gpus or ()]


def detect() -> LocalHardware:
    """Measure the local machine through the host probe (a fraction of a second; nvidia-smi only when installed)."""
    model, amx = _cpuinfo()
    import psutil  # only here: ~10 ms of every command's start otherwise

    from forklift.host.facts import probe
    from forklift.runner import LocalRunner

    found = probe(LocalRunner(), ("memory", "gpus"))
    gpus = _gpus(found)
    profile = next((g.profile for g in gpus if g.profile), None) or "cpu"
    return LocalHardware(
        hostname=platform.node(), cpu_model=model, cores=psutil.cpu_count(logical=True) or 1, amx=amx,
        memory_total_gib=round((found.mem_total or 0) / _GIB, 2),
        memory_available_gib=round((found.mem_available or 0) / _GIB, 2),
        gpus=gpus, profile=profile,
    )
