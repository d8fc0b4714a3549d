"""Hardware and network profiles: the bundled ones (data files beside this module) and the user's own
(YAML files under ``$FORKLIFT_HOME/hardware/``, validated like the bundled ones)."""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forklift import paths
from forklift.errors import HardwareError, HardwareProfileError
from forklift.yamlio import load_data


class HardwareProfile(BaseModel):
    """One node's accelerator as vLLM sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    kind: Literal["cuda", "cpu"]
    gpus: int = Field(ge=1)
    memory_gib: float = Field(gt=0)
    unified: bool
    available_gib: float | None = Field(default=None, gt=0)
    bandwidth_gbs: float = Field(gt=0)
    tflops: dict[str, float]
    compute_capability: str = ""
    l2_cache_mib: float | None = None
    """The GPU's L2 cache as torch reads it (``get_device_properties().L2_cache_size``): Inductor's first-call
    autotuning allocates a flush buffer of this size (plan/terms.py compile_flush). None: not known."""
    amx: bool = False
    aliases: list[str] = Field(default_factory=list)
    gpu_names: list[str] = Field(default_factory=list)
    """Parts of an nvidia-smi GPU name that mean this profile; the longest part found in a name wins
    ("GH200" over "H200" over "H20")."""
    node_profile: str | None = None
    """The node preparation profile (``forklift node``) this hardware implies; None: the default one."""
    source: str = "bundled"

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
    data: dict[str, dict[str, Any]] = load_data(text)
    return data


@cache
def bundled() -> dict[str, HardwareProfile]:
    return {name: HardwareProfile(name=name, **entry) for name, entry in _load("profiles.yaml").items()}


def user_dir() -> Path:
    return paths.home() / "hardware"


def _user_file(path: Path) -> dict[str, HardwareProfile]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise HardwareProfileError(f"{path}: not readable YAML ({type(exc).__name__}: {str(exc)[:300]})",
                            fix="Fix or remove the file (UTF-8 text, a mapping of profile names).") from None
    if not isinstance(data, dict):
        raise HardwareProfileError(f"{path}: must map profile names to profiles",
                            fix="Write `NAME: {description: ..., kind: cuda, gpus: 1, memory_gib: ..., ...}`.")
    out: dict[str, HardwareProfile] = {}
    for name, entry in data.items():
        try:
            out[str(name).lower()] = HardwareProfile(name=str(name).lower(), source=str(path),
                                                     **(entry if isinstance(entry, dict) else {}))
        except (ValidationError, TypeError) as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) \
                if isinstance(exc, ValidationError) else str(exc)
            raise HardwareProfileError(f"{path}: profile '{name}' is invalid: {problems}",
                                fix="Give description, kind (cuda|cpu), gpus, memory_gib, unified, bandwidth_gbs, "
                                "tflops and compute_capability, as in `forklift hw --list --json`.") from None
    return out


def user_profiles() -> dict[str, HardwareProfile]:
    """The user's profiles (``$FORKLIFT_HOME/hardware/*.yaml``), read on every call; invalid files raise."""
    folder = user_dir()
    out: dict[str, HardwareProfile] = {}
    if folder.is_dir():
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            out.update(_user_file(path))
    return out


def profiles() -> dict[str, HardwareProfile]:
    """Every profile by name: bundled, then the user's (a user profile of the same name replaces the bundled)."""
    return {**bundled(), **user_profiles()}


@cache
def networks() -> dict[str, NetworkProfile]:
    return {name: NetworkProfile(name=name, **entry) for name, entry in _load("networks.yaml").items()}


def _unknown(kind: str, name: str, known: list[str]) -> HardwareError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    extra = f" or add your own under {user_dir()}/" if kind == "hardware" else ""
    return HardwareProfileError(f"unknown {kind} profile '{name}'.{hint}",
                         fix=f"Use one of: {', '.join(known)} (`forklift hw --list`){extra}.")


def get(name: str) -> HardwareProfile:
    """A hardware profile by name or alias (case-insensitive)."""
    table = profiles()
    key = name.lower()
    profile = table.get(key) or next((p for p in table.values() if key in (a.lower() for a in p.aliases)), None)
    if profile is None:
        raise _unknown("hardware", name, sorted(table))
    return profile


def is_unified(name: str | None) -> bool:
    """Whether a node of this hardware profile has unified memory; False for no profile or an unknown one."""
    if not name:
        return False
    try:
        return get(name).unified
    except HardwareError:
        return False


def for_gpu(gpu_name: str) -> HardwareProfile | None:
    """The profile of an nvidia-smi GPU name (its longest ``gpu_names`` part in the name), or None."""
    found = [(len(part), -i, prof) for i, prof in enumerate(profiles().values()) for part in prof.gpu_names
             if part in gpu_name]
    return max(found, key=lambda t: t[:2])[2] if found else None


def node_profile(hardware: str | None) -> str | None:
    """The node preparation profile a hardware profile (name or alias) implies, or None (unknown or none)."""
    if not hardware:
        return None
    try:
        return get(hardware).node_profile
    except HardwareError:
        return None


def network(name: str) -> NetworkProfile:
    table = networks()
    prof = table.get(name.lower())
    if prof is None:
        raise _unknown("network", name, sorted(table))
    return prof
