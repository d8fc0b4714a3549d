"""The supervisor's decisions, pure: no clock, no I/O. The loop (``supervise.loop``) feeds them what it measured.

- ``backoff_s``: exponential wait before a restart, from the restarts already in the window.
- ``next_step``: restart (after a wait) or give up, from the restarts in the window and the failed starts in a row.
- ``deterministic``: the same finding twice in a row at startup is not retried.
- ``memory_back``: whether each node's MemAvailable came back within a margin of its pre-start figure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from forklift.recipe.schema import Supervise

GIB = 1 << 30


def backoff_s(restarts_in_window: int, cfg: Supervise) -> float:
    """``backoff_s`` before the first restart in the window, doubled for each one after, capped at
    ``backoff_max_s``."""
    if restarts_in_window <= 0:
        return min(cfg.backoff_s, cfg.backoff_max_s)
    return float(min(cfg.backoff_max_s, cfg.backoff_s * 2 ** min(restarts_in_window, 30)))


def restarts_in_window(restarts: Sequence[float], now: float, window_s: float) -> int:
    return sum(1 for t in restarts if now - t < window_s)


@dataclass(frozen=True)
class Step:
    action: Literal["restart", "give-up"]
    wait_s: float = 0.0
    why: str = ""


_NUMBERS = re.compile(r"\d+(\.\d+)?")


def finding_key(text: str) -> str:
    """A finding with its varying numbers (pids, ports, seconds) blanked, so two starts that failed the same way
    compare equal."""
    return _NUMBERS.sub("N", text.strip().lower())


def deterministic(startup_findings: Sequence[str]) -> bool:
    """True when the last two failed starts in a row said the same thing: a third start would too."""
    return len(startup_findings) >= 2 and finding_key(startup_findings[-1]) == finding_key(startup_findings[-2])


def next_step(restarts: Sequence[float], startup_findings: Sequence[str], now: float, cfg: Supervise) -> Step:
    """What to do after a failure (or a failed restart): give up when the window's cap is reached or the same
    startup finding came twice in a row; otherwise restart after the backoff."""
    if deterministic(startup_findings):
        return Step("give-up", why=f"the start failed the same way twice in a row ({startup_findings[-1]}); "
                    "a restart would fail again")
    used = restarts_in_window(restarts, now, cfg.window_s)
    if used >= cfg.max_restarts:
        return Step("give-up", why=f"{used} restart(s) within {cfg.window_s:.0f} s already (max_restarts "
                    f"{cfg.max_restarts})")
    return Step("restart", wait_s=backoff_s(used, cfg), why=f"restart {used + 1} of {cfg.max_restarts} in the window")


@dataclass(frozen=True)
class MemoryVerdict:
    ok: bool
    short: dict[str, int] = field(default_factory=dict)
    """Per host still short: bytes below (baseline - margin)."""
    unknown: list[str] = field(default_factory=list)
    """Hosts whose MemAvailable could not be read now."""

    def describe(self, baseline: Mapping[str, int], now: Mapping[str, int], margin_gib: float) -> str:
        parts = [f"{h}: MemAvailable {now.get(h, 0) / GIB:.1f} GiB, {baseline[h] / GIB:.1f} GiB before the start "
                 f"(margin {margin_gib:g} GiB)" for h in sorted(self.short)]
        parts += [f"{h}: MemAvailable could not be read" for h in self.unknown]
        return "; ".join(parts)


def memory_back(baseline: Mapping[str, int], now: Mapping[str, int | None], margin_gib: float) -> MemoryVerdict:
    """Each host with a baseline must have MemAvailable >= baseline - margin now (memory a dead run still holds,
    e.g. unified memory a crashed engine leaked, would make the next start fail or push the node into OOM)."""
    margin = int(margin_gib * GIB)
    short: dict[str, int] = {}
    unknown: list[str] = []
    for host, before in baseline.items():
        current = now.get(host)
        if current is None:
            unknown.append(host)
        elif current < before - margin:
            short[host] = before - margin - current
    return MemoryVerdict(not short and not unknown, short, sorted(unknown))


def gated_hosts(hosts: Sequence[str], unified: Sequence[bool], mode: str) -> list[str]:
    """The hosts whose MemAvailable gates a restart: unified-memory ones with ``auto``, all with ``always``."""
    if mode == "never":
        return []
    return [h for h, u in zip(hosts, unified, strict=True) if u or mode == "always"]


__all__ = ["GIB", "MemoryVerdict", "Step", "backoff_s", "deterministic", "finding_key", "gated_hosts", "memory_back",
           "next_step", "restarts_in_window"]
