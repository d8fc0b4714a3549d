"""``forklift top``'s data: every run's ``/metrics`` and every node's facts, sampled on each tick.

A :class:`Monitor` keeps each run's pages of the last ``window_s`` seconds; a tick scrapes every run and node
(in parallel) and returns a :class:`Snapshot` whose per-run :class:`~forklift.monitor.metrics.Window` spans
from the oldest page still in the window to the newest. A run's first tick has no window yet (one page gives
no rate). ``once`` is two ticks ``interval_s`` apart. It only reads what vLLM and the nodes expose.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from forklift.cluster.stop import record_runners
from forklift.endpoint import Endpoint, normalize_url
from forklift.monitor import metrics
from forklift.monitor.nodes import NodeSample
from forklift.monitor.nodes import sample as sample_node
from forklift.record import RunRecord
from forklift.runner import Runner, fan_out


@dataclass(frozen=True)
class RunSample:
    """One run at one tick: its state from the record, and what its ``/metrics`` said."""

    name: str
    status: str
    endpoint: str
    model: str
    hosts: tuple[str, ...]
    window: metrics.Window | None
    error: str | None = None
    """Why there are no metrics (unreachable, not Prometheus text, not vLLM); None when they were read."""

    @property
    def up(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "endpoint": self.endpoint, "model": self.model,
                "hosts": list(self.hosts), "up": self.up, "error": self.error,
                "metrics": None if self.window is None else self.window.to_json()}


@dataclass(frozen=True)
class Snapshot:
    at: float
    """Wall-clock time of the tick (seconds since the epoch)."""
    runs: tuple[RunSample, ...]
    nodes: tuple[NodeSample, ...]

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "runs": [r.to_json() for r in self.runs], "nodes": [n.to_json() for n in self.nodes]}


class Monitor:
    """Scrapes ``records``' endpoints and nodes on each :meth:`tick`.

    ``transport`` reaches the servers (httpx's, or a test's), ``runners`` the nodes by host (default: the
    runners the records' recipes name), ``clock`` times the windows."""

    def __init__(self, records: Sequence[RunRecord], *, window_s: float = 60.0, timeout_s: float = 5.0,
                 transport: httpx.BaseTransport | None = None, runners: Mapping[str, Runner] | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.records = list(records)
        self.window_s = window_s
        self._clock = clock
        self._wall = wall
        self._endpoints = {r.name: Endpoint(normalize_url(r.endpoint), timeout=timeout_s, transport=transport,
                                            where=f"run '{r.name}'") for r in self.records}
        self._pages: dict[str, deque[metrics.Page]] = {r.name: deque() for r in self.records}
        self._runners: dict[str, Runner] = dict(runners) if runners is not None else _node_runners(self.records)

    def close(self) -> None:
        for ep in self._endpoints.values():
            ep.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _scrape(self, record: RunRecord) -> RunSample:
        hosts = tuple(dict.fromkeys(n.host for n in record.recipe.nodes))
        text, why = self._endpoints[record.name].metrics()
        now = self._clock()

        def sample(window: metrics.Window | None, error: str | None) -> RunSample:
            return RunSample(record.name, record.status, record.endpoint, record.served_name, hosts, window, error)

        if text is None:
            self._pages[record.name].clear()
            return sample(None, why)
        try:
            page = metrics.parse(text, at=now, model=record.served_name)
        except ValueError as exc:
            return sample(None, f"/metrics is not Prometheus text: {exc}")
        if not page.is_vllm:
            return sample(None, "/metrics has no vllm:prompt_tokens or vllm:generation_tokens counters")
        pages = self._pages[record.name]
        pages.append(page)
        while len(pages) > 2 and now - pages[1].at >= self.window_s:
            pages.popleft()  # keep the newest page at least window_s old, so the window spans the full minute
        return sample(metrics.window(pages[0], page) if len(pages) > 1 else None, None)

    def tick(self) -> Snapshot:
        runs = fan_out(((r.name, r) for r in self.records), self._scrape)
        nodes = fan_out(self._runners.items(), sample_node)
        node_samples = [nodes.results.get(h) or NodeSample(h, error=str(nodes.errors.get(h))) for h in self._runners]
        run_samples = [runs.results.get(r.name) or _failed(r, runs.errors[r.name]) for r in self.records]
        return Snapshot(at=self._wall(), runs=tuple(run_samples), nodes=tuple(node_samples))


def _failed(record: RunRecord, exc: Exception) -> RunSample:
    """A run whose scrape raised (a bug or a transport fault): shown as down with the error, the others go on."""
    return RunSample(record.name, record.status, record.endpoint, record.served_name,
                     tuple(dict.fromkeys(n.host for n in record.recipe.nodes)), None, f"{type(exc).__name__}: {exc}")


def _node_runners(records: Sequence[RunRecord]) -> dict[str, Runner]:
    """One runner per distinct node host across the runs."""
    out: dict[str, Runner] = {}
    for record in records:
        runners = record_runners(record)
        for idx, node in enumerate(record.recipe.nodes):
            out.setdefault(node.host, runners[idx])
    return out


def once(monitor: Monitor, interval_s: float = 1.0, *, sleep: Callable[[float], None] = time.sleep) -> Snapshot:
    """Two ticks ``interval_s`` apart: the second, whose windows span the interval."""
    monitor.tick()
    sleep(interval_s)
    return monitor.tick()
