"""SshRunner: the same argv, run on another host through the system OpenSSH client.

Uses the user's ~/.ssh/config, agent and host keys; connections are multiplexed (ControlMaster).
argv is joined with ``shlex.join`` exactly once, here, at the transport edge.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from forklift import paths
from forklift.cluster.runner import Completed, Spawned
from forklift.errors import HostUnreachableError, RunnerError

SSH_UNREACHABLE = 255


def split_target(target: str) -> tuple[str, int | None]:
    """'user@host:2222' -> ('user@host', 2222); IPv6 in brackets supported."""
    if target.startswith("[") and "]" in target:
        host, _, rest = target[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if target.count(":") == 1:
        host, _, port = target.partition(":")
        if port.isdigit():
            return host, int(port)
    return target, None


class SshRunner:
    """Runs commands on one remote host over OpenSSH."""

    def __init__(self, target: str, *, name: str | None = None, connect_timeout: int = 10,
                 extra_options: Sequence[str] = ()) -> None:
        self.target, self.port = split_target(target)
        self.host = name or self.target
        self.connect_timeout = connect_timeout
        self.extra_options = list(extra_options)

    def base_argv(self) -> list[str]:
        control = paths.home() / "ssh"
        control.mkdir(parents=True, exist_ok=True)
        argv = [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", "ControlMaster=auto", "-o", f"ControlPath={control}/%C", "-o", "ControlPersist=60",
            "-o", "ServerAliveInterval=15",
        ]
        if self.port:
            argv += ["-p", str(self.port)]
        argv += self.extra_options
        return [*argv, self.target]

    def _remote(self, argv: Sequence[str], env: Mapping[str, str] | None) -> str:
        cmd = shlex.join(list(argv))
        if env:
            cmd = shlex.join(["env", *(f"{k}={v}" for k, v in env.items())]) + " " + cmd
        return cmd

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        full = [*self.base_argv(), "--", self._remote(argv, env)]
        try:
            proc = subprocess.run(  # noqa: S603 - argv list; remote command joined once with shlex
                full, capture_output=True, text=True, timeout=timeout, input=input, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise RunnerError(f"{self.host}: `{shlex.join(list(argv))}` timed out after {timeout} s",
                              fix=f"Check that {self.host} is responsive.") from exc
        if proc.returncode == SSH_UNREACHABLE and not proc.stdout:
            raise HostUnreachableError(
                f"{self.host}: ssh {self.target} failed: {proc.stderr.strip()[-300:]}",
                host=self.host,
                fix=f"Check `ssh {self.target} true` works without a password (key in agent or ~/.ssh/config).",
            )
        return Completed(self.host, tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Spawned:
        """Start argv detached on the host (setsid, own process group); print its pid."""
        inner = self._remote(argv, env)
        if cwd:
            inner = f"cd {shlex.quote(cwd)} && {inner}"
        log_dir = str(Path(log_path).parent)
        script = (
            f"mkdir -p {shlex.quote(log_dir)} && "
            f"setsid sh -c {shlex.quote('exec ' + inner)} > {shlex.quote(log_path)} 2>&1 < /dev/null & echo $!"
        )
        res = self.run(["sh", "-c", script], timeout=60)
        res.check()
        try:
            pid = int(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise RunnerError(f"{self.host}: could not read the pid of the started process: {res.stdout!r}") from exc
        return Spawned(self.host, pid, log_path)
