"""The runner turns a connection that breaks mid-suite into a failed check, not a traceback; tiers; the report."""

from __future__ import annotations

import socket

from forklift import check
from forklift.check.context import CheckContext
from forklift.check.result import Report
from forklift.check.runner import _guarded
from forklift.check.session import Session
from forklift.endpoint import Discovery, Target
from forklift.results import CheckResult


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_broken_connection_fails_the_check() -> None:
    target = Target(f"http://127.0.0.1:{_closed_port()}", model="m")
    s = Session(target, Discovery(listing=[{"id": "m"}], model="m", max_model_len=None, version=None), timeout_s=5)
    try:
        for check_id in ("endpoint", "completion"):
            result = _guarded(check_id, CheckContext(s))
            assert result.status == "fail"
            assert result.summary.startswith("request failed") or "Connect" in result.summary
    finally:
        s.close()


def test_tiers() -> None:
    plain = Target("http://x", model="m")
    assert check.plan(plain, "quick") == ["endpoint", "completion", "streaming", "tools", "integrity", "golden",
                                          "auth"]
    thinking = Target("http://x", model="m", reasoning_parser="glm45")
    assert check.plan(thinking, "quick") == ["endpoint", "completion", "streaming", "reasoning", "tools", "integrity",
                                             "golden", "auth"]
    assert check.plan(plain, "full") == list(check.ids())
    assert check.plan(plain, "full", ["needle", "endpoint"]) == ["endpoint", "needle"]


def test_report_keeps_evidence_and_seconds_and_passes_on_warn_and_skip() -> None:
    checks = [CheckResult("endpoint", "ok", "fine", seconds=0.5), CheckResult("auth", "skip", "no key"),
              CheckResult("completion", "warn", "2/3")]
    report = Report({"base_url": "http://x"}, "quick", checks, 1.0)
    data = report.to_json()
    assert data["passed"] is True
    assert [c["status"] for c in data["checks"]] == ["ok", "skip", "warn"]
    for c in data["checks"]:
        assert {"id", "status", "summary", "fix", "details", "evidence", "seconds"} <= set(c)
    failed = Report({}, "quick", [*checks, CheckResult("tools", "fail", "bad")], 1.0)
    assert failed.passed is False and failed.to_json()["passed"] is False


def test_all_is_sorted_and_importable() -> None:
    assert check.__all__ == sorted(check.__all__)
    for name in check.__all__:
        assert getattr(check, name) is not None, name
