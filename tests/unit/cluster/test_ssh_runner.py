from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from forklift.errors import HostUnreachableError, RunnerError
from forklift.runner.fanout import fan_out
from forklift.runner.ssh import SSH_CONFIG_ENV, SshRunner, split_target
from tests.unit.cluster.fakes import fake_ssh


@pytest.fixture
def ssh_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, log = fake_ssh(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return log


def test_split_target() -> None:
    assert split_target("root@10.231.0.1") == ("root@10.231.0.1", None)
    assert split_target("u@h:2222") == ("u@h", 2222)
    assert split_target("[fe80::1]:22") == ("fe80::1", 22)


def test_argv_is_multiplexed_uses_config_and_joins_once(ssh_log: Path, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("")
    monkeypatch.setenv(SSH_CONFIG_ENV, str(cfg))
    res = SshRunner("u@node:2200", name="node-b").run(["echo", "a b", "$HOME"], env={"X": "1 2"})
    assert res.ok and res.host == "node-b"
    argv = ssh_log.read_text().splitlines()
    assert argv[:2] == ["-F", str(cfg)]
    assert "ControlMaster=auto" in argv and "BatchMode=yes" in argv
    assert argv[argv.index("-p") + 1] == "2200"
    assert argv[-3:] == ["--", "u@node", "env -- 'X=1 2' echo 'a b' '$HOME'"]


@pytest.mark.parametrize(("mode", "words"), [("unreachable", "cannot reach"), ("refused", "refused our key")])
def test_ssh_failures_name_host_and_command(ssh_log: Path, monkeypatch: pytest.MonkeyPatch, mode: str,
                                            words: str) -> None:
    monkeypatch.setenv("FAKE_SSH_MODE", mode)
    with pytest.raises(HostUnreachableError) as err:
        SshRunner("root@10.231.0.9", name="node-b").run(["nvidia-smi", "-L"])
    assert err.value.host == "node-b"
    assert "node-b" in str(err.value) and words in str(err.value) and "`nvidia-smi -L`" in str(err.value)
    assert err.value.fix


def test_fan_out_keeps_every_host_outcome() -> None:
    def work(x: int) -> int:
        if x == 2:
            raise ValueError("host two broke")
        return x * 10

    out = fan_out([("a", 1), ("b", 2), ("c", 3)], work)
    assert out.results == {"a": 10, "c": 30}
    assert list(out.errors) == ["b"] and not out.ok
    with pytest.raises(ValueError, match="host two"):
        out.raise_first()


def test_spawn_passes_secrets_on_stdin_never_in_a_command_line(ssh_log: Path, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("FAKE_SSH_MODE", "exec")
    log = tmp_path / "run" / "rank0.log"
    code = "import os; print('key=' + os.environ['VLLM_API_KEY'], 'x=' + os.environ['X'])"
    spawned = SshRunner("u@node", name="node-b").spawn([sys.executable, "-c", code], log_path=str(log),
                                                       env={"X": "1"}, secret_env={"VLLM_API_KEY": "s3cr3t-k"})
    deadline = time.monotonic() + 20
    while "key=" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the spawned process never wrote its log"
        time.sleep(0.05)
    assert log.read_text().strip() == "key=s3cr3t-k x=1" and spawned.pid > 0
    assert "s3cr3t-k" not in ssh_log.read_text()  # the whole ssh argv, remote command included


def test_spawn_refuses_a_secret_it_cannot_pass_on_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunnerError) as err:
        SshRunner("u@node", name="node-b").spawn(["true"], log_path=str(tmp_path / "l"),
                                                 secret_env={"VLLM_API_KEY": "two\nlines"})
    assert "node-b" in str(err.value) and "VLLM_API_KEY" in str(err.value)
