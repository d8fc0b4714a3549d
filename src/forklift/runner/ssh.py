"""SshRunner: the same argv, run on another host through the system OpenSSH client.

Uses the user's ~/.ssh/config, agent and host keys (or the file in ``$FORKLIFT_SSH_CONFIG``);
connections are multiplexed (ControlMaster). argv is joined with ``shlex.join`` exactly once, here,
at the transport edge. Every error names the host and the command.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from forklift import paths
from forklift.errors import HostUnreachableError, RunnerError, SshTargetError
from forklift.names import ENV_NAME, check_ssh_target
from forklift.runner.base import Completed, Spawned, check_env

SSH_UNREACHABLE = 255
SSH_CONFIG_ENV = "FORKLIFT_SSH_CONFIG"
"""Environment variable naming an ssh_config file used instead of ~/.ssh/config (tests, CI)."""

_KEY_REFUSED = ("Permission denied", "publickey", "Too many authentication failures")
_HOSTKEY = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED")


def validated_target(target: str) -> str:
    """``target`` when it is a plain ssh destination, else SshTargetError naming what is wrong."""
    try:
        check_ssh_target(target)
    except ValueError as exc:
        raise SshTargetError(f"not an ssh destination: {exc}",
                             fix="Give [user@]host[:port] (letters, digits, '.', '_', '-'; not starting with '-'); "
                             "put ssh options in ~/.ssh/config or $FORKLIFT_SSH_CONFIG.") from None
    return target


def split_target(target: str) -> tuple[str, int | None]:
    """'user@host:2222' -> ('user@host', 2222); IPv6 in brackets supported."""
    if target.startswith("[") and "]" in target:
        host, _, rest = target[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if "@[" in target and "]" in target:
        user, _, rest = target.partition("@[")
        host, _, port = rest.partition("]")
        return f"{user}@{host}", int(port[1:]) if port.startswith(":") else None
    if target.count(":") == 1:
        host, _, port = target.partition(":")
        if port.isdigit():
            return host, int(port)
    return target, None


def default_ssh_config() -> str | None:
    value = os.environ.get(SSH_CONFIG_ENV)
    return value or None


def unreachable_error(host: str, target: str, stderr: str, argv: Sequence[str]) -> HostUnreachableError:
    """Translate ssh's exit 255 into an error that says which of the usual causes it is."""
    tail = " ".join(stderr.strip().splitlines()[-3:])[-300:]
    cmd = shlex.join(list(argv))
    if any(s in stderr for s in _KEY_REFUSED):
        return HostUnreachableError(
            f"{host}: ssh {target} refused our key while running `{cmd}`: {tail}",
            host=host,
            fix=f"Add your public key to {target}'s ~/.ssh/authorized_keys (ssh-copy-id {target}), "
            "or name the right IdentityFile in ~/.ssh/config.",
        )
    if any(s in stderr for s in _HOSTKEY):
        return HostUnreachableError(
            f"{host}: ssh {target} does not trust the host key while running `{cmd}`: {tail}",
            host=host,
            fix=f"Verify the host and add its key: `ssh {target} true` once interactively.",
        )
    return HostUnreachableError(
        f"{host}: cannot reach {target} over ssh while running `{cmd}`: {tail or 'ssh exited 255'}",
        host=host,
        fix=f"Check the address and that sshd runs there: `ssh {target} true` must work without a password.",
    )


