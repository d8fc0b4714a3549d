"""The gateway watcher's systemd unit: verified by systemd-analyze, no secret in it, the watcher's own death
restarted (Restart=on-failure) while its give-up and a second watcher are not, every step an argv."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forklift.gateway import ops
from forklift.gateway.keys import gateway_dir
from forklift.runner.fake import FakeRunner
from forklift.supervise import gateway_service, service

pytestmark = pytest.mark.unit


def _plan(**kw: Any) -> service.ServicePlan:
    return gateway_service.install_plan(port=18350, url="https://gw.office:18350", watcher_argv=ops.watcher_argv(
        sys.executable), user="root", **kw)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_gateway_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    plan = _plan(environ={"PYTHONPATH": "/a b/src", "FORKLIFT_CACHE": "/var/cache/forklift"})
    path = tmp_path / plan.unit
    path.write_text(plan.unit_text)
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stderr
    assert plan.unit == "forklift-gateway-18350.service"
    assert f"ExecStart={sys.executable} -m forklift.cli.main gateway serve" in plan.unit_text


def test_the_watchers_death_is_restarted_its_give_up_and_a_second_watcher_are_not(tmp_path: Path) -> None:
    """Exit 3: the watcher gave up on the proxy (MAX_RESTARTS in WINDOW_S); exit 2: another watcher serves."""
    lines = _plan(environ={}).unit_text.splitlines()
    assert "Description=forklift gateway (LiteLLM's proxy) at https://gw.office:18350, watched" in lines
    for line in ("Restart=on-failure", "SuccessExitStatus=143", "RestartPreventExitStatus=2 3", "KillMode=process",
                 "WantedBy=multi-user.target", f"Environment=FORKLIFT_HOME={tmp_path / 'forklift-home'}"):
        assert line in lines


def test_no_secret_reaches_the_unit(tmp_path: Path) -> None:
    """The admin key lives in the gateway's 0600 file; the environment's secrets are not carried."""
    secret = "fk-admin-very-secret"
    plan = _plan(environ={"LITELLM_MASTER_KEY": secret, "OPENAI_API_KEY": secret, "FORKLIFT_API_KEY": secret,
                          "PYTHONPATH": "src"})
    assert secret not in plan.unit_text and secret not in str(plan.to_json())
    assert "EnvironmentFile" not in plan.unit_text and plan.credentials_path is None
    assert f"Environment=PYTHONPATH={Path('src').resolve()}" in plan.unit_text  # a unit runs from /


def test_install_and_remove_are_argvs_through_the_runner() -> None:
    plan = _plan(environ={}, unit_dir="/tmp/units", start=True)
    runner = FakeRunner()
    service.apply(plan, runner)
    assert [list(c.argv) for c in runner.calls] == [
        ["install", "-d", "-m", "0755", "/tmp/units"],
        ["install", "-m", "0644", "/dev/stdin", "/tmp/units/forklift-gateway-18350.service"],
        ["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", "forklift-gateway-18350.service"]]
    assert runner.calls[1].input == plan.unit_text
    gone = FakeRunner().on(["systemctl", "disable"], returncode=1, stderr="not loaded")
    service.apply(gateway_service.remove_plan(18350, unit_dir="/tmp/units"), gone, tolerate=("systemctl disable",))
    assert gone.ran("rm", "-f", "/tmp/units/forklift-gateway-18350.service") and gone.ran("systemctl", "daemon-reload")


def test_a_second_watcher_exits_2_and_a_reused_proxy_pid_is_not_adopted(tmp_path: Path) -> None:
    state = ops.GatewayState(runs=[], backends=[], host="127.0.0.1", port=18351, litellm="/bin/litellm",
                             watcher_pid=4242, proxy_pid=None)
    ops.save_state(state)
    other = FakeRunner().on(["ps", "-o", "stat="], stdout="S\n").on(
        ["ps", "-ww", "-o", "args="], stdout="/usr/bin/python3 -m forklift.cli.main gateway serve\n")
    said: list[str] = []
    assert ops.serve(runner=other, say=said.append) == 2
    assert "another watcher (pid 4242)" in said[0] and not other.ran("/bin/litellm")
    # after a reboot the recorded pids belong to other programs: the watcher runs, and starts a proxy of its own
    ops.save_state(ops.GatewayState(runs=[], backends=[], host="127.0.0.1", port=18351, litellm="/bin/litellm",
                                    watcher_pid=4242, proxy_pid=5151))
    (gateway_dir() / "admin.key").write_text("fk-admin-x")
    rebooted = FakeRunner().on(["ps", "-o", "stat="], stdout="S\n").on(["ps", "-ww", "-o", "args="],
                                                                         stdout="/usr/sbin/sshd -D\n")

    def say(line: str) -> None:
        if line.startswith("proxy pid"):
            raise _Adopted(line)

    with pytest.raises(_Adopted):
        ops.serve(runner=rebooted, say=say)
    assert [c.argv[0] for c in rebooted.calls if c.spawned] == ["/bin/litellm"]


class _Adopted(Exception):
    pass


def test_a_watcher_started_again_takes_over_the_proxy_that_still_serves() -> None:
    """What Restart=on-failure relies on: after the watcher's own death (KillMode=process left the proxy up) the new
    watcher watches that proxy instead of starting a second one on the same port."""
    state = ops.GatewayState(runs=[], backends=[], host="127.0.0.1", port=18352, litellm="/bin/litellm",
                             watcher_pid=None, proxy_pid=5151)
    ops.save_state(state)
    proxy_args = f"/bin/litellm --config {gateway_dir() / 'config.yaml'} --port 18352\n"
    runner = FakeRunner().on(["ps", "-o", "stat="], stdout="S\n").on(["ps", "-ww", "-o", "args="], stdout=proxy_args)

    def say(line: str) -> None:
        if "still serves" in line:
            raise _Adopted(line)

    with pytest.raises(_Adopted, match="pid 5151"):
        ops.serve(runner=runner, say=say)
    assert not [c for c in runner.calls if c.spawned]
    assert ops.load_state().proxy_pid == 5151
