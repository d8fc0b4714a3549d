"""The supervisor on real vLLM-CPU, started through `forklift up --supervise` itself. One run serves the three
scenarios in order (each start costs 40-120 s on this 2-core machine, so there are three in all):

1. kill -9 of the engine's process group -> the supervisor stops what is left, starts it again from the run record
   and a chat answers again (the time from the kill to serving is printed and bounded);
2. a simulated reboot (every process of the run and the supervisor SIGKILLed, then the unit's ExecStart command run
   as systemd would) -> it comes back, and the restarts already made still count;
3. one more kill with the cap reached -> no restart, the hook is called once with give-up, the supervisor exits 3
   and `status` says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from forklift.supervise import SUPERVISOR_LOG, command
from tests.helpers import forklift, free_port
from tests.integration.test_up_down import _pgid_members

pytestmark = pytest.mark.integration
NAME = "sup"
RECOVERY_BOUND_S = 360.0
"""kill -9 -> serving again: detection (2 s interval) + down + backoff (1 s) + a cold start of SmolLM2 with
enforce_eager (40-120 s here, up to ~5 min when the shared 2-core machine is busy)."""


@dataclass
class Supervised:
    home: Path
    port: int
    hook_file: Path
    env: dict[str, str]
    unit: subprocess.Popen[str] | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _state(s: Supervised) -> dict[str, object]:
    res = forklift("status", NAME, "--json", home=s.home)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def _hook_events(s: Supervised) -> list[dict[str, object]]:
    if not s.hook_file.exists():
        return []
    return [json.loads(line) for line in s.hook_file.read_text().splitlines() if line.strip()]


def _record(s: Supervised) -> dict[str, object]:
    return json.loads((s.home / "runs" / NAME / "record.json").read_text())  # type: ignore[no-any-return]


def _kill_engine(s: Supervised) -> float:
    """SIGKILL the head rank's process group (and any straggler of its session); returns when it was sent."""
    rank = next(r for r in _record(s)["ranks"] if r["role"] == "engine")  # type: ignore[attr-defined, index]
    pgid = int(rank["pgid"])
    t0 = time.monotonic()
    os.killpg(pgid, signal.SIGKILL)
    for pid in _pgid_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return t0


