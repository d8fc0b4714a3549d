"""The node guard: a small daemon (``python -m forklift.node.guard --config FILE``).

Each interval it

(a) reads the run records in its ``runs_dirs`` and sets ``oom_score_adj`` (default -1000) on every
    serving process of a starting or ready run on this node: the rank's PID from the record and
    that PID's descendants. It never selects processes by name;
(b) while a run on this node is loading weights (status ``starting``), drops the page cache
    (``sync``, then ``1`` into /proc/sys/vm/drop_caches) when free memory (MemFree or MemAvailable,
    per config) is below a threshold, at most once per cooldown;
(c) logs every action with the numbers that triggered it, and rewrites a JSON heartbeat that
    ``forklift node check`` reads, so a guard that is installed but not running shows as such.

This file depends on the standard library and psutil only: ``forklift node apply`` copies it to
nodes that do not have forklift installed and runs it with the node's python3.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("forklift.guard")

GIB = 1 << 30
PROTECTED_STATUSES = ("starting", "ready")
LOADING_STATUS = "starting"


@dataclass(frozen=True)
class GuardConfig:
    heartbeat: str = "/run/forklift/guard-heartbeat.json"
    runs_dirs: tuple[str, ...] = ("/run/forklift/runs",)
    node_names: tuple[str, ...] = ()
    oom_score_adj: int = -1000
    drop_metric: str = "MemAvailable"
    drop_below_bytes: int = 10 * GIB
    drop_when: str = "loading"
    drop_mode: int = 1
    cooldown_s: float = 10.0
    interval_s: float = 1.0
    drop_caches_path: str = "/proc/sys/vm/drop_caches"
    meminfo_path: str = "/proc/meminfo"

    def __post_init__(self) -> None:
        if not -1000 <= self.oom_score_adj <= 1000:
            raise ValueError(f"oom_score_adj {self.oom_score_adj} is out of range -1000..1000")
        if self.drop_metric not in ("MemFree", "MemAvailable"):
            raise ValueError(f"drop_metric {self.drop_metric!r} must be MemFree or MemAvailable")
        if self.drop_when not in ("loading", "always", "never"):
            raise ValueError(f"drop_when {self.drop_when!r} must be loading, always or never")
        if self.drop_mode not in (1, 3):
            raise ValueError(f"drop_mode {self.drop_mode} must be 1 (page cache) or 3 (also dentries and inodes)")
        if self.interval_s <= 0:
            raise ValueError("interval_s must be positive")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GuardConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown keys {unknown}; known: {sorted(known)}")
        values = dict(data)
        for key in ("runs_dirs", "node_names"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["runs_dirs"] = list(self.runs_dirs)
        data["node_names"] = list(self.node_names)
        return data


@dataclass(frozen=True)
class Target:
    """One serving process named by a run record."""

    run: str
    rank: int
    pid: int
    pgid: int | None
    status: str
    owner: int = 0
    """uid owning the record file: a record its writer could forge names only that user's processes."""


@dataclass
class GuardState:
    started_at: float = field(default_factory=time.time)
    last_drop: float = 0.0
    drops: int = 0
    last_drop_event: dict[str, Any] | None = None
    protected: dict[int, int] = field(default_factory=dict)
    """pid -> oom_score_adj this guard set (to log each change once)."""
    failures: dict[int, dict[str, Any]] = field(default_factory=dict)
    """pid -> why its oom_score_adj could not be set (logged once, reported in the heartbeat)."""


def local_names(extra: Iterable[str] = ()) -> set[str]:
    names = {"localhost", "127.0.0.1", "::1", "local", socket.gethostname(), socket.getfqdn(), *extra}
    return {n for n in names if n}


def read_targets(runs_dirs: Sequence[str], names: set[str]) -> list[Target]:
    """Ranks on this node of every run whose record is in ``runs_dirs`` (``<dir>/<run>/record.json``)."""
    out: list[Target] = []
    for folder in runs_dirs:
        base = Path(folder)
        if not base.is_dir():
            continue
        for record in sorted(base.glob("*/record.json")):
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            status = str(data.get("status", ""))
            try:
                owner = record.stat().st_uid
            except OSError:
                continue
            for rank in data.get("ranks", []) or []:
                pid = rank.get("pid") if isinstance(rank, dict) else None
                if not isinstance(pid, int) or pid <= 1 or str(rank.get("host", "localhost")) not in names:
                    continue
                pgid = rank.get("pgid")
                out.append(Target(str(data.get("name", record.parent.name)), int(rank.get("rank", 0)), pid,
                                  pgid if isinstance(pgid, int) else None, status, owner))
    return out


