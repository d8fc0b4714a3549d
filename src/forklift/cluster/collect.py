"""Everything ``forklift doctor RUN`` reads about a run, gathered from every node in one fan-out.

Per rank: the end of its log (NCCL's debug output lands there when network.nccl_debug is set). Per node:
the kernel log (``dmesg``; ``journalctl -k`` where dmesg is refused) for OOM-killer and NVRM/Xid lines,
Ray's logs under /tmp/ray/session_latest/logs (runs with parallel.backend ray; on the host and inside each
rank's container), and
/proc/meminfo. A node that does not answer becomes a line saying so: doctor reads that too (a node
that OOM'd often still pings but its sshd is gone). Nothing here interprets the text; doctor does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from forklift.errors import ForkliftError
from forklift.host.facts import probe
from forklift.record import RankState, RunRecord
from forklift.runner import Runner, fan_out

RANK_LOG_BYTES = 64 << 20
KERNEL_LINES = 4000
RAY_LINES = 300
RAY_BYTES = 4 << 20
TIMEOUT_S = 60.0
SINCE_SLACK_S = 60.0
RAY_DIR = "/tmp/ray/session_latest/logs"
# A fixed script (no values are interpolated into it): the last lines of Ray's own logs and each worker's
# stderr, each preceded by a header naming the file. $1 is the line count, $2 the byte cap.
RAY_SCRIPT = (
    'd=' + RAY_DIR + '; [ -d "$d" ] || exit 0; '
    'for f in "$d"/raylet.out "$d"/raylet.err "$d"/gcs_server.out "$d"/gcs_server.err "$d"/monitor.log '
    '"$d"/worker-*.err "$d"/python-core-worker-*.log; do '
    '[ -f "$f" ] && { echo "==> $f <=="; tail -n "$1" "$f"; }; done | head -c "$2"'
)


@dataclass(frozen=True)
class Piece:
    """One text gathered from one node: a rank's log, its kernel log, Ray's logs, its memory figures."""

    host: str
    label: str
    text: str
    path: str | None = None


@dataclass
class Collection:
    pieces: list[Piece] = field(default_factory=list)
    mem_available: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per host: (MemAvailable, MemTotal) in bytes."""
    unreachable: dict[str, str] = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return sorted({p.host for p in self.pieces} | set(self.unreachable))

    def read(self) -> dict[str, list[str]]:
        """Per host, what was read (a kernel log with nothing since the run started still counts)."""
        out: dict[str, list[str]] = {}
        for p in self.pieces:
            out.setdefault(p.host, []).append(p.label)
        return out


_DMESG_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)[,.]\d+([+-]\d\d:?\d\d)")
_DMESG_TIME = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]")


def _line_time(line: str) -> float | None:
    """Epoch seconds of a ``dmesg --time-format=iso`` line (its own UTC offset), or of a ``dmesg -T`` line (read in
    this machine's zone: only right when the node shares it, which is why forklift asks for ISO)."""
    m = _DMESG_ISO.match(line)
    if m:
        offset = m.group(2) if ":" in m.group(2) else f"{m.group(2)[:3]}:{m.group(2)[3:]}"
        return datetime.fromisoformat(m.group(1) + offset).timestamp()
    m = _DMESG_TIME.match(line)
    if m:
        try:
            return time.mktime(time.strptime(m.group(1).replace("  ", " "), "%a %b %d %H:%M:%S %Y"))
        except ValueError:
            return None
    return None


def since_filter(lines: list[str], since: float | None) -> list[str]:
    """Kernel lines from ``since`` (epoch seconds) on. A line without a readable time continues the message before
    it (the kernel indents a message's further lines) and shares its fate; one before any timed line is kept."""
    if since is None:
        return lines
    out = []
    keep = True
    for line in lines:
        at = _line_time(line)
        if at is not None:
            keep = at >= since
        if keep:
            out.append(line)
    return out


def _kernel_log(runner: Runner, host: str, since: float | None) -> Piece | None:
    """The node's kernel messages since the run started (an old OOM kill is not this run's cause)."""
    res = runner.run(["dmesg", "--time-format=iso"], timeout=TIMEOUT_S)  # times with the node's own UTC offset
    label = "dmesg"
    lines = since_filter(res.stdout.splitlines(), since) if res.returncode == 0 else []
    if res.returncode != 0 or not res.stdout.strip():
        argv = ["journalctl", "-k", "-n", str(KERNEL_LINES), "--no-pager"]
        if since is not None:
            argv += ["--since", f"@{int(since)}"]
        res = runner.run(argv, timeout=TIMEOUT_S)
        label = "journalctl -k"
        lines = res.stdout.splitlines() if res.returncode == 0 else []
    if res.returncode != 0:
        return None
    return Piece(host, label, "\n".join(lines[-KERNEL_LINES:]))  # empty: read, nothing since the start


