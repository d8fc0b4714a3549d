"""`down` kills what a ``--pid=host`` container leaves on the host after `docker stop` (seed 002's cleanup_ray)."""

from __future__ import annotations

from collections.abc import Sequence

from forklift import recipe as recipes
from forklift.cluster.stop import stop_all
from forklift.launch.launch_spec import Launch
from forklift.plan import for_launch
from forklift.record import RankState, RunRecord
from forklift.runner import FakeRunner

STAT = "{pid} (raylet) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"


def _record(container: str) -> RunRecord:
    plan = for_launch(recipes.load("glm-5.2-reap-3x-spark-pp3"), force=True)
    launch = Launch(ranks=[], endpoint="http://x:8000", served_name="m", model_path="/m", port=8000, runtime="docker")
    return RunRecord(name="t", run_id="abc", plan=plan, launch=launch, endpoint="http://x:8000", served_name="m",
                     ranks=[RankState(rank=0, host="node-a", container=container, log_path="/dev/null",
                                      role="ray-head", node_index=0)])


def _fake(alive_after_stop: Sequence[int], recycled: Sequence[int] = ()) -> FakeRunner:
    state = {"stopped": False}

    def stat(argv: Sequence[str]) -> str:
        pid = int(argv[1].split("/")[2])
        if state["stopped"] and pid in recycled:
            return STAT.format(pid=pid, start=99999)  # the pid now belongs to a newer, unrelated process
        if state["stopped"] and pid not in alive_after_stop:
            return ""
        return STAT.format(pid=pid, start=1000 + pid)

    fake = FakeRunner("node-a")
    fake.on(["docker", "top"], stdout="PID\n4101\n4102\n4103\n")
    fake.on(["docker", "stop"], stdout=lambda argv: state.update(stopped=True) or "")
    fake.on(lambda argv: argv[0] == "cat" and argv[1].startswith("/proc/"), stdout=stat)
    return fake


def test_processes_left_by_the_container_are_killed_by_pid_and_start_time() -> None:
    fake = _fake(alive_after_stop=[4102])
    report = stop_all(_record("forklift-abc-ray-head0"), {0: fake}, grace_s=5)
    kills = fake.ran("kill", "-KILL")
    assert [c.argv[-1] for c in kills] == ["4102"]  # only the orphan, never the pids that exited
    assert report.killed and "ray-head 0" in report.killed[0]


def test_a_clean_container_stop_kills_nothing() -> None:
    fake = _fake(alive_after_stop=[])
    report = stop_all(_record("forklift-abc-ray-head0"), {0: fake}, grace_s=5)
    assert fake.ran("kill") == [] and report.killed == []


def test_a_pid_reused_by_another_process_after_the_stop_is_left_alone() -> None:
    fake = _fake(alive_after_stop=[4102], recycled=[4103])
    report = stop_all(_record("forklift-abc-ray-head0"), {0: fake}, grace_s=5)
    assert [c.argv[-1] for c in fake.ran("kill", "-KILL")] == ["4102"]  # 4103 started later: not the container's
    assert len(report.killed) == 1
