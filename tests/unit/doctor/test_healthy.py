"""A run that reached serving and did not fail gets no finding; no finding is shown without lines that speak for it.

The serving logs are real vLLM runs (tests/data/calibration: H200 and vLLM-CPU starts that reached "Application
startup complete", several stopped with SIGTERM afterwards, some with DEBUG logging on)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forklift.cli.main import app
from forklift.doctor import Source, diagnose_sources, scan_bytes, scan_text, to_checks
from forklift.doctor.findings import Finding, Report

from .conftest import REPO, train_items

CALIBRATION = REPO / "tests" / "data" / "calibration"
SERVING = sorted(p for p in CALIBRATION.rglob("*.log") if b"Application startup complete" in p.read_bytes())
CPU = CALIBRATION / "cpu-vllm032-smollm2-single.log"
STOPPED = CALIBRATION / "h200-grid" / "p01-llama8b-like.log"
runner = CliRunner(env={"COLUMNS": "250"})

# What vLLM's Hermes tool parser logs when a small model writes a broken <tool_call> (logger.exception in
# hermes_tool_parser.py: "Error in extracting tool call from response."), then the access line of that request.
TOOL_ERROR = """\
ERROR 12-01 10:00:01 [hermes_tool_parser.py:136] Error in extracting tool call from response.
Traceback (most recent call last):
  File "/usr/lib/python3/vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py", line 111, in extract_tool_calls
    raw_function_calls = [json.loads(match[0] if match[0] else match[1]) for match in function_call_tuples]
json.decoder.JSONDecodeError: Expecting value: line 2 column 1 (char 1)
INFO:     127.0.0.1:40112 - "POST /v1/chat/completions HTTP/1.1" 200 OK
"""
LATER = 'INFO:     127.0.0.1:40114 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'


def _with_tool_error(*, answered_after: bool) -> str:
    """The CPU run's log with the tool-call error among its requests (before its stop), and the requests after it;
    or, not answered after, the log cut at the end of the traceback (nothing shows the server lived on)."""
    lines = CPU.read_text().splitlines(keepends=True)
    cut = max(i for i, line in enumerate(lines) if '" 200 OK' in line) + 1
    if not answered_after:
        return "".join(lines[:cut]) + TOOL_ERROR.rsplit("INFO:", 1)[0]
    return "".join(lines[:cut]) + TOOL_ERROR + LATER + "".join(lines[cut:])


def _active(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity != "info" and not f.superseded_by]


def test_the_serving_logs_are_there() -> None:
    assert len(SERVING) >= 20 and STOPPED in SERVING and CPU in SERVING


@pytest.mark.parametrize("path", SERVING, ids=lambda p: str(p.relative_to(CALIBRATION)))
def test_a_log_that_reached_serving_without_failing_gives_no_finding(path: Path) -> None:
    report = diagnose_sources([Source(path.name, scan_bytes(path.read_bytes(), path.name))])
    assert _active(report) == [], [(f.rule, f.category, round(f.confidence, 2)) for f in report.findings]
    assert [c.status for c in to_checks(report)][0] == "ok"


def test_the_teardown_of_a_stopped_run_is_not_its_failure_but_a_killed_engine_is() -> None:
    text = STOPPED.read_text()
    assert "signal=SIGTERM" in text and "EngineDeadError" in text  # the stop, then the teardown traceback
    assert _active(diagnose_sources([Source("stopped", scan_text([text]))])) == []
    killed = next(it for it in train_items() if it.stem == "caused-killed-engine")
    assert "EngineDeadError" in killed.text and "SIGTERM" not in killed.text.replace("send sigterm", "")
    top = _active(diagnose_sources([Source("killed", scan_text([killed.text]))]))
    assert top and top[0].category == killed.category


def test_a_request_error_the_server_answered_after_is_a_note_not_a_failure() -> None:
    report = diagnose_sources([Source("t", scan_text([_with_tool_error(answered_after=True)]))])
    assert _active(report) == [] and not report.has_error
    notes = [f for f in report.findings if f.severity == "info" and f.category == "tool_parser_or_reasoning_parser"]
    assert notes and any("Error in extracting tool call" in e.text for e in notes[0].evidence)
    top = _active(diagnose_sources([Source("t", scan_text([_with_tool_error(answered_after=False)]))]))
    assert top and top[0].category == "tool_parser_or_reasoning_parser"


def test_a_server_with_requests_running_and_nothing_generated_is_still_found() -> None:
    hung = next(it for it in train_items() if it.stem == "caused-net-killed-rank")
    assert "Application startup complete" in hung.text
    top = _active(diagnose_sources([Source("hung", scan_text([hung.text]))]))
    assert top and top[0].category == hung.category and top[0].evidence


def test_every_finding_shown_has_lines_that_speak_for_it() -> None:
    missing = []
    for it in train_items():
        report = diagnose_sources([Source(it.stem, scan_text([it.text]))])
        missing += [f"{it.stem}: {f.rule}" for f in _active(report) if not f.evidence and not f.lines]
    assert missing == []


def test_doctor_says_no_failure_found_and_exits_0_on_a_file_and_on_stdin() -> None:
    res = runner.invoke(app, ["doctor", str(STOPPED)])
    assert res.exit_code == 0, res.output
    assert "no failure found" in res.stdout and "unsure" not in res.stdout
    res = runner.invoke(app, ["doctor", "-"], input=_with_tool_error(answered_after=True))
    assert res.exit_code == 0, res.output
    assert "no failure found" in res.stdout


def test_doctor_run_of_a_healthy_serving_run_exits_0(tmp_path: Path) -> None:
    from forklift.launch.render import render
    from forklift.plan import for_launch
    from forklift.recipe import resolve
    from forklift.record import RankState, RunRecord

    log = tmp_path / "rank0.log"
    log.write_text(_with_tool_error(answered_after=True))
    plan = for_launch(resolve("default", ["serve.port=18556"]))
    launch = render(plan, run_id="abc")
    rec = RunRecord(name="healthy", run_id="abc", plan=plan, launch=launch, endpoint=launch.endpoint,
                    served_name=launch.served_name, status="ready",
                    ranks=[RankState(rank=0, host="localhost", pid=os.getpid(), log_path=str(log), node_index=0)])
    rec.save()  # under this test's FORKLIFT_HOME
    res = runner.invoke(app, ["doctor", "healthy", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [f for f in data["findings"] if f["severity"] != "info"] == []
    assert data["checks"][0]["status"] == "ok" and data["checks"][0]["summary"].startswith("no failure found")
    assert any(s.endswith("rank 0 log") for s in data["sources"])


def test_a_failure_after_the_stop_of_an_earlier_run_in_the_same_file_is_read() -> None:
    """One file with two runs: the first served and was stopped (SIGTERM), the next one failed to start."""
    failed = (REPO / "tests" / "data" / "doctor" / "excerpts" / "tpu-inference-223-kv-cache.log").read_text()
    text = CPU.read_text() + "(APIServer pid=2001) INFO 12-01 10:00:00 [api_server.py:1814] vLLM API server version " \
        "0.32.0\n" + failed
    top = _active(diagnose_sources([Source("two runs", scan_text([text]))]))
    assert top and top[0].category == "kv_cache_insufficient"
    long_goodbye = CPU.read_text() + "ERROR shutting down\n" * 2000 + failed  # no new start: read after the bound
    top = _active(diagnose_sources([Source("long", scan_text([long_goodbye]))]))
    assert top and top[0].category == "kv_cache_insufficient"