class SshRunner:
    """Runs commands on one remote host over OpenSSH."""

    def __init__(
        self,
        target: str,
        *,
        name: str | None = None,
        connect_timeout: int = 10,
        ssh_config: str | None = None,
        extra_options: Sequence[str] = (),
        default_timeout: float = 120.0,
    ) -> None:
        self.target, self.port = split_target(validated_target(target))
        self.ssh_target = target
        self.host = name or self.target
        self.connect_timeout = connect_timeout
        self.ssh_config = ssh_config if ssh_config is not None else default_ssh_config()
        self.extra_options = list(extra_options)
        self.default_timeout = default_timeout

    def control_path(self) -> str:
        """A short socket path (Unix sockets allow ~107 bytes): one folder per user in the temp dir, one
        master per (forklift home, ssh config, %C = local host, remote host, port, user)."""
        folder = Path(tempfile.gettempdir()) / f"forklift-ssh-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        scope = hashlib.sha256(f"{paths.home()}\0{self.ssh_config or ''}".encode()).hexdigest()[:8]
        return f"{folder}/{scope}-%C"

    def options(self) -> list[str]:
        """``ssh`` and its options, without the destination."""
        argv = ["ssh"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        argv += [
            "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path()}", "-o", "ControlPersist=60",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
        ]
        if self.port:
            argv += ["-p", str(self.port)]
        argv += self.extra_options
        return argv

    def base_argv(self) -> list[str]:
        """``ssh OPTIONS -- DESTINATION``: nothing after ``--`` is read as an ssh option."""
        return [*self.options(), "--", self.target]

    def remote_command(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        """The one place argv becomes a shell string: ``env -- K=V ... argv`` joined by shlex. Names are checked
        (``[A-Za-z_][A-Za-z0-9_]*``) and ``--`` ends env's options, so no key or value can become an option."""
        full = list(argv)
        if env:
            check_env(env, self.host)
            full = ["env", "--", *(f"{k}={v}" for k, v in env.items()), *full]
        return shlex.join(full)

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        full = [*self.base_argv(), self.remote_command(argv, env)]
        limit = timeout if timeout is not None else self.default_timeout
        try:
            proc = subprocess.run(  # noqa: S603 - argv list; remote command joined once with shlex
                full, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=limit, input=input,
                check=False,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise RunnerError(f"{self.host}: `{shlex.join(list(argv))}` over ssh {self.target} did not finish "
                              f"within {limit:.0f} s",
                              fix=f"Check that {self.host} is responsive (`ssh {self.ssh_target} uptime`).") from exc
        except FileNotFoundError as exc:
            raise RunnerError(f"{self.host}: the ssh client is not installed here",
                              fix="Install OpenSSH's client (apt-get install openssh-client).") from exc
        if proc.returncode == SSH_UNREACHABLE and not proc.stdout:
            raise unreachable_error(self.host, self.ssh_target, proc.stderr, argv)
        return Completed(self.host, tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Spawned:
        """Start argv detached on the host (setsid: own session and process group); read back its pid.
        Secrets travel on the ssh channel's stdin (one `read` per name), never in a command line."""
        inner = self.remote_command(argv, env)
        if cwd:
            inner = f"cd {shlex.quote(cwd)} && {inner}"
        log_dir = str(Path(log_path).parent)
        secrets = dict(secret_env or {})
        for name, value in secrets.items():
            if not ENV_NAME.fullmatch(name) or "\n" in value or "\r" in value or "\0" in value:
                raise RunnerError(f"{self.host}: secret {name!r} cannot be passed (a variable name and a one-line "
                                  "value are needed)", fix="Use a one-line key in a variable such as FORKLIFT_API_KEY.")
        # read in the foreground shell: an asynchronous list (`... &`) gets /dev/null as its stdin
        reads = "".join(f"IFS= read -r {name} || exit 97; export {name}; " for name in secrets)
        script = (
            f"{reads}mkdir -p {shlex.quote(log_dir)} && "
            f"setsid sh -c {shlex.quote('exec ' + inner)} > {shlex.quote(log_path)} 2>&1 < /dev/null & echo $!"
        )
        stdin = "".join(f"{v}\n" for v in secrets.values()) if secrets else None
        res = self.run(["sh", "-c", script], timeout=60, input=stdin)
        res.check()
        try:
            pid = int(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise RunnerError(f"{self.host}: could not read the pid of `{shlex.join(list(argv))}`: "
                              f"{res.stdout!r}") from exc
        return Spawned(self.host, pid, log_path)

    def close(self) -> None:
        """Close the multiplexed master connection, if one is open."""
        argv = [*self.options(), "-O", "exit", "--", self.target]
        subprocess.run(argv, capture_output=True, timeout=10, check=False)  # noqa: S603
