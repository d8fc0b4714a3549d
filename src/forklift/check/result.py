"""What a check returns: a verdict, a one-line summary, the fix, and the evidence behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "warn", "fail", "skip"]
CheckId = Literal["endpoint", "completion", "streaming", "reasoning", "tools", "needle", "parity", "speculative",
                  "auth"]
Tier = Literal["quick", "full"]

CHECK_IDS: tuple[CheckId, ...] = (
    "endpoint", "completion", "streaming", "reasoning", "tools", "needle", "parity", "speculative", "auth",
)
EXCERPT_CHARS = 400


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The start of a response body, short enough for a report."""
    if text is None:
        return ""
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


@dataclass
class Evidence:
    """One request the check made and what came back."""

    label: str
    request: dict[str, Any]
    response: str
    seconds: float
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "request": self.request, "response": self.response,
                               "seconds": round(self.seconds, 3)}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class CheckResult:
    """The verdict of one check."""

    id: CheckId
    status: Status
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    fix: str | None = None
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "summary": self.summary, "fix": self.fix,
                "seconds": round(self.seconds, 3), "evidence": [e.to_json() for e in self.evidence],
                "details": self.details}


@dataclass
class Report:
    """Every check of one run of the suite, in order."""

    target: dict[str, Any]
    tier: Tier
    checks: list[CheckResult]
    seconds: float

    @property
    def passed(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def get(self, check_id: CheckId) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "tier": self.tier, "target": self.target, "seconds": round(self.seconds, 3),
                "checks": [c.to_json() for c in self.checks]}


_SEVERITY: dict[Status, int] = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}


def worst(statuses: list[Status]) -> Status:
    """The most severe of several verdicts (fail > warn > pass > skip)."""
    return max(statuses, key=lambda st: _SEVERITY[st]) if statuses else "skip"
