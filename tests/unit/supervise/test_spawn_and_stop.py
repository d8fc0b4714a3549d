"""A fresh supervised start forgets the failed starts of the previous one (else a first failure after a
deterministic give-up would be taken for the second in a row); `down` continues a stopped process group after
SIGTERM so a hung-in-T engine handles it (FakeRunner answers `ps`)."""

from __future__ import annotations

from collections.abc import Sequence

from forklift.host.procs import stop_group
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord
from forklift.record.supervisor import SupervisorState, load_state, save_state
from forklift.runner.fake import FakeRunner
from forklift.supervise import spawn
from tests.helpers import launch_of


def test_a_fresh_supervised_start_forgets_the_previous_failed_starts() -> None:
    record = RunRecord(name="sp", run_id="abc", plan=for_launch(resolve("default", []), force=True),
                       launch=launch_of("default", "/m", run_id="abc"),
                       endpoint="http://127.0.0.1:8000", served_name="smollm2")
    record.save()
    save_state(SupervisorState(name="sp", state="gave-up", gave_up="the start failed the same way twice",
                               restarts=[1.0, 2.0], startup_findings=["model missing at /m", "model missing at /m"]))
    runner = FakeRunner()
    state = spawn(record, {"localhost": 5}, runner=runner)
    saved = load_state("sp")
    assert saved is not None and saved.startup_findings == [] and saved.gave_up is None
    assert saved.restarts == [1.0, 2.0]  # the window's restarts still count towards the cap
    assert state.pid == saved.pid and runner.calls[0].argv[-2:] == ("supervise", "sp")


def test_stop_group_continues_a_stopped_group_after_sigterm() -> None:
    answers = ["101 T\n102 Tl\n", "101 T\n102 Tl\n", "101 T\n102 Tl\n", ""]  # alive, alive (signals), then gone

    def ps(argv: Sequence[str]) -> str:
        return answers.pop(0) if answers else ""

    runner = FakeRunner().on(["ps"], stdout=ps)
    assert stop_group(runner, 101, grace_s=5) == "terminated"
    sent = [c.argv for c in runner.ran("kill")]
    assert sent[0] == ("kill", "-TERM", "--", "-101") and ("kill", "-CONT", "--", "-101") in sent
    assert sent.index(("kill", "-CONT", "--", "-101")) > 0 and not any("-KILL" in a for a in sent)
