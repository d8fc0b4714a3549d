"""The memory gate as the supervisor runs it: a node whose MemAvailable does not come back blocks the restart with
a message naming the node, both figures and the margin (nodes answered by a FakeRunner; the clock is fake)."""

from __future__ import annotations

from forklift.errors import SupervisorGaveUpError
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord
from forklift.record.supervisor import SupervisorState, load_state, read_events, save_state
from forklift.runner.fake import FakeRunner
from forklift.supervise import Supervisor
from tests.helpers import launch_of

GIB = 1 << 30


def _meminfo(available_gib: float) -> str:
    return f"MemTotal: {128 * 1024 * 1024} kB\nMemAvailable: {int(available_gib * 1024 * 1024)} kB\n"


def _supervisor(available: list[float], *sets: str) -> tuple[Supervisor, FakeRunner]:
    plan = for_launch(resolve("default", ["supervise.memory_wait_s=6", "supervise.memory_margin_gib=2", *sets]),
                      force=True)
    RunRecord(name="gate", run_id="abc", plan=plan, launch=launch_of("default", "/m", run_id="abc"),
              endpoint="http://127.0.0.1:8000", served_name="smollm2").save()
    save_state(SupervisorState(name="gate", baseline_mem_available={"localhost": 100 * GIB}))
    figures = iter(available)
    runner = FakeRunner().on(["cat", "/proc/meminfo"], stdout=lambda argv: _meminfo(next(figures)))
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    return Supervisor("gate", runners={0: runner}, sleep=sleep, clock=lambda: now[0]), runner


def test_memory_that_comes_back_within_the_wait_lets_the_restart_go() -> None:
    sup, runner = _supervisor([80, 90, 99], "supervise.memory_check=always")
    assert sup.memory_gate() is None
    assert len(runner.ran("cat", "/proc/meminfo")) == 3


def test_memory_that_stays_away_blocks_the_restart_and_says_why() -> None:
    sup, _ = _supervisor([60, 61, 62, 63, 64, 65], "supervise.memory_check=always")
    short = sup.memory_gate()
    assert short == "localhost: MemAvailable 63.0 GiB, 100.0 GiB before the start (margin 2 GiB)"
    err = sup.give_up(f"refusing to restart: memory did not come back within 6 s: {short}")
    assert isinstance(err, SupervisorGaveUpError) and err.exit_code == 3 and "63.0 GiB" in err.message
    state = load_state("gate")
    assert state is not None and state.state == "gave-up" and "refusing to restart" in (state.gave_up or "")
    assert [e["kind"] for e in read_events("gate")] == ["give-up"]


def test_auto_reads_only_unified_memory_nodes() -> None:
    """Host memory is the engine's memory on GB10 and on CPU (`hardware: cpu` is unified); a discrete GPU's
    memory is `down`'s own check."""
    sup, runner = _supervisor([10], "supervise.memory_check=auto", "nodes.0.hardware=h100")
    assert sup.memory_gate() is None and not runner.calls
    spark, runner = _supervisor([10, 10, 10, 10, 10], "supervise.memory_check=auto", "nodes.0.hardware=gb10")
    assert spark.memory_gate() is not None and runner.calls


def test_never_skips_the_gate_even_on_unified_memory() -> None:
    sup, runner = _supervisor([10], "supervise.memory_check=never", "nodes.0.hardware=gb10")
    assert sup.memory_gate() is None and not runner.calls


def test_after_a_reboot_the_pids_recorded_on_that_node_are_forgotten_not_signalled() -> None:
    """A rebooted node's recorded pids belong to whatever runs there now: the record keeps no pid for them (so the
    `down` before the restart signals nothing there) and says stopped."""
    from forklift.record import RankState, load, save_status

    sup, _ = _supervisor([100])
    record = load("gate")
    record.ranks = [RankState(rank=0, host="localhost", pid=321, pgid=321, log_path="/x/rank0.log")]
    save_status(record, "ready")
    state = load_state("gate")
    assert state is not None
    state.boot_ids = {"localhost": "boot-before"}
    save_state(state)
    runner = FakeRunner().on(["cat", "/proc/sys/kernel/random/boot_id"], stdout="boot-after\n")
    sup = Supervisor("gate", runners={0: runner}, sleep=lambda s: None)
    sup.after_reboot()
    after = load("gate")
    assert after.status == "stopped" and after.ranks[0].pid is None and after.ranks[0].pgid is None
    same = FakeRunner().on(["cat", "/proc/sys/kernel/random/boot_id"], stdout="boot-before\n")
    save_status(record, "ready")  # the record as it was, with its pids
    Supervisor("gate", runners={0: same}, sleep=lambda s: None).after_reboot()
    assert load("gate").ranks[0].pgid == 321  # no reboot: nothing forgotten
