from __future__ import annotations

import base64

import pytest

from forklift.errors import NodeError, SudoRequiredError
from forklift.node import facts as F
from forklift.node.apply import (
    ApplyPlan,
    execute,
    fstab_with_swap,
    guard_unit_text,
    plan_apply,
    plan_revert,
    sysctl_text,
)
from forklift.node.facts import FileFact, SwapFileFact, UnitFact
from forklift.node.profile import GIB, load_profile
from tests.unit.node.helpers import RecordingRunner, make_facts, swap

GB10 = load_profile("gb10")


def summaries(plan: ApplyPlan) -> list[str]:
    return [s.summary for s in plan.steps]


def test_live_plan_orders_files_before_live_changes() -> None:
    plan = plan_apply(make_facts(), GB10, runs_dirs=["/runs"])
    s = summaries(plan)
    assert s[0].startswith("create ") and "/var/lib/forklift/node" in s[0]
    assert s[1].startswith("record the previous state")
    assert s.index("write /etc/sysctl.d/99-forklift-node.conf (5 settings)") < s.index("set vm.swappiness 60 -> 100")
    assert s.index("mkswap /swapfile-forklift") < s.index("swapon /swapfile-forklift")
    assert s.index("write /etc/systemd/system/forklift-guard.service") < s.index(
        "enable and start forklift-guard.service")
    assert "stop display-manager.service" not in s
    assert plan.state.sysctl["vm.swappiness"] == "60"
    assert plan.state.swap is not None and plan.state.swap.created and plan.state.swap.activated
    fstab = plan.state.file("/etc/fstab")
    assert fstab is not None and base64.b64decode(fstab.content_b64 or "") == b"UUID=x / ext4 defaults 0 1"
    conf = plan.state.file(GB10.sysctl_file)
    assert conf is not None and not conf.existed


def test_files_only_plan_skips_live_changes() -> None:
    plan = plan_apply(make_facts(root="/tmp/r"), GB10, runs_dirs=["/runs"])
    assert not any(s.live for s in plan.steps)
    assert {s.summary for s in plan.skipped_live} >= {"set vm.swappiness 60 -> 100", "swapon /swapfile-forklift"}
    assert plan.state.sysctl == {} and plan.state.swap is not None and not plan.state.swap.activated
    assert all(a.startswith("/tmp/r/") for s in plan.steps for a in s.argv if a.startswith("/") and a != "/dev/null"
               and s.argv[0] != "sh")


def test_stop_display_manager_only_when_asked() -> None:
    plan = plan_apply(make_facts(), GB10.with_stop_display_manager(True), runs_dirs=[])
    assert "stop display-manager.service" in summaries(plan)
    assert plan.state.display_manager is not None and plan.state.display_manager.was_active == "active"


def test_existing_swap_file_of_another_size_is_refused() -> None:
    facts = make_facts(swap_file=SwapFileFact(True, 8 * GIB, "600", True))
    with pytest.raises(NodeError) as exc:
        plan_apply(facts, GB10, runs_dirs=[])
    assert "already exists with 8.00 GiB" in exc.value.message and "64 GiB" in exc.value.message
    assert "--swap-gib 8" in (exc.value.fix or "")


def test_existing_file_that_is_not_swap_is_refused() -> None:
    facts = make_facts(swap_file=SwapFileFact(True, 64 * GIB, "644", False))
    with pytest.raises(NodeError, match="not a swap area"):
        plan_apply(facts, GB10, runs_dirs=[])


def test_min_free_kbytes_too_large_for_this_node_is_refused() -> None:
    facts = make_facts(meminfo={"MemTotal": 2 * GIB})
    with pytest.raises(NodeError, match="vm.min_free_kbytes=262144"):
        plan_apply(facts, GB10, runs_dirs=[])


