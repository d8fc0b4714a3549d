"""Measured paths kept under ``$FORKLIFT_HOME/net/links.json`` so that ``up``'s preflight can warn about a link
``net check`` found degraded without measuring again. Keyed by source host, peer host, peer address and tool."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forklift import paths
from forklift.results import CheckResult

MAX_AGE_S = 7 * 24 * 3600.0


def links_file() -> Path:
    return paths.home() / "net" / "links.json"


def key(src: str, dst: str, ip: str, tool: str) -> str:
    return f"{src}|{dst}|{ip}|{tool}"


def load() -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(links_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(results: Iterable[CheckResult]) -> None:
    """Record every bandwidth verdict (their details name src, dst, ip and tool) with the time measured."""
    data = load()
    now = time.time()
    for r in results:
        d = r.details
        if {"src", "dst", "ip", "tool"} <= set(d):
            data[key(d["src"], d["dst"], d["ip"], d["tool"])] = {"status": r.status, "summary": r.summary,
                                                                  "gbit": d.get("gbit"), "at": now}
    path = links_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def recent(src: str, dst: str, ip: str, *, max_age_s: float = MAX_AGE_S) -> list[dict[str, Any]]:
    """What ``net check`` last measured on that path (any tool), if it is recent enough."""
    now = time.time()
    out = []
    for tool in ("iperf3", "ib_write_bw"):
        entry = load().get(key(src, dst, ip, tool))
        if entry and now - float(entry.get("at", 0)) <= max_age_s:
            out.append({**entry, "tool": tool})
    return out
