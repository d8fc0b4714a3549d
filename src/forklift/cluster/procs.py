"""Process and port facts on a host, through a Runner (works the same locally and over SSH)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import psutil

from forklift.cluster.runner import Runner


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


def stop_group(runner: Runner, pgid: int, *, grace_s: float, poll: Callable[[], None] | None = None) -> bool:
    """SIGTERM the group, wait up to grace_s, then SIGKILL. Returns True when nothing remains."""
    if not pgid_alive(runner, pgid):
        return True
    signal_group(runner, pgid, "TERM")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pgid_alive(runner, pgid):
            return True
        if poll:
            poll()
        time.sleep(0.5)
    signal_group(runner, pgid, "KILL")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not pgid_alive(runner, pgid):
            return True
        time.sleep(0.3)
    return not pgid_alive(runner, pgid)


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


def port_holder_local(port: int) -> str | None:
    """'pid 123 (python3 -m http.server)' for the local process listening on port, where visible."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, PermissionError):
        return None
    for c in conns:
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
            try:
                proc = psutil.Process(c.pid)
                cmd = " ".join(proc.cmdline())[:120] or proc.name()
            except psutil.Error:
                cmd = "?"
            return f"pid {c.pid} ({cmd})"
    return None
