"""A detached copy job must not outlive a watcher that failed or was interrupted."""

from __future__ import annotations

import threading
import time

import pytest

from forklift.distribution import copy, jobs
from forklift.distribution.modelfiles import Listing
from forklift.distribution.transfer import Site
from forklift.errors import TransferError
from forklift.runner import LocalRunner


def test_a_failing_watcher_stops_the_detached_job(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = LocalRunner()
    started: list[jobs.Job] = []

    def fake_rsync(*_a: object, **_k: object) -> jobs.Job:
        job = jobs.start(runner, jobs.new_folder(runner, "rsync-test"), ["sleep", "120"])
        started.append(job)
        return job

    def failing_wait(*_a: object, **_k: object) -> None:
        assert jobs.running(started[0])
        raise TransferError("node-b: unreachable while watching", host="node-b")

    monkeypatch.setattr(copy, "start_rsync", fake_rsync)
    monkeypatch.setattr(copy, "_wait_rsync", failing_wait)
    monkeypatch.setattr(copy, "landed", lambda *_a: {})
    site = Site(host="local", runner=runner, path="/tmp/forklift-test-jobs-stop", node=None)
    with pytest.raises(TransferError, match="unreachable"):
        copy._send("rsync", site, site, ["f"], Listing("/tmp/src", sizes={"f": 1}), None, copy.CopyOptions(),
                   threading.Event())
    assert started and not jobs.running(started[0])


def test_stop_quietly_leaves_a_finished_job_alone() -> None:
    runner = LocalRunner()
    job = jobs.start(runner, jobs.new_folder(runner, "done-test"), ["true"])
    for _ in range(50):
        if not jobs.running(job):
            break
        time.sleep(0.1)
    jobs.read(job)
    jobs.stop_quietly(job)  # nothing to stop; no error
    jobs.remove(job)