def _wait_recovered(s: Supervised, after: int, t0: float) -> float:
    """Wait until the hook saw recovery number ``after`` and a chat answers; seconds from ``t0``."""
    deadline = t0 + RECOVERY_BOUND_S
    while time.monotonic() < deadline:
        if sum(1 for e in _hook_events(s) if e["kind"] == "recovered") >= after:
            res = forklift("chat", "What is 2+2?", "--name", NAME, "--max-tokens", "8", home=s.home, timeout=120)
            if res.returncode == 0 and res.stdout.strip():
                return time.monotonic() - t0
        time.sleep(1.0)
    log = (s.home / "runs" / NAME / SUPERVISOR_LOG).read_text(errors="replace")[-3000:]
    raise AssertionError(f"not serving again {RECOVERY_BOUND_S:.0f} s after the kill; supervisor log:\n{log}")


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervised]:
    root = tmp_path_factory.mktemp("supervise")
    home, port, hook_file = root / "home", free_port(), root / "hook-events.jsonl"
    append = f"import sys; open({str(hook_file)!r}, 'a').write(sys.stdin.read() + '\\n')"
    recipe = root / "supervised.yaml"
    recipe.write_text(json.dumps({
        "extends": "default", "serve": {"port": port},
        "supervise": {"interval_s": 2, "token_timeout_s": 60, "max_restarts": 2, "window_s": 3600, "backoff_s": 1,
                      "backoff_max_s": 4, "memory_check": "always", "memory_margin_gib": 8, "memory_wait_s": 10,
                      "on_event": [sys.executable, "-c", append]},
    }))
    s = Supervised(home, port, hook_file, {**os.environ, "FORKLIFT_HOME": str(home)})
    t0 = time.monotonic()
    res = forklift("up", str(recipe), "--name", NAME, "--supervise", "--json", home=home)
    if res.returncode != 0:
        pytest.fail(f"forklift up --supervise failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    s.timings["first_start_s"] = round(time.monotonic() - t0, 1)
    assert json.loads(res.stdout)["supervisor_pid"]
    try:
        yield s
    finally:
        forklift("down", NAME, home=home)
        if s.unit is not None and s.unit.poll() is None:
            os.killpg(s.unit.pid, signal.SIGKILL)
        print(f"\nsupervise timings: {s.timings}")


def test_kill_9_of_the_engine_is_restarted_and_serves_again(supervised: Supervised) -> None:
    s = supervised
    _wait_for_watching(s)
    t0 = _kill_engine(s)
    s.timings["kill_to_serving_s"] = round(_wait_recovered(s, 1, t0), 1)
    sup = _state(s)["supervisor"]
    assert isinstance(sup, dict)
    assert sup["state"] == "watching" and sup["running"] and sup["restarts_in_window"] == 1
    assert str(sup["last_cause"]).startswith(("dead", "degraded")), sup
    assert sup["last_recovery_s"] and float(sup["last_recovery_s"]) < RECOVERY_BOUND_S  # type: ignore[arg-type]
    kinds = [e["kind"] for e in _hook_events(s)]
    assert kinds == ["restart", "recovered"], kinds
    assert Path(str(sup["incident_logs"])).is_dir()  # every rank's log and the node facts were kept
    text = forklift("status", NAME, home=s.home).stdout
    assert "supervisor: watching" in text and "restarts in the window 1/2" in text and "recovered" in text


def _wait_for_watching(s: Supervised, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sup = _state(s).get("supervisor")
        if isinstance(sup, dict) and sup["state"] == "watching" and sup["running"]:
            return
        time.sleep(0.5)
    raise AssertionError(f"the supervisor never started watching: {_state(s).get('supervisor')}")


def test_after_a_simulated_reboot_the_units_command_brings_it_back(supervised: Supervised) -> None:
    s = supervised
    sup = _state(s)["supervisor"]
    assert isinstance(sup, dict)
    os.kill(int(sup["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    t0 = _kill_engine(s)
    assert _state(s)["status"] in ("dead", "degraded")
    # what the unit's ExecStart runs (service.install_plan renders the same argv), detached as systemd would
    s.unit = subprocess.Popen(command(NAME), env=s.env, start_new_session=True, stdout=subprocess.DEVNULL,  # noqa: S603
                              stderr=subprocess.PIPE, text=True)
    s.timings["reboot_to_serving_s"] = round(_wait_recovered(s, 2, t0), 1)
    sup = _state(s)["supervisor"]
    assert isinstance(sup, dict) and sup["pid"] == s.unit.pid and sup["restarts_in_window"] == 2


def test_at_the_cap_it_gives_up_once_and_says_why(supervised: Supervised) -> None:
    s = supervised
    assert s.unit is not None
    _wait_for_watching(s)
    _kill_engine(s)
    _, err = s.unit.communicate(timeout=180)
    assert s.unit.returncode == 3, err[-2000:]
    assert "SupervisorGaveUpError" in err and "2 restart(s) within 3600 s" in err
    events = _hook_events(s)
    assert [e["kind"] for e in events].count("give-up") == 1
    restarts = [e for e in events if e["kind"] == "restart"]
    assert [r["wait_s"] for r in restarts] == [1.0, 2.0]  # backoff doubled within the window
    state = _state(s)
    sup = state["supervisor"]
    assert isinstance(sup, dict) and sup["state"] == "gave-up" and not sup["running"]
    assert "max_restarts 2" in str(sup["gave_up"])
    assert state["status"] == "stopped" and not state["alive_ranks"]  # the whole deployment was stopped
    log = (s.home / "runs" / NAME / "supervisor-events.jsonl").read_text()
    assert '"kind": "give-up"' in log and '"kind": "failure"' in log
