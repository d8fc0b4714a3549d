"""Which failures the supervisor acts on at once: a rank whose process is gone (the whole run dead, or one rank of
several: a pp=2 worker) at once; a run whose ranks all live but whose /health fails only after a second probe
(``status`` answered by a stub; the clock and sleep are fake)."""

from __future__ import annotations

import pytest

from forklift.cluster.down import StatusResult
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord, load
from forklift.runner.fake import FakeRunner
from forklift.supervise import Supervisor, loop
from tests.helpers import launch_of


def _supervisor(monkeypatch: pytest.MonkeyPatch, answers: list[tuple[str, list[int], list[str]]],
                ) -> tuple[Supervisor, list[float]]:
    RunRecord(name="cf", run_id="abc", plan=for_launch(resolve("default", []), force=True),
              launch=launch_of("default", "/m", run_id="abc"),
              endpoint="http://127.0.0.1:8000", served_name="smollm2", status="ready").save()

    def status(record: RunRecord, runners: object) -> StatusResult:
        state, dead, problems = answers.pop(0)
        return StatusResult(name="cf", status=state, endpoint=record.endpoint, served_name="smollm2",
                            alive_ranks=[0, 1][: 2 - len(dead)], dead_ranks=dead, healthy=state == "ready",
                            vllm_version=None, record=load("cf"), problems=problems)

    monkeypatch.setattr(loop, "status", status)
    slept: list[float] = []
    return Supervisor("cf", runners={0: FakeRunner()}, sleep=slept.append, clock=lambda: 0.0), slept


def test_a_gone_worker_rank_is_acted_on_without_a_second_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    sup, slept = _supervisor(monkeypatch, [("degraded", [1], ["rank 1 on node-b: pid 77 is gone"])])
    cause = sup.confirmed(sup.check())
    assert cause == "degraded: rank 1 on node-b: pid 77 is gone" and slept == []


def test_a_failing_health_with_every_rank_alive_is_probed_again_first(monkeypatch: pytest.MonkeyPatch) -> None:
    unhealthy: tuple[str, list[int], list[str]] = ("degraded", [], ["http://127.0.0.1:8000/health does not answer"])
    sup, slept = _supervisor(monkeypatch, [unhealthy, unhealthy])
    cause = sup.confirmed(sup.check())
    assert cause is not None and "health does not answer" in cause and slept == [5.0]
