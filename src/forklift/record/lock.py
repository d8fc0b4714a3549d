"""One ``up`` per run name at a time: an advisory lock (``flock``) on ``$FORKLIFT_HOME/runs/.locks/NAME.lock``.

The kernel drops the lock when the process that holds it ends, however it ends (SIGKILL included), so a record
that still says "starting" while nobody holds its lock was left by an ``up`` that is gone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from forklift import paths
from forklift.errors import RunAlreadyRunningError, StateDirError
from forklift.record.run_record import validate_name


def lock_path(name: str) -> Path:
    return paths.runs_dir() / ".locks" / f"{validate_name(name)}.lock"


def writable_state(folder: Path) -> None:
    """Raise StateDirError unless forklift can create and write files in ``folder``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise StateDirError(
            f"cannot write forklift's state in {folder}: {exc.strerror or exc}",
            fix="Set FORKLIFT_HOME to a folder you can write (it holds run records and logs), or fix the "
            f"permissions of {paths.home()}.",
        ) from None


class RunLock:
    """Held by ``up`` from its preflight until the run is ready, failed or stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = lock_path(name)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        writable_state(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise RunAlreadyRunningError(
                f"another `forklift up` for '{self.name}' is in progress" + (f" (pid {other})" if other else ""),
                fix=f"Wait for it (`forklift status {self.name}`), stop it (Ctrl-C where it runs"
                + (f", or kill {other}" if other else "") + "), or start this one with `--name OTHER`.",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def up_in_progress(name: str) -> int | None:
    """The pid of the ``up`` holding the run's lock (0 when it did not write one), or None when nobody holds it."""
    path = lock_path(name)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode(errors="replace").strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
