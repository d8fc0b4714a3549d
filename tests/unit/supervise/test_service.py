"""The supervisor's systemd unit: its text (verified by systemd-analyze), no secret in it, the credentials file
root-only through stdin, and every step an argv through the Runner (what --dry-run prints)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from forklift.errors import ServiceError
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord
from forklift.runner.fake import FakeRunner
from forklift.supervise import hooks, service
from forklift.supervise.service import install_plan, remove_plan, render_unit
from tests.helpers import launch_of

SECRET = "sk-very-secret-value"


def _record(*sets: str) -> RunRecord:
    plan = for_launch(resolve("default", list(sets)), force=True)
    launch = launch_of("default", "/models/smol", run_id="abc")
    return RunRecord(name="chat", run_id="abc", plan=plan, launch=launch, endpoint="http://127.0.0.1:8000",
                     served_name="smollm2")


def _verify(tmp_path: Path, text: str, unit: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / unit
    path.write_text(text)
    return subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    plan = install_plan(_record("serve.api_key_env=CHAT_KEY"), environ={"CHAT_KEY": SECRET, "PYTHONPATH": "/a b/src"},
                        python=sys.executable, user="root")
    done = _verify(tmp_path, plan.unit_text, plan.unit)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stderr
    assert f"ExecStart={sys.executable} -m forklift.cli.main supervise chat" in plan.unit_text
    assert 'Environment="PYTHONPATH=/a b/src"' in plan.unit_text  # quoted: it holds a space


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    """The check above means something: a unit whose program does not exist fails it."""
    text = render_unit("x", argv=["/nonexistent/python", "-m", "forklift.cli.main", "supervise", "x"], home="/h",
                       user="root", environment={}, credentials=None, stop_s=30)
    assert _verify(tmp_path, text, "forklift-supervise-x.service").returncode != 0


def test_no_secret_in_the_unit_and_the_key_file_is_root_only_via_stdin() -> None:
    plan = install_plan(_record("serve.api_key_env=CHAT_KEY"), environ={"CHAT_KEY": SECRET}, python="/usr/bin/python3",
                        user="svc", unit_dir="/tmp/units", credentials_dir="/etc/fl/creds")
    assert SECRET not in plan.unit_text and SECRET not in str(plan.to_json())
    assert "EnvironmentFile=/etc/fl/creds/chat.env" in plan.unit_text
    assert "User=svc" in plan.unit_text
    for line in ("Restart=on-failure", "SuccessExitStatus=143", "RestartPreventExitStatus=2 3", "KillMode=process",
                 "WantedBy=multi-user.target", "After=network-online.target"):
        assert line in plan.unit_text.splitlines()
    runner = FakeRunner()
    service.apply(plan, runner)
    argvs = [list(c.argv) for c in runner.calls]
    assert argvs == [["install", "-d", "-m", "0700", "/etc/fl/creds"],
                     ["install", "-m", "0600", "/dev/stdin", "/etc/fl/creds/chat.env"],
                     ["install", "-d", "-m", "0755", "/tmp/units"],
                     ["install", "-m", "0644", "/dev/stdin", "/tmp/units/forklift-supervise-chat.service"],
                     ["systemctl", "daemon-reload"], ["systemctl", "enable", "forklift-supervise-chat.service"]]
    assert runner.calls[1].input == f'CHAT_KEY="{SECRET}"\n'
    assert all(SECRET not in " ".join(a) for a in argvs)
    assert runner.calls[3].input == plan.unit_text


def test_without_an_api_key_there_is_no_credentials_file() -> None:
    plan = install_plan(_record(), environ={"PYTHONPATH": "src:/opt/x"}, python="/usr/bin/python3", user="root",
                        start=True)
    assert f"Environment=PYTHONPATH={Path('src').resolve()}:/opt/x" in plan.unit_text  # a unit runs from /
    assert plan.credentials_path is None and "EnvironmentFile" not in plan.unit_text
    assert plan.actions[-1].argv == ["systemctl", "enable", "--now", "forklift-supervise-chat.service"]


def test_a_missing_key_or_a_remote_head_is_refused() -> None:
    with pytest.raises(Exception, match="CHAT_KEY"):
        install_plan(_record("serve.api_key_env=CHAT_KEY"), environ={}, python="/usr/bin/python3", user="root")
    with pytest.raises(ServiceError, match="not this machine"):
        install_plan(_record("nodes=[{host: gpu1}]"), environ={}, python="/usr/bin/python3", user="root")


def test_a_failing_step_stops_the_install_and_remove_tolerates_a_unit_already_gone() -> None:
    plan = install_plan(_record(), environ={}, python="/usr/bin/python3", user="root")
    runner = FakeRunner().on(["systemctl", "daemon-reload"], returncode=1, stderr="Access denied")
    with pytest.raises(ServiceError, match="Access denied"):
        service.apply(plan, runner)
    assert not runner.ran("systemctl", "enable")
    gone = FakeRunner().on(["systemctl", "disable"], returncode=1, stderr="not loaded")
    service.apply(remove_plan("chat"), gone, tolerate=("systemctl disable",))
    assert gone.ran("rm", "-f") and gone.ran("systemctl", "daemon-reload")


def test_unit_words_escape_specifiers_and_quotes() -> None:
    assert service.quote("/usr/bin/python3") == "/usr/bin/python3"
    assert service.quote("100%") == '"100%%"'
    assert service.quote('a "b"') == '"a \\"b\\""'


def test_the_hook_gets_the_event_on_stdin_or_as_a_post() -> None:
    event = {"kind": "give-up", "name": "chat", "cause": "dead: rank 0 on localhost: pid 1 is gone"}
    runner = FakeRunner()
    assert hooks.call(["notify", "--urgent"], event, runner=runner) is None
    call = runner.calls[0]
    assert call.argv == ("notify", "--urgent") and call.env["FORKLIFT_EVENT"] == "give-up"
    assert '"cause": "dead: rank 0' in (call.input or "")
    failing = FakeRunner().on(["notify"], returncode=2, stderr="no display")
    assert hooks.call(["notify"], event, runner=failing) == "notify exited 2: no display"

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204 if len(seen) == 1 else 500)

    transport = httpx.MockTransport(answer)
    assert hooks.call("https://hooks.example/x", event, transport=transport) is None
    assert seen[0].method == "POST" and b'"kind": "give-up"' in seen[0].content
    assert hooks.call("https://hooks.example/x", event, transport=transport) == \
        "POST https://hooks.example/x answered HTTP 500"
    assert hooks.call(None, event) is None
