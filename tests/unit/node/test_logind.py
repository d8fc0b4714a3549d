"""systemd-logind RemoveIPC (issue 34): `node check` finds it from logind's own files, `node apply` turns it off with
a drop-in, `node revert` takes the drop-in back. The logind files come from a fake /etc tree on disk, read the way
``facts.gather`` reads them (main file, then *.conf drop-ins by name, /etc over /run over /usr/lib)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from forklift.node import facts as F
from forklift.node.apply import plan_apply, plan_revert
from forklift.node.checks import check_remove_ipc, run_checks
from forklift.node.facts import FileFact, logind_order, remove_ipc
from forklift.node.profile import load_profile
from tests.unit.node.helpers import make_facts

GB10 = load_profile("gb10")
SEMAPHORE_KILLER = "[Login]\nRemoveIPC=yes\n"


def tree(root: Path, files: dict[str, str]) -> tuple[FileFact, ...]:
    """Write ``files`` (node path -> text) under ``root`` and read back the logind files that exist, in logind's
    order (what gather returns, without a process)."""
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    found = [F.LOGIND_CONF] if (root / F.LOGIND_CONF.lstrip("/")).is_file() else []
    for d in F.LOGIND_DROPIN_DIRS:
        folder = root / d.lstrip("/")
        found += [f"{d}/{p.name}" for p in sorted(folder.glob("*.conf"))] if folder.is_dir() else []
    return tuple(FileFact(p, True, "644", "0:0", (root / p.lstrip("/")).read_bytes()) for p in logind_order(found))


def test_default_is_yes_and_a_commented_line_changes_nothing(tmp_path: Path) -> None:
    files = tree(tmp_path, {F.LOGIND_CONF: "[Login]\n#RemoveIPC=no\n#KillUserProcesses=no\n"})
    assert remove_ipc(files) == (True, "systemd's default")
    assert remove_ipc(()) == (True, "systemd's default")


def test_drop_ins_override_the_main_file_in_name_order_and_etc_hides_usr_lib(tmp_path: Path) -> None:
    files = tree(tmp_path, {
        F.LOGIND_CONF: "[Login]\nRemoveIPC=no\n",
        "/usr/lib/systemd/logind.conf.d/20-vendor.conf": SEMAPHORE_KILLER,
        "/etc/systemd/logind.conf.d/20-vendor.conf": "[Login]\nRemoveIPC=off\n",  # same name: /etc wins
        "/run/systemd/logind.conf.d/10-early.conf": "[Login]\nRemoveIPC=yes\n",
        "/etc/systemd/logind.conf.d/30-other.conf": "[Session]\nRemoveIPC=yes\n",  # not the [Login] section
    })
    order = [f.path for f in files]
    assert order == [F.LOGIND_CONF, "/run/systemd/logind.conf.d/10-early.conf",
                     "/etc/systemd/logind.conf.d/20-vendor.conf", "/etc/systemd/logind.conf.d/30-other.conf"]
    assert remove_ipc(files) == (False, "/etc/systemd/logind.conf.d/20-vendor.conf")


@pytest.mark.parametrize(("uid", "status"), [(1000, "fail"), (0, "warn"), (117, "warn")])
def test_check_fails_for_a_regular_login_user_and_warns_for_exempt_ones(tmp_path: Path, uid: int,
                                                                        status: str) -> None:
    files = tree(tmp_path, {F.LOGIND_CONF: SEMAPHORE_KILLER})
    result = check_remove_ipc(files, uid=uid, has_systemd=True, keep_ipc=True)
    assert result.status == status and F.LOGIND_CONF in result.summary
    assert result.fix and "node apply" in result.fix
    if status == "fail":
        assert "semaphores" in result.summary


def test_check_is_ok_once_off_and_skips_when_the_profile_leaves_it(tmp_path: Path) -> None:
    files = tree(tmp_path, {F.LOGIND_CONF: SEMAPHORE_KILLER, F.LOGIND_DROPIN: "[Login]\nRemoveIPC=no\n"})
    assert check_remove_ipc(files, uid=1000, has_systemd=True, keep_ipc=True).status == "ok"
    killer = tree(tmp_path / "b", {F.LOGIND_CONF: SEMAPHORE_KILLER})
    assert check_remove_ipc(killer, uid=1000, has_systemd=True, keep_ipc=False).status == "skip"
    assert check_remove_ipc((), uid=1000, has_systemd=False, keep_ipc=True).status == "skip"


def test_apply_writes_the_drop_in_reloads_logind_and_the_node_then_checks_ok(tmp_path: Path) -> None:
    facts = make_facts(uid=1000, logind=tree(tmp_path, {F.LOGIND_CONF: SEMAPHORE_KILLER}))
    assert {r.name: r.status for r in run_checks(facts, GB10)}["logind RemoveIPC"] == "fail"
    plan = plan_apply(facts, GB10, runs_dirs=[])
    write = next(s for s in plan.steps if s.summary.startswith(f"write {F.LOGIND_DROPIN}"))
    assert write.argv[4] == F.LOGIND_DROPIN and write.argv[5] == "644"
    content = base64.b64decode(write.input or "").decode()
    reload = next(s for s in plan.steps if "systemd-logind" in s.summary)
    assert reload.live and reload.argv == ("systemctl", "try-reload-or-restart", "systemd-logind.service")
    assert plan.steps.index(write) < plan.steps.index(reload)
    assert "/etc/systemd/logind.conf.d" in plan.state.created_dirs  # the drop-in folder is new: revert removes it

    after = tree(tmp_path, {F.LOGIND_DROPIN: content})
    assert remove_ipc(after) == (False, F.LOGIND_DROPIN)
    applied = make_facts(uid=1000, logind=after)
    assert {r.name: r.status for r in run_checks(applied, GB10)}["logind RemoveIPC"] == "ok"
    assert not any("logind" in s.summary for s in plan_apply(applied, GB10, runs_dirs=[]).steps)


def test_revert_removes_the_drop_in_and_reloads_logind_again(tmp_path: Path) -> None:
    plan = plan_apply(make_facts(logind=tree(tmp_path, {F.LOGIND_CONF: SEMAPHORE_KILLER})), GB10, runs_dirs=[])
    assert plan.state.logind_reloaded
    back = plan_revert(make_facts(), plan.state)
    summaries = [s.summary for s in back.steps]
    assert f"remove {F.LOGIND_DROPIN}" in summaries
    assert summaries.index(f"remove {F.LOGIND_DROPIN}") < summaries.index("reload systemd-logind.service")


def test_files_only_apply_writes_under_the_root_and_skips_the_reload(tmp_path: Path) -> None:
    facts = make_facts(root="/tmp/r", logind=tree(tmp_path, {F.LOGIND_CONF: SEMAPHORE_KILLER}))
    plan = plan_apply(facts, GB10, runs_dirs=[])
    write = next(s for s in plan.steps if s.summary.startswith(f"write {F.LOGIND_DROPIN}"))
    assert write.argv[4] == "/tmp/r" + F.LOGIND_DROPIN
    assert "reload systemd-logind.service" in [s.summary for s in plan.skipped_live]
    assert not plan.state.logind_reloaded


def test_a_later_drop_in_that_turns_it_back_on_is_named_not_edited(tmp_path: Path) -> None:
    files = tree(tmp_path, {F.LOGIND_DROPIN: "[Login]\nRemoveIPC=no\n",
                            "/etc/systemd/logind.conf.d/zz-site.conf": SEMAPHORE_KILLER})
    plan = plan_apply(make_facts(logind=files), GB10, runs_dirs=[])
    assert any("zz-site.conf" in n and "reads after" in n for n in plan.notes)
    assert not any(s.argv[-1:] == ("/etc/systemd/logind.conf.d/zz-site.conf",) for s in plan.steps)
