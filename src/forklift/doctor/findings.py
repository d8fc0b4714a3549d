"""The doctor's data shapes: rules (loaded from YAML), findings and the report a diagnosis returns."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Category = str
"""A doctor category: a key of categories.yaml, the one list of them (Rule validates against it)."""
Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"error": 0, "warning": 1, "info": 2}
Layer = Literal["rule", "model", "context"]
Phase = Literal["starting", "loading weights", "compiling", "sizing KV cache", "serving"]


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
    """One exact signature: the lines that show it, its cause, the fix and the recipe key to change."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    category: Category
    severity: Severity = "error"
    confidence: float = Field(ge=0.0, le=1.0, description="How sure a match is of the cause (a probability).")
    match: Match
    cause: str
    fix: str
    key: str | None = Field(default=None, description="The recipe key the fix changes, e.g. serve.max_model_len.")
    patch: str | None = Field(default=None, description="A patch id from the catalog that fixes it.")
    references: list[str] = Field(min_length=1)
    examples: list[str] = Field(default_factory=list,
                                description="Verbatim lines (from the corpus or the software's source) it matches.")
    versions: str | None = Field(default=None, description="vLLM versions it applies to, e.g. '>=0.6,<0.30'.")
    supersedes: list[str] = Field(default_factory=list, description="Rules this one explains better.")
    generic: bool = Field(default=False, description=(
        "A wrapper or symptom line: any specific rule that matches explains it better."))
    rules_out: list[str] = Field(default_factory=list, description=(
        "Categories this rule's evidence rules out (the boundary each class writes in categories.yaml): while it "
        "matches, the statistical layer's probability for them is scaled down unless a rule of theirs matches too."))
    advice: Literal["kv_cache"] | None = None

    @field_validator("category")
    @classmethod
    def _known_category(cls, value: str) -> str:
        from forklift.doctor.kb import load_categories  # categories.yaml is the list; rules are checked against it

        known = load_categories()
        if value not in known:
            from difflib import get_close_matches

            near = get_close_matches(value, list(known), n=1)
            raise ValueError(f"unknown category {value!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                             + " (categories.yaml lists them)")
        return value

    @field_validator("rules_out")
    @classmethod
    def _known_categories(cls, value: list[str]) -> list[str]:
        from forklift.doctor.kb import load_categories

        unknown = [c for c in value if c not in load_categories()]
        if unknown:
            raise ValueError(f"rules_out names unknown categories {unknown} (categories.yaml lists them)")
        return value

    @field_validator("versions")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        if value is not None:
            for part in value.split(","):
                if not re.fullmatch(r"\s*(>=|<=|==|<|>)\s*\d+(\.\d+)*\s*", part):
                    raise ValueError(f"version clause {part!r} is not like '>=0.6' or '<0.30'")
        return value


class CategoryInfo(_Strict):
    """What doctor says for a category when no exact rule names the cause (the classifier's findings)."""

    title: str
    cause: str
    fix: str
    verify: str
    key: str | None = None
    boundary: str | None = None  # how the class is told from its neighbours (the labelling rule of the corpus)


@dataclass(frozen=True)
class Line:
    """A log line that was read: its 1-based number in its source, the source's label, the text."""

    number: int
    text: str
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.number}" if self.source else str(self.number)
        return f"{where}: {self.text}"


@dataclass(frozen=True)
class Finding:
    """A cause with its probability, the fix, and the lines that show it."""

    rule: str
    title: str
    category: str
    severity: str
    confidence: float
    """The probability that this is the cause (calibrated; see ``forklift.doctor.diagnosis``)."""
    cause: str
    fix: str
    lines: list[str]
    references: list[str]
    facts: dict[str, str] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)
    superseded_by: str | None = None
    layer: Layer = "rule"
    key: str | None = None
    patch: str | None = None
    host: str | None = None
    evidence: list[Line] = field(default_factory=list)

    @property
    def probability(self) -> float:
        return self.confidence

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "category": self.category,
            "severity": self.severity,
            "confidence": round(self.confidence, 3),
            "layer": self.layer,
            "cause": self.cause,
            "fix": self.fix,
            "key": self.key,
            "patch": self.patch,
            "host": self.host,
            "lines": list(self.lines),
            "evidence": [{"source": e.source, "line": e.number, "text": e.text} for e in self.evidence],
            "references": list(self.references),
            "facts": dict(self.facts),
            "advice": list(self.advice),
            "superseded_by": self.superseded_by,
        }


@dataclass(frozen=True)
class Report:
    """Everything one diagnosis produced.

    ``findings``: ranked, most likely first. ``unsure``: the top finding's probability is below the
    threshold, so ``findings`` are candidates to verify, not a diagnosis. ``error_tail``: the last
    error-looking lines (shown when nothing was found).
    """

    findings: list[Finding]
    lines_read: int
    error_tail: list[str]
    unsure: bool = False
    threshold: float = 0.5
    bytes_read: int = 0
    phase: str | None = None
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def has_error(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_json(self) -> dict[str, Any]:
        return {
            "unsure": self.unsure,
            "threshold": self.threshold,
            "findings": [f.to_json() for f in self.findings],
            "lines_read": self.lines_read,
            "bytes_read": self.bytes_read,
            "phase": self.phase,
            "context": dict(self.context),
            "error_tail": list(self.error_tail),
        }
