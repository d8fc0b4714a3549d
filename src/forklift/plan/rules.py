"""vLLM's sizing rules by version, and the planner's estimator constants (data: data/vllm.yaml)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict


class VersionRules(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    matched: str
    gpu_memory_utilization: float
    runner_dense: str
    runner_moe: str
    estimate_cudagraphs: bool
    v2_subtracts_cudagraphs: bool = False

    def runner(self, moe: bool) -> str:
        return self.runner_moe if moe else self.runner_dense

    def subtracts_cudagraphs(self, moe: bool) -> bool:
        if not self.estimate_cudagraphs:
            return False
        return self.runner(moe) == "v1" or self.v2_subtracts_cudagraphs


@cache
def data() -> dict[str, Any]:
    text = (resources.files("forklift.plan") / "data" / "vllm.yaml").read_text()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def default_version() -> str:
    return str(data()["default_version"])


def _key(version: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


@cache
def rules_for(version: str | None) -> VersionRules:
    """The rules of the newest listed release not above ``version`` (e.g. '0.26.0' -> '0.26')."""
    version = version or default_version()
    table: dict[str, dict[str, Any]] = data()["versions"]
    vkey = _key(version)
    eligible = [k for k in table if _key(k) <= vkey]
    best = max(eligible, key=_key) if eligible else min(table, key=_key)
    return VersionRules(version=version, matched=best, **table[best])


def estimate() -> dict[str, Any]:
    est: dict[str, Any] = data()["estimate"]
    return est


def batch_defaults(kind: str, memory_gib: float) -> tuple[int, int]:
    table = data()["batch_defaults"]
    if kind == "cpu":
        entry = table["cpu"]
    elif memory_gib >= table["large"]["min_memory_gib"]:
        entry = table["large"]
    else:
        entry = table["small"]
    return int(entry["max_num_batched_tokens"]), int(entry["max_num_seqs"])


def block_sizes() -> dict[str, int]:
    return {str(k): int(v) for k, v in data()["block_size"].items()}


@cache
def claims() -> dict[str, dict[str, Any]]:
    text = (resources.files("forklift.plan") / "data" / "claims.yaml").read_text()
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(text) or {}
    return loaded
