"""Calibration: read a vLLM startup log, keep the model-specific terms, use them in later plans.

Stored as JSON under ``$FORKLIFT_HOME/calibration/<key>.json``; the key names the model shape and the
settings that change the terms (tp, pp, max_num_batched_tokens, max_num_seqs, eager).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from forklift import paths
from forklift.errors import PlanError, PlanInputError
from forklift.model.spec import ModelSpec

if TYPE_CHECKING:
    from forklift.plan.startlog import LogFacts as LogFacts
    from forklift.plan.startlog import parse_log as parse_log


def __getattr__(name: str) -> Any:
    """``parse_log`` and ``LogFacts`` live in ``startlog`` (its regexes and record load only to calibrate)."""
    if name in ("LogFacts", "parse_log"):
        return getattr(importlib.import_module("forklift.plan.startlog"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Calibration(BaseModel):
    """Stored model-specific terms for one (model, settings) key."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    key: str
    source_log: str
    vllm_version: str | None
    activation_gib: float
    non_torch_gib: float
    cudagraph_gib: float
    cudagraph_subtracted: bool
    weights_gib: float | None = None
    per_stage_activation: dict[int, float] = {}


def fingerprint(spec: ModelSpec) -> str:
    shape = spec.model_dump(mode="json", exclude={"name"})
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]
    return f"{spec.architecture}-{digest}"


def key_for(spec: ModelSpec, *, tp: int, pp: int, mnbt: int, max_num_seqs: int, eager: bool) -> str:
    return f"{fingerprint(spec)}-tp{tp}-pp{pp}-mnbt{mnbt}-seqs{max_num_seqs}-{'eager' if eager else 'graphs'}"


def calibration_dir() -> Path:
    return paths.home() / "calibration"


def store(key: str, log_path: Path) -> Calibration:
    """Parse ``log_path`` and store its terms under ``key``."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError as exc:
        raise PlanInputError(f"cannot read {log_path}: {exc.strerror or exc}",
                             fix="Pass the path of a vLLM startup log.") from None
    from forklift.plan.startlog import parse_log

    facts = parse_log(text)
    if facts.activation_gib is None or facts.non_torch_gib is None:
        raise PlanError(
            f"{log_path}: no memory split found (looked for 'Actual usage is ... GiB for weight' and the DEBUG "
            "'torch peak memory increase' line)",
            fix="Use the full log of a vLLM GPU start that reached 'Available KV cache memory' "
            "(VLLM_LOGGING_LEVEL=DEBUG gives the split on older releases).",
        )
    subtracted = facts.cudagraph_estimate_gib is not None
    cal = Calibration(
        key=key, source_log=str(log_path), vllm_version=facts.vllm_version, activation_gib=facts.activation_gib,
        non_torch_gib=facts.non_torch_gib,
        cudagraph_gib=(facts.cudagraph_estimate_gib if subtracted else facts.cudagraph_actual_gib) or 0.0,
        cudagraph_subtracted=subtracted, weights_gib=facts.weights_gib,
        per_stage_activation=facts.per_stage_activation,
    )
    folder = calibration_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.json").write_text(json.dumps(cal.model_dump(mode="json"), indent=2))
    return cal


def lookup(key: str) -> Calibration | None:
    file = calibration_dir() / f"{key}.json"
    if not file.is_file():
        return None
    try:
        return Calibration.model_validate_json(file.read_text())
    except ValueError:
        return None
