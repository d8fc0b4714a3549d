"""`down` stops the run's supervisor first, by its recorded pid only: SIGTERM, wait, and only a process that still runs
`forklift ... supervise` is signalled (a pid reused since is left alone). A FakeRunner answers `ps`."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from forklift.cluster.down import stop_supervisor, supervisor_state
from forklift.record.supervisor import SupervisorState, load_state, save_state
from forklift.runner.fake import FakeRunner

ARGS = "S /usr/bin/python3 -m forklift.cli.main supervise demo"


def _runner(answers: list[str]) -> FakeRunner:
    def ps(argv: Sequence[str]) -> str:
        return answers.pop(0) if answers else ""

    return FakeRunner().on(["ps"], stdout=ps)


def test_a_running_supervisor_is_sent_sigterm_and_marked_stopped() -> None:
    save_state(SupervisorState(name="demo", state="watching", pid=4242, host=socket.gethostname()))
    runner = _runner([ARGS, ARGS, ARGS])  # alive at the check, and twice while waiting; then gone
    assert stop_supervisor("demo", grace_s=5, runner=runner) == "supervisor pid 4242 stopped"
    assert [c.argv for c in runner.ran("kill")] == [("kill", "-TERM", "4242")]
    state = load_state("demo")
    assert state is not None and state.state == "stopped"


def test_a_reused_pid_or_another_host_is_never_signalled() -> None:
    save_state(SupervisorState(name="demo", state="watching", pid=4242, host=socket.gethostname()))
    runner = _runner(["S /usr/sbin/sshd -D"])
    assert stop_supervisor("demo", runner=runner) is None and not runner.ran("kill")
    save_state(SupervisorState(name="demo", state="watching", pid=4242, host="another-machine"))
    runner = _runner([ARGS])
    assert supervisor_state("demo", runner)[1] is False
    assert stop_supervisor("demo", runner=runner) is None and not runner.ran("kill")


def test_the_supervisor_calling_down_itself_is_left_running() -> None:
    save_state(SupervisorState(name="demo", state="recovering", pid=os.getpid(), host=socket.gethostname()))
    runner = _runner([ARGS])
    assert stop_supervisor("demo", runner=runner) is None and not runner.ran("kill")
    state = load_state("demo")
    assert state is not None and state.state == "recovering"


def test_no_state_no_supervisor() -> None:
    assert stop_supervisor("nothing", runner=FakeRunner()) is None