def read_meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """Bytes, keyed as in /proc/meminfo."""
    out: dict[str, int] = {}
    with open(path) as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def _read_adj(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/oom_score_adj").read_text().strip())
    except (OSError, ValueError):
        return None


def _write_adj(pid: int, value: int) -> None:
    Path(f"/proc/{pid}/oom_score_adj").write_text(str(value))


def serving_pids(target: Target) -> list[int]:
    """The rank's pid and its descendants, if the pid still belongs to that rank: in the recorded process group,
    and run by the user who wrote the record (or the record is root's). This guard runs as root: a record anyone
    can write must not make another user's process immune to the OOM killer."""
    try:
        proc = psutil.Process(target.pid)
        if target.pgid is None:
            log.warning("run %s rank %d: the record names pid %d without its process group; not touching it",
                        target.run, target.rank, target.pid)
            return []
        if target.owner != 0 and proc.uids().real != target.owner:
            log.warning("run %s rank %d: pid %d runs as uid %d, but uid %d wrote the record; not touching it",
                        target.run, target.rank, target.pid, proc.uids().real, target.owner)
            return []
        if os.getpgid(target.pid) != target.pgid:
            log.warning("run %s rank %d: pid %d now belongs to process group %d, not the recorded %d; "
                        "not touching it (pid reused?)", target.run, target.rank, target.pid,
                        os.getpgid(target.pid), target.pgid)
            return []
        kids = [c.pid for c in proc.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return []
    return [target.pid, *kids]


def protect(targets: Sequence[Target], value: int, state: GuardState) -> list[dict[str, Any]]:
    """Set oom_score_adj on every serving process; return what is protected now."""
    now_protected: list[dict[str, Any]] = []
    seen: set[int] = set()
    for t in targets:
        if t.status not in PROTECTED_STATUSES:
            continue
        for pid in serving_pids(t):
            if pid in seen:
                continue
            seen.add(pid)
            before = _read_adj(pid)
            if before is None:
                continue
            if before != value:
                try:
                    _write_adj(pid, value)
                except OSError as exc:
                    if pid not in state.failures:
                        hint = ("" if value >= 0 or has_cap_sys_resource() else
                                " (this guard lacks CAP_SYS_RESOURCE, needed to lower oom_score_adj below 0)")
                        log.error("run %s rank %d: cannot set oom_score_adj of pid %d to %d: %s%s", t.run, t.rank,
                                  pid, value, exc, hint)
                        state.failures[pid] = {"pid": pid, "run": t.run, "rank": t.rank,
                                               "error": f"{exc.strerror or exc}{hint}"}
                    seen.add(pid)
                    continue
                log.info("protect run %s rank %d pid %d%s: oom_score_adj %d -> %d", t.run, t.rank, pid,
                         "" if pid == t.pid else f" (child of {t.pid})", before, value)
            state.protected[pid] = value
            now_protected.append({"pid": pid, "run": t.run, "rank": t.rank, "oom_score_adj": _read_adj(pid)})
    for pid in list(state.protected):
        if pid not in seen:
            del state.protected[pid]
    for pid in list(state.failures):
        if pid not in seen:
            del state.failures[pid]
    return now_protected


def has_cap_sys_resource() -> bool:
    """Whether this process may lower oom_score_adj below 0 (containers often drop the capability)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 24 & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def maybe_drop(cfg: GuardConfig, targets: Sequence[Target], state: GuardState, now: float) -> dict[str, Any] | None:
    """Drop the page cache if the config's conditions hold; return the event (with numbers) when it did."""
    if cfg.drop_when == "never":
        return None
    # a run counts as loading while a rank it names is still its own (a stale or forged "starting" record does not
    # keep the cache dropping)
    loading = sorted({t.run for t in targets if t.status == LOADING_STATUS and serving_pids(t)})
    if cfg.drop_when == "loading" and not loading:
        return None
    before = read_meminfo(cfg.meminfo_path)
    value = before.get(cfg.drop_metric, 0)
    if value >= cfg.drop_below_bytes or now - state.last_drop < cfg.cooldown_s:
        return None
    t0 = time.monotonic()
    os.sync()
    try:
        Path(cfg.drop_caches_path).write_text(str(cfg.drop_mode))
    except OSError as exc:
        log.error("cannot drop caches (%s): %s", cfg.drop_caches_path, exc)
        state.last_drop = now
        return None
    after = read_meminfo(cfg.meminfo_path)
    state.last_drop = now
    state.drops += 1
    event = {
        "time": now, "metric": cfg.drop_metric, "value_bytes": value, "threshold_bytes": cfg.drop_below_bytes,
        "loading_runs": loading, "mode": cfg.drop_mode, "seconds": round(time.monotonic() - t0, 3),
        "before": {k: before.get(k) for k in ("MemFree", "MemAvailable", "Cached")},
        "after": {k: after.get(k) for k in ("MemFree", "MemAvailable", "Cached")},
    }
    state.last_drop_event = event
    log.info(
        "drop page cache (mode %d): %s %.2f GiB < threshold %.2f GiB%s; Cached %.2f -> %.2f GiB, "
        "MemFree %.2f -> %.2f GiB in %.2f s",
        cfg.drop_mode, cfg.drop_metric, value / GIB, cfg.drop_below_bytes / GIB,
        f" while loading {', '.join(loading)}" if loading else "",
        before.get("Cached", 0) / GIB, after.get("Cached", 0) / GIB,
        before.get("MemFree", 0) / GIB, after.get("MemFree", 0) / GIB, event["seconds"],
    )
    return event


def write_heartbeat(cfg: GuardConfig, state: GuardState, protected: list[dict[str, Any]], now: float) -> None:
    path = Path(cfg.heartbeat)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "pid": os.getpid(), "time": now, "started_at": state.started_at, "interval_s": cfg.interval_s,
        "host": socket.gethostname(), "protected": protected, "failures": list(state.failures.values()),
        "can_lower_oom_score_adj": has_cap_sys_resource(), "drops": state.drops,
        "last_drop": state.last_drop_event, "drop_when": cfg.drop_when, "drop_metric": cfg.drop_metric,
        "drop_below_bytes": cfg.drop_below_bytes, "oom_score_adj": cfg.oom_score_adj,
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def step(cfg: GuardConfig, state: GuardState, names: set[str]) -> None:
    """One pass: protect, maybe drop, heartbeat."""
    now = time.time()
    targets = read_targets(cfg.runs_dirs, names)
    protected = protect(targets, cfg.oom_score_adj, state)
    maybe_drop(cfg, targets, state, now)
    write_heartbeat(cfg, state, protected, time.time())


def run(cfg: GuardConfig, *, once: bool = False, stop: threading.Event | None = None) -> None:
    """Loop until ``stop`` is set (or one pass with ``once``); removes the heartbeat on a clean stop."""
    stop = stop or threading.Event()
    state = GuardState()
    names = local_names(cfg.node_names)
    log.info("guard started (pid %d): runs_dirs=%s oom_score_adj=%d drop %s when %s < %.2f GiB, "
             "cooldown %.0f s, interval %.1f s, heartbeat %s", os.getpid(), list(cfg.runs_dirs), cfg.oom_score_adj,
             cfg.drop_when, cfg.drop_metric, cfg.drop_below_bytes / GIB, cfg.cooldown_s, cfg.interval_s, cfg.heartbeat)
    if cfg.oom_score_adj < 0 and not has_cap_sys_resource():
        log.warning("no CAP_SYS_RESOURCE: oom_score_adj %d cannot be set below 0; serving processes stay "
                    "killable (run the guard as real root, outside a capability-dropping container)",
                    cfg.oom_score_adj)
    try:
        while True:
            step(cfg, state, names)
            if once or stop.wait(cfg.interval_s):
                break
    finally:
        if not once:
            Path(cfg.heartbeat).unlink(missing_ok=True)
            log.info("guard stopped (pid %d); heartbeat removed", os.getpid())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forklift.node.guard", description="forklift node guard")
    parser.add_argument("--config", help="JSON config written by `forklift node apply`")
    parser.add_argument("--heartbeat", help="override the heartbeat path")
    parser.add_argument("--runs-dir", action="append", default=[], help="run-record folder (repeatable)")
    parser.add_argument("--threshold-gib", type=float, help="override drop_below (GiB)")
    parser.add_argument("--drop-when", choices=["loading", "always", "never"])
    parser.add_argument("--interval", type=float, help="override interval_s")
    parser.add_argument("--once", action="store_true", help="one pass, then exit (keeps the heartbeat)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s forklift-guard %(levelname)s %(message)s")
    try:
        data: dict[str, Any] = json.loads(Path(args.config).read_text()) if args.config else {}
        if args.heartbeat:
            data["heartbeat"] = args.heartbeat
        if args.runs_dir:
            data["runs_dirs"] = args.runs_dir
        if args.threshold_gib is not None:
            data["drop_below_bytes"] = int(args.threshold_gib * GIB)
        if args.drop_when:
            data["drop_when"] = args.drop_when
        if args.interval:
            data["interval_s"] = args.interval
        cfg = GuardConfig.from_json(data)
    except (OSError, ValueError, TypeError) as exc:
        log.error("cannot start: bad config %s: %s", args.config, exc)
        return 2
    stop = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        run(cfg, once=args.once, stop=stop)
    except OSError as exc:
        log.error("guard failed: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
