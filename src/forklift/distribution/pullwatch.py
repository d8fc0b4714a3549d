"""Watch the Hub pull running on each node: read its JSON events, report progress, stop it if forklift stops."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from forklift.distribution import jobs
from forklift.distribution.transfer import Progress, ProgressFn, Rate

POLL_S = 1.0
LIVENESS_EVERY = 5
"""Polls between two checks that the process still runs (each is one command on the node)."""


@dataclass
class NodePull:
    """One node: where its files went, how many bytes came from the Hub and how fast."""

    host: str
    dest: str
    layout: str
    """'dir' (a model directory) or 'cache' (the node's Hugging Face cache, where vLLM finds a hub id)."""
    files: list[str]
    bytes: int
    downloaded: int = 0
    """Bytes fetched from the Hub by this node (a resumed file counts only its rest)."""
    present: int = 0
    """Files that were already there and verified (not downloaded again)."""
    verified: int = 0
    """Files whose size and sha256 (or git blob id) match the Hub's listing."""
    seconds: float | None = None
    via: str | None = None
    """The node its files were copied from (when one node pulled, then fanned out)."""
    xet: bool | None = None
    """Whether the node's huggingface_hub can use hf_xet (files the Hub serves through Xet then go that way)."""
    error: str | None = None

    @property
    def mb_s(self) -> float | None:
        return self.downloaded / self.seconds / 1e6 if self.downloaded and self.seconds else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "mb_s": None if self.mb_s is None else round(self.mb_s, 2)}


@dataclass
class PullJob:
    index: int
    job: jobs.Job
    item: NodePull
    started: float | None = None
    finished: bool = False


def _apply(p: PullJob, event: dict[str, Any], rate: Rate, on_progress: ProgressFn) -> None:
    kind, item = event.get("event"), p.item
    if kind == "start":
        p.started = float(event.get("t", 0))
        item.xet = bool(event.get("xet"))
    elif kind == "progress":
        done, total = int(event.get("done", 0)), int(event.get("total", item.bytes))
        on_progress(Progress(item.host, "pull", done, total, rate.update(done, float(event.get("t", 0)))))
    elif kind == "file":
        item.verified += 1
        item.downloaded += int(event.get("bytes", 0))
        item.present += event.get("status") == "present"
    elif kind == "done":
        p.finished = True
        if p.started is not None:
            item.seconds = round(float(event.get("t", 0)) - p.started, 3)
        on_progress(Progress(item.host, "pull", item.bytes, item.bytes, item.downloaded / (item.seconds or 1)))
    elif kind == "error":
        p.finished = True
        where = f" ({event['file']})" if event.get("file") else ""
        item.error = f"{event.get('message', 'failed')}{where}; log: {p.job.log}"


def _poll(p: PullJob, rate: Rate, on_progress: ProgressFn, check_alive: bool) -> None:
    for event in jobs.read(p.job):
        _apply(p, event, rate, on_progress)
    if p.finished or not check_alive or jobs.running(p.job):
        return
    for event in jobs.read(p.job):  # it may have written its last lines just before ending
        _apply(p, event, rate, on_progress)
    if not p.finished:
        p.finished = True
        tail = " | ".join(p.job.text[-3:])[-400:]
        p.item.error = f"the pull process on {p.item.host} ended without a result: {tail or 'no output'}; " \
                       f"log: {p.job.log}"


def watch(pulls: Mapping[int, PullJob], on_progress: ProgressFn) -> None:
    """Until every node's pull has ended; on any interruption (Ctrl-C included) stop the ones still running.
    Finished jobs' folders are removed when they succeeded (a failed one keeps its log)."""
    rates = {i: Rate() for i in pulls}
    polls = 0
    try:
        while not all(p.finished for p in pulls.values()):
            for i, p in pulls.items():
                if not p.finished:
                    _poll(p, rates[i], on_progress, polls % LIVENESS_EVERY == LIVENESS_EVERY - 1)
            polls += 1
            if not all(p.finished for p in pulls.values()):
                time.sleep(POLL_S)
    except BaseException:
        for p in pulls.values():
            if not p.finished:
                jobs.stop(p.job)
        raise
    for p in pulls.values():
        if p.item.error is None:
            jobs.remove(p.job)
