"""vLLM's sizing rules by release, and the planner's measured constants (data: data/vllm.yaml).

A release takes every entry of ``versions`` not above it, later entries overriding earlier ones key by key
(nested dicts merged), so the data lists only what changed and where.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from forklift.errors import PlanError
from forklift.yamlio import shipped


class VersionRules(BaseModel):
    """The rules of one vLLM release (``matched``: the newest data entry not above it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    matched: str
    gpu_memory_utilization: float
    kv_cache_memory_bytes: bool
    uma_free_memory: str
    accounting: str
    cudagraph_estimator: dict[str, bool]
    cudagraph_estimate_default: bool
    runner: dict[str, Any]
    kv_fit_check: str
    tokens_formula: str
    hybrid_prefix_caching_default: bool
    mamba_all_mode: bool
    mla_hybrid_block_128: bool
    align_prefill_checkpoint: bool
    check_subtracts_null_block: bool
    glm_dsa_sm100_auto_fp8: bool
    mamba_full_graph_blocks: str
    sampler_bytes_per_logit: dict[str, float]
    capture: dict[str, Any]
    batch_tiers: str

    def runner_for(self, architecture: str, *, moe: bool, hybrid: bool, quantized: bool) -> str:
        """Which model runner serves the model: "v1" or "v2" (config/vllm.py use_v2_model_runner)."""
        r = self.runner
        if r["kind"] == "v1":
            return "v1"
        if r["kind"] == "v2":
            return "v2"
        listed = architecture in r.get("archs", [])
        if r.get("not_hybrid") and hybrid:
            return "v1"
        if r.get("list_only"):
            ok = listed and not (r.get("dense_only") and moe) and not (r.get("unquantized_only") and quantized)
            return "v2" if ok else "v1"
        return "v2" if listed or not moe else "v1"

    def subtracts_cudagraphs(self, runner: str) -> bool:
        """Whether the CUDA-graph estimate comes off the KV budget (estimator present and enabled by default)."""
        return self.cudagraph_estimate_default and bool(self.cudagraph_estimator.get(runner))


@cache
def data() -> dict[str, Any]:
    loaded: dict[str, Any] = shipped("forklift.plan", "vllm.yaml")
    return loaded


def default_version() -> str:
    return str(data()["default_version"])


def version_key(version: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    while len(out) < 3:
        out.append(0)
    return tuple(out)


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            and key != "runner" else value
    return out


_RELEASE = re.compile(r"\d+\.\d+(\.\d+)?([.+-][0-9A-Za-z.+-]*)?")


def check_release(version: str) -> str:
    """A release a user names (``--vllm-version``): a version string, not older than the planner's first rules."""
    oldest = min(data()["versions"], key=version_key)
    if not _RELEASE.fullmatch(version) or version_key(version) < version_key(oldest):
        raise ValueError(("not a release such as 0.32.0" if not _RELEASE.fullmatch(version) else
                          f"older than any release the planner has rules for ({oldest})")
                         + f"; pass the release the nodes run (`vllm --version` there), e.g. {default_version()}")
    return version


@cache
def rules_for(version: str | None) -> VersionRules:
    """The rules of ``version`` (default: data's default_version): every entry not above it, merged in order."""
    version = version or default_version()
    table: dict[str, dict[str, Any]] = data()["versions"]
    keys = sorted(table, key=version_key)
    if not _RELEASE.fullmatch(version):
        raise PlanError(f"vLLM version {version!r}: not a release such as 0.32.0",
                        fix=f"Pass the release the nodes run (`vllm --version` there), e.g. {default_version()}.")
    vkey = version_key(version)
    eligible = [k for k in keys if version_key(k) <= vkey] or keys[:1]
    merged: dict[str, Any] = {}
    for k in eligible:
        merged = _merge(merged, table[k])
    return VersionRules(version=version, matched=eligible[-1], **merged)


def measured() -> dict[str, Any]:
    out: dict[str, Any] = data()["measured"]
    return out


def estimate() -> dict[str, Any]:
    est: dict[str, Any] = data()["estimate"]
    return est


def batch_defaults(release: VersionRules, kind: str, memory_gib: float, name: str, capability: str,
                   workers: int = 1) -> tuple[int, int]:
    """vLLM's default (max_num_batched_tokens, max_num_seqs) for ``vllm serve`` on this hardware."""
    tiers = data()["batch_tiers"]
    if kind == "cpu":
        cpu = tiers["cpu"]
        return int(cpu["mnbt_per_worker"]) * workers, int(cpu["seqs_per_worker"]) * workers
    for tier in tiers[release.batch_tiers]:
        if memory_gib < float(tier.get("min_memory_gib", 0)):
            continue
        if tier.get("not_name") and tier["not_name"] in name.lower():
            continue
        if tier.get("not_capability") and tier["not_capability"] == capability:
            continue
        return int(tier["mnbt"]), int(tier["seqs"])
    raise AssertionError("the last batch tier has no condition")


def block_sizes() -> dict[str, Any]:
    out: dict[str, Any] = data()["block_size"]
    return out


@cache
def claims() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = shipped("forklift.plan", "claims.yaml") or {}
    return loaded