def test_no_systemd_means_foreground_guard_note() -> None:
    plan = plan_apply(make_facts(has_systemd=False, guard_unit=None, display_manager=None, init="process_api"),
                      GB10, runs_dirs=[])
    assert not any("forklift-guard.service" in s for s in summaries(plan))
    assert any("no systemd" in n and "forklift node guard --foreground" in n for n in plan.notes)


def test_no_sudo_refuses_and_lists_exact_commands() -> None:
    plan = plan_apply(make_facts(uid=1000, sudo_ok=False), GB10, runs_dirs=[])
    runner = RecordingRunner()
    with pytest.raises(SudoRequiredError) as exc:
        execute(runner, plan, sudo_ok=False)
    assert runner.calls == []
    cmds = exc.value.commands
    assert "sudo sysctl -w vm.swappiness=100" in cmds
    assert "sudo swapon /swapfile-forklift" in cmds
    assert "sudo fallocate -l 68719476736 /swapfile-forklift" in cmds
    assert any(c.startswith("printf %s ") and "| sudo sh -c" in c and c.endswith("/etc/fstab 644 0:0")
               for c in cmds)


def test_execute_prefixes_sudo_for_non_root() -> None:
    plan = plan_apply(make_facts(uid=1000, sudo_ok=True), GB10, runs_dirs=[])
    runner = RecordingRunner()
    execute(runner, plan, sudo_ok=True)
    assert runner.calls and all(c[:2] == ["sudo", "-n"] for c in runner.calls)


def test_applied_node_needs_nothing() -> None:
    first = plan_apply(make_facts(), GB10, runs_dirs=["/runs"])
    files = {p: FileFact(p, True, "644", "0:0", base64.b64decode(s.input or ""))
             for s in first.steps if s.argv[:2] == ("sh", "-c") and (p := s.argv[4]) != F.STATE_FILE}
    facts = make_facts(
        sysctl={k: str(v) for k, v in GB10.sysctl.items()}, swaps=(swap("/swapfile-forklift", 64),),
        swap_file=SwapFileFact(True, 64 * GIB, "600", True), files=files,
        guard_unit=UnitFact("enabled", "active"), logind=(files[F.LOGIND_DROPIN],),
    )
    again = plan_apply(facts, GB10, previous=first.state, runs_dirs=["/runs"])
    assert again.steps == ()


def test_revert_restores_recorded_bytes_and_values() -> None:
    applied = plan_apply(make_facts(), GB10, runs_dirs=[])
    after = make_facts(
        sysctl={k: str(v) for k, v in GB10.sysctl.items()}, swaps=(swap("/swapfile-forklift", 64),),
        files={F.FSTAB: FileFact(F.FSTAB, True, "644", "0:0", b"changed")},
    )
    plan = plan_revert(after, applied.state)
    s = summaries(plan)
    assert "set vm.swappiness back to 60" in s and "swapoff /swapfile-forklift" in s
    restore = next(x for x in plan.steps if x.summary == "restore /etc/fstab")
    assert base64.b64decode(restore.input or "") == b"UUID=x / ext4 defaults 0 1"
    assert "remove /swapfile-forklift" in s and "remove /etc/sysctl.d/99-forklift-node.conf" in s
    assert s.index("swapoff /swapfile-forklift") < s.index("remove /swapfile-forklift")
    assert "stop forklift-guard.service" in s and "disable forklift-guard.service" in s


def test_rendered_files() -> None:
    assert sysctl_text(GB10).splitlines()[1:] == [
        "vm.swappiness = 100", "vm.vfs_cache_pressure = 1000", "vm.min_free_kbytes = 262144",
        "vm.dirty_ratio = 5", "vm.dirty_background_ratio = 1"]
    unit = guard_unit_text("/usr/bin/python3")
    assert "Restart=on-failure" in unit and f"ExecStart=/usr/bin/python3 {F.GUARD_MODULE} --config" in unit
    assert fstab_with_swap("a b", "/s") == "a b\n/s none swap sw 0 0\n"
    assert fstab_with_swap(None, "/s") == "/s none swap sw 0 0\n"
