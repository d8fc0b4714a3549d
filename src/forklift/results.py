"""One result shape for every verdict forklift gives: ``check``, ``node check``, ``up``'s preflight, ``doctor``.

A CheckResult is a verdict (ok / warn / fail / skip), a one-line summary, the fix, the host it is about, and
the evidence behind it: structured ``details`` (numbers, paths) and ``evidence`` items (a request and its
response, a log line). The CLI renders every list of them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail", "skip")
_SEVERITY: dict[str, int] = {"skip": 0, "ok": 1, "warn": 2, "fail": 3}
EXCERPT_CHARS = 400


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The start of a long text (a response body, a log line), short enough for a report."""
    if text is None:
        return ""
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


@dataclass
class Evidence:
    """One thing the verdict rests on: a request and what came back, or a line that was read."""

    label: str
    text: str = ""
    request: dict[str, Any] | None = None
    response: str | None = None
    seconds: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label}
        for key in ("text", "request", "response", "note"):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 3)
        return out


@dataclass
class CheckResult:
    """One verdict about one thing (on one host)."""

    id: str
    status: Status
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    fix: str | None = None
    host: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.id

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "status": self.status, "summary": self.summary, "fix": self.fix,
                               "host": self.host, "details": dict(self.details)}
        if self.evidence:
            out["evidence"] = [e.to_json() for e in self.evidence]
        if self.seconds:
            out["seconds"] = round(self.seconds, 3)
        return out


def worst(statuses: Iterable[Status] | Iterable[CheckResult]) -> Status:
    """The most severe verdict (fail > warn > ok > skip); ``skip`` for none."""
    values = [s.status if isinstance(s, CheckResult) else s for s in statuses]
    return max(values, key=lambda s: _SEVERITY[s]) if values else "skip"


def failures(results: Iterable[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == "fail"]
