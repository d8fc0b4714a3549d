"""Process and port facts on a host, through a Runner (works the same locally and over SSH)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from forklift.errors import RunnerError
from forklift.runner import LocalRunner, Runner


def pgid_alive(runner: Runner, pgid: int) -> bool:
    """True while any process of the rank's session remains (zombies excluded)."""
    return bool(session_pids(runner, pgid))


def pid_alive(runner: Runner, pid: int) -> bool:
    res = runner.run(["ps", "-o", "stat=", "-p", str(pid)], timeout=15)
    state = res.stdout.strip()
    return res.returncode == 0 and bool(state) and not state.startswith("Z")


def session_pids(runner: Runner, sid: int) -> list[int]:
    """Live (non-zombie) pids of a session. Ranks are started with setsid, so sid == pgid == pid; children
    that make their own process group (Ray's daemons, vLLM workers) still belong to the session."""
    res = runner.run(["ps", "-o", "pid=,stat=", "-s", str(sid)], timeout=15)
    pids: list[int] = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and not parts[1].startswith("Z"):
            pids.append(int(parts[0]))
    return pids


def signal_group(runner: Runner, pgid: int, sig: str) -> None:
    """Signal the process group and every other live member of the session, by recorded id only."""
    runner.run(["kill", f"-{sig}", "--", f"-{pgid}"], timeout=15)
    stragglers = [str(p) for p in session_pids(runner, pgid)]
    if stragglers:
        runner.run(["kill", f"-{sig}", "--", *stragglers], timeout=15)


def start_time(runner: Runner, pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): with the pid, it names one process for good."""
    res = runner.run(["cat", f"/proc/{pid}/stat"], timeout=15)
    if res.returncode != 0 or ")" not in res.stdout:
        return None
    fields = res.stdout.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def recycled(runner: Runner, pid: int, started: str | None) -> bool:
    """Whether ``pid`` now names another process than the one that started at ``started`` (a pid reused after a
    reboot or a long time): then that process and its whole session are gone, since Linux reuses no id that a live
    process group or session still holds. False when nothing was recorded or nothing has the pid now."""
    if started is None:
        return False
    now = start_time(runner, pid)
    return now is not None and now != started


def container_processes(runner: Runner, container: str) -> list[tuple[int, str]]:
    """(host pid, start time) of every process in a running container (``docker top``). With ``--pid=host`` they
    are host processes that ``docker stop`` can leave behind (seed 002's orphaned Ray daemons)."""
    res = runner.run(["docker", "top", container, "-eo", "pid"], timeout=30)
    if res.returncode != 0:
        return []
    out = []
    for line in res.stdout.splitlines()[1:]:
        if line.strip().isdigit():
            started = start_time(runner, int(line.strip()))
            if started is not None:
                out.append((int(line.strip()), started))
    return out


def kill_leftovers(runner: Runner, processes: list[tuple[int, str]]) -> list[int]:
    """SIGKILL the processes still alive with the same start time (never a recycled pid); returns their pids."""
    alive = [pid for pid, started in processes if start_time(runner, pid) == started]
    if alive:
        runner.run(["kill", "-KILL", "--", *map(str, alive)], timeout=15)
    return alive


StopOutcome = Literal["gone", "terminated", "killed", "survived"]
"""gone: nothing was running; terminated: exited on SIGTERM; killed: needed SIGKILL; survived: still there."""


def stop_group(runner: Runner, pgid: int, *, grace_s: float,
               poll: Callable[[], None] | None = None) -> StopOutcome:
    """SIGTERM the group, wait up to grace_s, then SIGKILL; say which it took."""
    if not pgid_alive(runner, pgid):
        return "gone"
    signal_group(runner, pgid, "TERM")
    signal_group(runner, pgid, "CONT")  # a stopped member (SIGSTOP, state T) handles its SIGTERM once continued
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pgid_alive(runner, pgid):
            return "terminated"
        if poll:
            poll()
        time.sleep(0.5)
    signal_group(runner, pgid, "KILL")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not pgid_alive(runner, pgid):
            return "killed"
        time.sleep(0.3)
    return "survived" if pgid_alive(runner, pgid) else "killed"


def port_free_local(host: str, port: int) -> bool:
    """Whether this machine can bind host:port right now."""
    bind_host = "0.0.0.0" if host in ("0.0.0.0", "") else host  # noqa: S104 - probing, not serving
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind_host, port))
        except OSError:
            return False
    return True


# Runs on the host with the port as its only argument (argv, never interpolated): the inodes of the sockets
# listening on that port (/proc/net/tcp{,6}), then the first pid (lowest) with an fd linked to one of them.
_HOLDER_PROGRAM = """
import os, sys
port = int(sys.argv[1])
wanted = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        with open(table) as fh:
            rows = fh.read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        f = row.split()
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port and f[9] != "0":
            wanted.add("socket:[" + f[9] + "]")
if not wanted:
    sys.exit(1)
for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    try:
        fds = os.listdir("/proc/" + pid + "/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            link = os.readlink("/proc/" + pid + "/fd/" + fd)
        except OSError:
            continue
        if link in wanted:
            try:
                with open("/proc/" + pid + "/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\\0", b" ").decode("utf-8", "replace").strip()
                if not cmd:
                    with open("/proc/" + pid + "/comm") as fh:
                        cmd = "[" + fh.read().strip() + "]"
            except OSError:
                cmd = "?"
            print(pid + "\\t" + cmd)
            sys.exit(0)
sys.exit(1)
"""
_CMDLINE_CHARS = 120


@dataclass(frozen=True)
class PortHolder:
    """The process listening on a port."""

    pid: int
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.cmdline[:_CMDLINE_CHARS] or '?'})"


def port_holder(runner: Runner, port: int, *, python: str = "python3", timeout: float = 30) -> PortHolder | None:
    """The process listening on TCP port on the runner's host (its network namespace), where visible.

    Best effort: None when nothing listens there, when the holder belongs to a user whose /proc fds we
    cannot read, or when the host has no python3.
    """
    try:
        res = runner.run([python, "-c", _HOLDER_PROGRAM, str(int(port))], timeout=timeout)
    except RunnerError:
        return None
    pid, sep, cmd = res.stdout.strip().partition("\t")
    if res.returncode != 0 or not sep or not pid.isdigit():
        return None
    return PortHolder(int(pid), cmd.replace("\n", " "))


def port_holder_local(port: int) -> str | None:
    """'pid 123 (python3 -m http.server)' for the local process listening on port, where visible."""
    holder = port_holder(LocalRunner(), port, python=sys.executable)
    return str(holder) if holder else None
