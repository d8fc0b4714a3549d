"""A helper process started detached on a host (its own session), watched through its log, stopped by its id.

Transfers use it where they must report progress while they run and must not outlive an interrupted forklift:
the Hub pull on each node, rsync from a node (or this machine) to another node, ``docker save | ssh docker load``
between nodes. Its files (program, spec, log) live in one folder under the host's ``~/.cache/forklift/jobs``;
a secret (the Hub token) reaches the process through ``Runner.spawn``'s ``secret_env``, never a file or argv.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift import paths
from forklift.host import procs, remote
from forklift.runner import LocalRunner, Runner

EXIT_MARK = "forklift-job-exit"
START_MARK = "forklift-job-start"


@dataclass
class Job:
    """One detached process on ``runner``'s host."""

    runner: Runner
    folder: str
    pid: int
    offset: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    """Log lines that are not JSON events (a tool's own output)."""

    @property
    def log(self) -> str:
        return f"{self.folder}/log"

    @property
    def exit_code(self) -> int | None:
        """For a shell job started with ``with_exit_line``: the code it printed when it ended."""
        for line in reversed(self.text):
            if line.startswith(EXIT_MARK):
                return int(line.split()[1])
        return None

    @property
    def duration(self) -> float | None:
        """For a job started with ``with_exit_line``: seconds between its start and end lines (the host's clock)."""
        marks = {line.split()[0]: line.split()[-1] for line in self.text if line.startswith((START_MARK, EXIT_MARK))}
        try:
            return max(0.0, float(marks[EXIT_MARK]) - float(marks[START_MARK]))
        except (KeyError, ValueError):
            return None


def home_of(runner: Runner) -> str:
    return str(Path.home()) if isinstance(runner, LocalRunner) else remote.home_dir(runner)


def new_folder(runner: Runner, kind: str, home: str | None = None) -> str:
    """A fresh job folder: under forklift's cache here, under ``~/.cache/forklift/jobs`` on a remote host."""
    name = f"{kind}-{secrets.token_hex(4)}"
    if isinstance(runner, LocalRunner):
        return str(paths.cache_dir() / "jobs" / name)
    return f"{home or home_of(runner)}/.cache/forklift/jobs/{name}"


def with_exit_line(argv: Sequence[str]) -> list[str]:
    """argv run by ``sh`` between a start line and a last line with its exit code, both timestamped (read back by
    ``Job.exit_code`` and ``Job.duration``)."""
    script = f'echo "{START_MARK} $(date +%s.%N)"; "$@"; rc=$?; echo "{EXIT_MARK} $rc $(date +%s.%N)"'
    return ["sh", "-c", script, "sh", *argv]


def start(runner: Runner, folder: str, argv: Sequence[str], *, files: Mapping[str, str] | None = None,
          env: Mapping[str, str] | None = None, secret_env: Mapping[str, str] | None = None) -> Job:
    """Write ``files`` into the folder, then spawn argv with its output in ``folder/log``."""
    runner.run(["mkdir", "-p", folder], timeout=60).check()
    for name, text in (files or {}).items():
        remote.write_text(runner, f"{folder}/{name}", text)
    spawned = runner.spawn(list(argv), log_path=f"{folder}/log", env=env, secret_env=secret_env)
    return Job(runner, folder, spawned.pid)


def read(job: Job) -> list[dict[str, Any]]:
    """New JSON events since the last read (other lines go to ``job.text``)."""
    lines, job.offset = remote.read_from(job.runner, job.log, job.offset)
    new: list[dict[str, Any]] = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and "event" in event:
            new.append(event)
        else:
            job.text.append(line)
    job.events.extend(new)
    return new


def running(job: Job) -> bool:
    return procs.pgid_alive(job.runner, job.pid)


def stop(job: Job, *, grace_s: float = 5.0) -> None:
    """SIGTERM the job's session (by its recorded id), SIGKILL after the grace."""
    procs.stop_group(job.runner, job.pid, grace_s=grace_s)


def stop_quietly(job: Job) -> None:
    """``stop`` for a job still running when its watcher fails or is interrupted: a detached copy must not outlive
    the forklift that started it. A failure to stop (the host went away) leaves the original error to be seen."""
    if job.exit_code is not None:
        return
    with contextlib.suppress(Exception):  # the caller re-raises the error that brought us here
        stop(job)


def remove(job: Job) -> None:
    job.runner.run(["rm", "-rf", "--", job.folder], timeout=60)
