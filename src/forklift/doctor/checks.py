"""A report as ``forklift.results.CheckResult``s, the one result shape the CLI renders.

Confident: the top finding is a ``fail`` with its fix; likelier-than-``ALTERNATIVE`` alternatives are
``warn`` rows. Unsure: every candidate is a ``warn`` row whose "fix" says how to verify it, never a fix.
Nothing found: one ``ok`` row with the last error-looking lines as evidence. Notes (info) are ``skip``.
"""

from __future__ import annotations

from typing import Any

from forklift.doctor.findings import Finding, Report
from forklift.doctor.kb import load_categories
from forklift.results import CheckResult, Evidence

ALTERNATIVE = 0.05


def _details(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = {"category": f.category, "probability": round(f.confidence, 3), "layer": f.layer,
                           "cause": f.cause, "references": list(f.references)}
    for key in ("key", "patch"):
        if getattr(f, key):
            out[key] = getattr(f, key)
    if f.facts:
        out["facts"] = dict(f.facts)
    if f.advice:
        out["advice"] = list(f.advice)
    return out


def _evidence(f: Finding) -> list[Evidence]:
    if f.evidence:
        return [Evidence(label=f"{e.source}:{e.number}" if e.source else f"line {e.number}", text=e.text)
                for e in f.evidence]
    return [Evidence(label="line", text=text) for text in f.lines]


def _result(f: Finding, status: str, summary: str, fix: str | None) -> CheckResult:
    return CheckResult(id=f.rule, status=status, summary=summary, details=_details(f), fix=fix,  # type: ignore[arg-type]
                       host=f.host, evidence=_evidence(f))


def to_checks(report: Report) -> list[CheckResult]:
    active = [f for f in report.findings if f.severity != "info" and not f.superseded_by]
    notes = [f for f in report.findings if f.severity == "info"]
    out: list[CheckResult] = []
    if not active:
        evidence = [Evidence(label="last error line", text=t) for t in report.error_tail]
        out.append(CheckResult(id="doctor", status="ok", summary=f"no failure found in {report.lines_read} lines",
                               details={"lines_read": report.lines_read}, evidence=evidence))
    elif report.unsure:
        cats = load_categories()
        for i, f in enumerate(active, 1):
            verify = f.facts.get("verify") or cats[f.category].verify
            out.append(_result(f, "warn", f"unsure, candidate {i} (p={f.confidence:.2f}): {f.title} [{f.category}]",
                               f"Not sure; verify first: {verify}"))
    else:
        top, rest = active[0], active[1:]
        out.append(_result(top, "fail" if top.severity == "error" else "warn",
                           f"{top.title} [{top.category}] (p={top.confidence:.2f})", top.fix))
        for f in rest:
            if f.confidence >= ALTERNATIVE:
                out.append(_result(f, "warn", f"alternative (p={f.confidence:.2f}): {f.title} [{f.category}]",
                                   f.fix))
    for f in notes:
        out.append(_result(f, "skip", f"note: {f.title}", f.fix))
    return out
