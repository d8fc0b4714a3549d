"""The doctor's data shapes: rules (loaded from YAML) and findings (what the matcher returns)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Category = Literal[
    "kv_cache_insufficient",
    "startup_free_memory_check",
    "oom_host_unified_memory",
    "oom_weights_load",
    "page_cache_pressure",
    "ray_actor_or_session",
    "ray_health_timeout",
    "nccl_hang_or_timeout",
    "nccl_network_config",
    "distributed_init_timeout",
    "weight_loader_signature_drift",
    "patch_drift",
    "unsupported_quantization_or_arch",
    "triton_shared_memory",
    "cuda_graph_capture_failure",
    "tokenizer_or_chat_template",
    "tool_parser_or_reasoning_parser",
    "speculative_decoding_incompatible",
    "port_in_use_or_bind",
    "model_path_missing_on_worker",
    "version_mismatch",
    "reasoning_budget",
    "engine_install",
]
Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Strict):
    """Regular expressions over log lines (Python ``re`` syntax, searched, not anchored).

    ``all``: each must match some line (in this order when ``ordered``); ``any``: at least one must
    match; ``none``: the rule does not apply when one matches anywhere. Named groups become facts.
    """

    all: list[str] = Field(default_factory=list)
    any: list[str] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)
    ordered: bool = False

    @field_validator("all", "any", "none")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"bad regular expression {p!r}: {exc}") from exc
            if p.startswith("(?") and re.match(r"\(\?[aiLmsux]+\)", p):
                raise ValueError(f"{p!r}: use a scoped flag group like (?i:...) instead of a global flag")
        return patterns

    @model_validator(mode="after")
    def _not_empty(self) -> Match:
        if not self.all and not self.any:
            raise ValueError("a rule needs at least one pattern under 'all' or 'any'")
        return self


class Rule(_Strict):
    """One piece of knowledge: a signature in the logs, its cause and the fix."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    category: Category
    severity: Severity = "error"
    confidence: float = Field(ge=0.0, le=1.0, description="How sure a match is of the cause.")
    match: Match
    cause: str
    fix: str
    references: list[str] = Field(min_length=1)
    versions: str | None = Field(default=None, description="vLLM versions it applies to, e.g. '>=0.6,<0.30'.")
    supersedes: list[str] = Field(default_factory=list, description="Rules this one explains better.")
    advice: Literal["kv_cache"] | None = None

    @field_validator("versions")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        if value is not None:
            for part in value.split(","):
                if not re.fullmatch(r"\s*(>=|<=|==|<|>)\s*\d+(\.\d+)*\s*", part):
                    raise ValueError(f"version clause {part!r} is not like '>=0.6' or '<0.30'")
        return value


@dataclass(frozen=True)
class Finding:
    """A rule that matched: what it means, what to do, and the lines that show it."""

    rule: str
    title: str
    category: str
    severity: str
    confidence: float
    cause: str
    fix: str
    lines: list[str]
    references: list[str]
    facts: dict[str, str] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)
    superseded_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "category": self.category,
            "severity": self.severity,
            "confidence": round(self.confidence, 3),
            "cause": self.cause,
            "fix": self.fix,
            "lines": list(self.lines),
            "references": list(self.references),
            "facts": dict(self.facts),
            "advice": list(self.advice),
            "superseded_by": self.superseded_by,
        }


@dataclass(frozen=True)
class Report:
    """Everything one diagnosis produced: ranked findings plus what to show when none matched."""

    findings: list[Finding]
    lines_read: int
    error_tail: list[str]

    @property
    def has_error(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "lines_read": self.lines_read,
            "error_tail": list(self.error_tail),
        }
