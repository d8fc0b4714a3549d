"""What a suite run returns: each check's :class:`forklift.results.CheckResult`, in order, as one Report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forklift.check.registry import Tier
from forklift.results import CheckResult

CheckId = str
"""A registered check's id (forklift.check.registry)."""


def check_json(result: CheckResult) -> dict[str, Any]:
    """One check in a report: the shared CheckResult JSON, with evidence and seconds always present."""
    return {**result.to_json(), "evidence": [e.to_json() for e in result.evidence],
            "seconds": round(result.seconds, 3)}


@dataclass
class Report:
    """Every check of one run of the suite, in order."""

    target: dict[str, Any]
    tier: Tier
    checks: list[CheckResult]
    seconds: float

    @property
    def passed(self) -> bool:
        """No check failed (ok, warn and skip all pass)."""
        return not any(c.status == "fail" for c in self.checks)

    def get(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "tier": self.tier, "target": self.target, "seconds": round(self.seconds, 3),
                "checks": [check_json(c) for c in self.checks]}
