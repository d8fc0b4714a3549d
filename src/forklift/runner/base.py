"""The one seam through which forklift executes commands: argv lists in, ``Completed`` out.

``LocalRunner`` runs on this machine; the SSH runner (``forklift.runner.ssh``) wraps the same argv in
the system OpenSSH client. argv stays a list until the transport edge.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from forklift.errors import EnvNameError, RemoteCommandError
from forklift.names import ENV_NAME


def check_env(env: Mapping[str, str], host: str) -> None:
    """Raise EnvNameError unless every name is ``[A-Za-z_][A-Za-z0-9_]*`` and no value holds a NUL byte."""
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise EnvNameError(f"{host}: {name!r} is not an environment variable name",
                               fix="Use letters, digits and '_' only, not starting with a digit (e.g. NCCL_DEBUG).")
        if "\0" in str(value):
            raise EnvNameError(f"{host}: the value of {name} holds a NUL byte", fix=f"Remove it from {name}'s value.")


@dataclass(frozen=True)
class Completed:
    """Result of one command on one host."""

    host: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> Completed:
        """Raise ``RemoteCommandError`` unless the command exited 0."""
        if self.returncode != 0:
            tail = "\n".join(self.stderr.strip().splitlines()[-10:])
            raise RemoteCommandError(
                f"{self.host}: `{shlex.join(self.argv)}` exited {self.returncode}"
                + (f": {tail}" if tail else ""),
                host=self.host,
                argv=self.argv,
                returncode=self.returncode,
                stderr_tail=tail,
            )
        return self


@dataclass(frozen=True)
class Spawned:
    """A detached process started by ``Runner.spawn``."""

    host: str
    pid: int
    log_path: str


class Runner(Protocol):
    """Execute argv on one host."""

    host: str

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> Completed: ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        log_path: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        secret_env: Mapping[str, str] | None = None,
    ) -> Spawned:
        """Start argv detached in its own session (it outlives forklift), stdout+stderr to log_path.
        ``secret_env`` reaches the process's environment but never any command line (no ps, no ssh argv)."""
        ...
