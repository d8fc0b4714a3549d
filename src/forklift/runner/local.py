"""Run argv on this machine (subprocess, never a shell)."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from forklift.errors import RunnerError
from forklift.runner.base import Completed, Spawned, check_env


class LocalRunner:
    """Runs commands on this machine."""

    host = "localhost"

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> Completed:
        if env:
            check_env(env, self.host)
        full_env = {**os.environ, **env} if env else None
        try:
            proc = subprocess.run(  # noqa: S603 - argv list, never a shell string
                list(argv),
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",  # a log cut inside a character, or any non-UTF-8 byte, is text, not a crash
                timeout=timeout,
                env=full_env,
                input=input,
                check=False,
            )
        except FileNotFoundError as exc:
            raise RunnerError(
                f"{self.host}: command not found: {argv[0]}", fix=f"Install {argv[0]} or put it on PATH."
            ) from exc
        except OSError as exc:  # a directory, no execute permission, not an executable format
            raise _not_runnable(self.host, argv[0], exc) from exc
        except subprocess.TimeoutExpired as exc:
            raise RunnerError(
                f"{self.host}: `{shlex.join(argv)}` did not finish within {timeout} s",
                fix="Check that the host is responsive, or raise the timeout.",
            ) from exc
        return Completed(self.host, tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        log_path: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        secret_env: Mapping[str, str] | None = None,
    ) -> Spawned:
        check_env({**(env or {}), **(secret_env or {})}, self.host)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **(env or {}), **(secret_env or {})}
        with open(log_path, "wb", buffering=0) as log:  # one log per start: the caller rotated the old one
            try:
                proc = subprocess.Popen(  # noqa: S603 - argv list, never a shell string
                    list(argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:
                raise RunnerError(
                    f"{self.host}: command not found: {argv[0]}", fix=f"Install {argv[0]} or put it on PATH."
                ) from exc
            except OSError as exc:
                raise _not_runnable(self.host, argv[0], exc) from exc
        return Spawned(self.host, proc.pid, log_path)


def _not_runnable(host: str, program: str, exc: OSError) -> RunnerError:
    return RunnerError(f"{host}: cannot run {program}: {exc.strerror or exc}",
                       fix=f"Name an executable program (a Python interpreter such as /usr/bin/python3), not "
                           f"{program}.")
