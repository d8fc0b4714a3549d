"""Hardware and network profiles (data files beside this module)."""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from forklift.errors import HardwareError


class HardwareProfile(BaseModel):
    """One node's accelerator as vLLM sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    kind: Literal["cuda", "cpu"]
    gpus: int
    memory_gib: float
    unified: bool
    available_gib: float | None = None
    bandwidth_gbs: float
    tflops: dict[str, float]
    compute_capability: str = ""
    amx: bool = False

    def peak_tflops(self, fmt: str) -> float:
        return self.tflops.get(fmt, self.tflops.get("bf16", 1.0))


class NetworkProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    latency_us: float
    bandwidth_gbs: float
    link_gbit: float | None = None
    """Nominal link speed per interface in Gb/s (what sysfs/ethtool should report); `forklift net check`."""
    tcp_gbit: float | None = None
    """TCP throughput one healthy path reaches with iperf3 (8 streams) in Gb/s; `forklift net check`."""
    rdma_gbit: float | None = None
    """ib_write_bw average one healthy rail reaches (1 QP) in Gb/s; `forklift net check`."""


def _load(file: str) -> dict[str, dict[str, Any]]:
    text = (resources.files("forklift.hardware") / file).read_text()
    data: dict[str, dict[str, Any]] = yaml.safe_load(text)
    return data


@cache
def profiles() -> dict[str, HardwareProfile]:
    return {name: HardwareProfile(name=name, **entry) for name, entry in _load("profiles.yaml").items()}


@cache
def networks() -> dict[str, NetworkProfile]:
    return {name: NetworkProfile(name=name, **entry) for name, entry in _load("networks.yaml").items()}


def _unknown(kind: str, name: str, known: list[str]) -> HardwareError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return HardwareError(f"unknown {kind} profile '{name}'.{hint}",
                         fix=f"Use one of: {', '.join(known)} (`forklift hw --list`).")


def get(name: str) -> HardwareProfile:
    """A hardware profile by name (case-insensitive)."""
    table = profiles()
    profile = table.get(name.lower())
    if profile is None:
        raise _unknown("hardware", name, sorted(table))
    return profile


def network(name: str) -> NetworkProfile:
    table = networks()
    prof = table.get(name.lower())
    if prof is None:
        raise _unknown("network", name, sorted(table))
    return prof