def _ray_logs(runner: Runner, host: str, containers: list[str]) -> list[Piece]:
    out: list[Piece] = []
    script = ["sh", "-c", RAY_SCRIPT, "sh", str(RAY_LINES), str(RAY_BYTES)]
    res = runner.run(script, timeout=TIMEOUT_S)
    if res.returncode == 0 and res.stdout.strip():
        out.append(Piece(host, "ray logs", res.stdout, RAY_DIR))
    for name in containers:
        res = runner.run(["docker", "exec", name, *script], timeout=TIMEOUT_S)
        if res.returncode == 0 and res.stdout.strip():
            out.append(Piece(host, f"ray logs in {name}", res.stdout, RAY_DIR))
    return out


def _node(runner: Runner, host: str, containers: list[str], *, kernel: bool, ray: bool,
          since: float | None) -> tuple[list[Piece], tuple[int, int] | None]:
    runner.run(["true"], timeout=TIMEOUT_S).check()
    pieces: list[Piece] = []
    found = probe(runner, ("memory",))
    avail, total = found.mem_available, found.mem_total
    figures = None
    if avail is not None and total is not None and "memory" not in found.unread:
        figures = (avail, total)
        pieces.append(Piece(host, "memory", f"forklift: node {host} MemAvailable {avail / 2**30:.1f} GiB of "
                                            f"MemTotal {total / 2**30:.1f} GiB"))
    if kernel:
        log = _kernel_log(runner, host, since)
        if log is not None:
            pieces.append(log)
    if ray:
        pieces.extend(_ray_logs(runner, host, containers))
    return pieces, figures


def _rank_log(runner: Runner, rank: RankState, status: str | None) -> list[Piece]:
    """The rank's log; and, while the run should be up, a line when its process is gone (a killed rank leaves
    the others waiting with no error in any log)."""
    res = runner.run(["tail", "-c", str(RANK_LOG_BYTES), rank.log_path], timeout=TIMEOUT_S)
    text = res.stdout if res.returncode == 0 else ""
    label = f"rank {rank.rank} log" if rank.role == "engine" else f"rank {rank.rank} {rank.role} log"
    out = [Piece(rank.host, label, text, rank.log_path)]
    if status in ("ready", "starting") and rank.pid and not rank.container:
        alive = runner.run(["kill", "-0", str(rank.pid)], timeout=TIMEOUT_S).returncode == 0
        if not alive:
            out.append(Piece(rank.host, f"rank {rank.rank} process",
                             f"forklift: rank {rank.rank} on {rank.host} is not running (pid {rank.pid}) while the "
                             f"run is {status}"))
    return out


def collect(record: RunRecord, runners: Mapping[int, Runner], *, kernel: bool = True, ray: bool = True,
            since: float | None = None) -> Collection:
    """Every rank's log and every node's kernel log (from ``since``, default: the run's start less a minute),
    Ray logs and memory; never raises for one node."""
    if since is None and getattr(record, "created_at", None):
        since = float(record.created_at) - SINCE_SLACK_S
    ray = ray and record.recipe.parallel.backend == "ray"  # another tool's Ray session is not this run's
    nodes = record.recipe.nodes
    hosts = {i: n.host for i, n in enumerate(nodes)}
    containers: dict[int, list[str]] = {i: [] for i in hosts}
    for r in record.ranks:
        if r.container and r.node in containers:
            containers[r.node].append(r.container)
    gathered = fan_out(((i, i) for i in hosts if i in runners),
                       lambda i: _node(runners[i], hosts[i], containers[i], kernel=kernel, ray=ray, since=since))
    out = Collection()
    for i, exc in gathered.errors.items():
        message = exc.message if isinstance(exc, ForkliftError) else str(exc)
        out.unreachable[hosts[i]] = message
        out.pieces.append(Piece(hosts[i], "ssh", f"forklift: node {hosts[i]} unreachable over ssh: {message}"))
    for i in sorted(gathered.results):
        pieces, figures = gathered.results[i]
        out.pieces.extend(pieces)
        if figures:
            out.mem_available[hosts[i]] = figures
    reachable = [r for r in record.ranks if r.node in gathered.results]
    status = getattr(record, "status", None)
    logs = fan_out(((k, r) for k, r in enumerate(reachable)), lambda r: _rank_log(runners[r.node], r, status))
    for k in sorted(logs.results):
        out.pieces.extend(logs.results[k])
    for k, exc in sorted(logs.errors.items()):  # a log that could not be read is said, not dropped
        rank = reachable[k]
        out.pieces.append(Piece(rank.host, f"rank {rank.rank} log", f"forklift: could not read {rank.log_path} on "
                                f"{rank.host}: {exc}", rank.log_path))
    return out
