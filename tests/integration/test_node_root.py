"""`forklift node` for real on this machine, as root: files under a temporary root, kernel values read.

Nothing here changes a real sysctl or enables swap: apply writes under ``--root``. The guard runs for
real against processes these tests start, and really drops the page cache (allowed on this machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from forklift import node
from forklift.errors import NodeError
from forklift.host.parse import meminfo as parse_meminfo
from forklift.node import facts as F
from forklift.node.guard import has_cap_sys_resource
from forklift.runner import Completed, LocalRunner
from tests.helpers import forklift

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="node tests need root (CI runs them as root)")

GIB = 1 << 30
SWAP_GIB = 0.0625  # 64 MiB: a real swap file (fallocate, chmod, mkswap), never enabled
FSTAB_BYTES = b"UUID=1234 / ext4 defaults 0 1\n# no newline at the end"


def wait_for(cond: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, p.read_bytes() if p.is_file() else None)
    return out


def real_sysctls() -> dict[str, str]:
    return {k: Path(F.sysctl_proc_path(k)).read_text().strip() for k in F.REPORTED_SYSCTLS}


def meminfo() -> dict[str, int]:
    return parse_meminfo(Path("/proc/meminfo").read_text())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "etc" / "sysctl.d").mkdir(parents=True)
    (r / "etc" / "fstab").write_bytes(FSTAB_BYTES)
    (r / "etc" / "fstab").chmod(0o640)
    (r / "etc" / "sysctl.d" / "10-other.conf").write_text("kernel.pid_max = 4194304\n")
    return r


@pytest.fixture
def gb10() -> node.NodeProfile:
    return node.load_profile("gb10").with_swap_gib(SWAP_GIB)


def by_name(results: Sequence[node.CheckResult]) -> dict[str, node.CheckResult]:
    return {r.name: r for r in results}


# --- apply / check / revert ------------------------------------------------------------------------


def test_apply_check_revert_round_trip(root: Path, gb10: node.NodeProfile) -> None:
    before, sysctls_before = snapshot(root), real_sysctls()
    runner = LocalRunner()

    result = node.apply(runner, gb10, root=str(root))
    assert not result.plan.live and result.done

    conf = (root / "etc/sysctl.d/99-forklift-node.conf").read_text()
    assert "vm.swappiness = 100" in conf and "vm.min_free_kbytes = 262144" in conf
    swapfile = root / "swapfile-forklift"
    assert swapfile.stat().st_size == 64 << 20 and stat.S_IMODE(swapfile.stat().st_mode) == 0o600
    assert subprocess.run(["swaplabel", str(swapfile)], capture_output=True).returncode == 0  # mkswap ran
    fstab = (root / "etc/fstab").read_bytes()
    assert fstab.startswith(FSTAB_BYTES) and fstab.count(b"/swapfile-forklift none swap sw 0 0") == 1
    assert stat.S_IMODE((root / "etc/fstab").stat().st_mode) == 0o640
    unit = (root / "etc/systemd/system/forklift-guard.service").read_text()
    assert "Restart=on-failure" in unit and f"--config {F.GUARD_CONFIG}" in unit
    assert json.loads((root / "etc/forklift/guard.json").read_text())["oom_score_adj"] == -1000
    assert (root / "var/lib/forklift/node/state.json").is_file()

    checks = by_name(node.check(runner, gb10, root=str(root)))
    live = real_sysctls()
    sw = checks["sysctl vm.swappiness"]
    assert sw.details["live"] == live["vm.swappiness"] and sw.details["persisted"] == "100"
    assert sw.status == ("ok" if live["vm.swappiness"] == "100" else "warn")
    assert checks["swap"].status in ("ok", "warn") and checks["swap"].details["file_bytes"] == 64 << 20
    assert checks["guard"].status == "fail" and "installed but not running" in checks["guard"].summary

    again = node.apply(runner, gb10, root=str(root))
    assert again.plan.steps == () and again.done == []
    assert (root / "etc/fstab").read_bytes().count(b"/swapfile-forklift") == 1

    node.revert(runner, root=str(root))
    assert snapshot(root) == before  # byte-identical, same modes and owners, nothing left over
    assert real_sysctls() == sysctls_before == live
    assert str(swapfile) not in Path("/proc/swaps").read_text()
    with pytest.raises(NodeError, match="nothing to revert"):
        node.revert(runner, root=str(root))


def test_existing_swap_file_of_another_size_is_refused(root: Path, gb10: node.NodeProfile) -> None:
    other = root / "swapfile-forklift"
    other.write_bytes(b"\0" * (32 << 20))
    before = snapshot(root)
    with pytest.raises(NodeError) as exc:
        node.apply(LocalRunner(), gb10, root=str(root))
    assert "already exists with 0.03 GiB" in exc.value.message and "--swap-gib" in (exc.value.fix or "")
    assert snapshot(root) == before


def test_cli_dry_run_changes_nothing_then_apply_and_revert(root: Path) -> None:
    before = snapshot(root)
    args = ["--profile", "gb10", "--swap-gib", str(SWAP_GIB), "--root", str(root)]
    dry = forklift("node", "apply", *args, "--dry-run", "--json", timeout=120)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)[0]
    assert plan["dry_run"] and plan["done"] == [] and not plan["live"]
    assert "set vm.swappiness" in " ".join(plan["skipped_live"]) or real_sysctls()["vm.swappiness"] == "100"
    assert snapshot(root) == before

    applied = forklift("node", "apply", *args, timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert "apply done" in applied.stdout and "not done (files-only)" in applied.stdout
    check = forklift("node", "check", "localhost", "--profile", "gb10", "--root", str(root), "--json", timeout=120)
    items = {r["id"]: r for r in json.loads(check.stdout)}
    assert check.returncode == 1  # the guard is installed but not running
    assert items["guard"]["status"] == "fail" and items["sysctl vm.dirty_ratio"]["details"]["persisted"] == "5"
    reverted = forklift("node", "revert", "--root", str(root), timeout=120)
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(root) == before


def test_remove_ipc_found_in_logind_files_turned_off_and_reverted(root: Path, gb10: node.NodeProfile) -> None:
    """logind's RemoveIPC read from a fake root the way a node is read (a shell lists the drop-ins), turned off by a
    drop-in that sorts after the vendor's, and the tree back byte for byte after revert."""
    (root / "etc/systemd").mkdir(parents=True)
    (root / "etc/systemd/logind.conf").write_text("[Login]\n#RemoveIPC=yes\n")
    vendor = root / "usr/lib/systemd/logind.conf.d"
    vendor.mkdir(parents=True)
    (vendor / "50-vendor.conf").write_text("[Login]\nRemoveIPC=yes\n")
    before = snapshot(root)
    runner = LocalRunner()
    first = by_name(node.check(runner, gb10, root=str(root)))["logind RemoveIPC"]
    vendor_conf = "/usr/lib/systemd/logind.conf.d/50-vendor.conf"
    assert first.details["remove_ipc"] is True and first.details["set_by"] == vendor_conf
    assert first.details["files"] == ["/etc/systemd/logind.conf", vendor_conf]
    assert first.status == ("warn" if os.geteuid() <= F.SYSTEM_UID_MAX else "fail")

    dry = node.apply(runner, gb10, root=str(root), dry_run=True)
    assert any(s.summary.startswith(f"write {F.LOGIND_DROPIN}") for s in dry.plan.steps) and dry.done == []
    assert snapshot(root) == before

    node.apply(runner, gb10, root=str(root))
    dropin = root / F.LOGIND_DROPIN.lstrip("/")
    assert "RemoveIPC=no" in dropin.read_text() and stat.S_IMODE(dropin.stat().st_mode) == 0o644
    after = by_name(node.check(runner, gb10, root=str(root)))["logind RemoveIPC"]
    assert after.status == "ok" and after.details["set_by"] == F.LOGIND_DROPIN

    node.revert(runner, root=str(root))
    assert snapshot(root) == before


class AsNobody:
    """LocalRunner whose commands run as `nobody`: a login user without root and without sudo."""

    host = "localhost"

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        return LocalRunner().run(["runuser", "-u", "nobody", "--", *argv], timeout=timeout, env=env, input=input)

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Any:
        raise AssertionError("not used")


def test_no_sudo_prints_commands_that_work_by_hand(gb10: node.NodeProfile) -> None:
    root = Path(tempfile.mkdtemp(prefix="forklift-node-"))
    try:
        root.chmod(0o755)
        (root / "etc").mkdir(mode=0o755)
        (root / "etc" / "fstab").write_bytes(FSTAB_BYTES)
        before = snapshot(root)
        with pytest.raises(node.SudoRequiredError) as exc:
            node.apply(AsNobody(), gb10, root=str(root))
        assert snapshot(root) == before
        cmds = exc.value.commands
        assert any(c.startswith("sudo mkswap ") for c in cmds)
        # A person runs them as root (sudo is not installed here, so the shell function stands in).
        for cmd in cmds:
            res = subprocess.run(["bash", "-c", 'sudo() { "$@"; }; ' + cmd], capture_output=True, text=True)
            assert res.returncode == 0, (cmd[:200], res.stderr)
        assert (root / "etc/fstab").read_bytes().count(b"/swapfile-forklift") == 1
        # ...and forklift can undo what was done by hand, because the state file was among the commands.
        node.revert(LocalRunner(), root=str(root))
        assert snapshot(root) == before
    finally:
        subprocess.run(["rm", "-rf", "--", str(root)], check=True)


def test_preflight_warns_on_unified_memory_only() -> None:
    runner = LocalRunner()
    gb10 = {r.name: r for r in node.preflight(runner, node.load_profile("gb10"))}
    assert set(gb10) == {"guard", "swap"}
    assert gb10["guard"].status == "warn"  # no guard runs on this machine's real root
    if not Path("/proc/swaps").read_text().strip().count("\n"):
        assert gb10["swap"].status == "warn"
    default = node.preflight(runner, node.load_profile("default"))
    assert [r.status for r in default] == ["skip", "skip"]


# --- the guard, for real ------------------------------------------------------------------------------


def write_record(home: Path, name: str, status: str, pids: Sequence[int]) -> None:
    d = home / "runs" / name
    d.mkdir(parents=True, exist_ok=True)
    ranks = [{"rank": i, "host": "localhost", "pid": p, "pgid": os.getpgid(p), "log_path": "/dev/null"}
             for i, p in enumerate(pids)]
    (d / "record.json").write_text(json.dumps({"name": name, "status": status, "created_at": time.time(),
                                               "ranks": ranks}))


def start_at_adj(argv: list[str], adj: int) -> subprocess.Popen[bytes]:
    def pre() -> None:
        Path("/proc/self/oom_score_adj").write_text(str(adj))

    return subprocess.Popen(argv, start_new_session=True, preexec_fn=pre)


def adj_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def guard(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forklift.node.guard", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # each was started in its own session: pgid == its pid
        p.wait(timeout=10)


def test_guard_protects_recorded_pids_not_names(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    home = tmp_path / "home"
    rank = start_at_adj(["sh", "-c", "sleep 600 & wait"], 500)  # a rank with a child, like vLLM's EngineCore
    decoy = start_at_adj(["sh", "-c", "sleep 600 & wait"], 500)  # same name, not in any record
    procs += [rank, decoy]
    wait_for(lambda: bool(Path(f"/proc/{rank.pid}/task/{rank.pid}/children").read_text().split()), what="child")
    child = int(Path(f"/proc/{rank.pid}/task/{rank.pid}/children").read_text().split()[0])
    write_record(home, "demo", "starting", [rank.pid])
    # -1000 needs CAP_SYS_RESOURCE, which this VM's root lacks; then protect with the lowest value allowed.
    value = -1000 if has_cap_sys_resource() else 100
    cfg = tmp_path / "guard.json"
    cfg.write_text(json.dumps({"heartbeat": str(tmp_path / "hb.json"), "runs_dirs": [str(home / "runs")],
                               "oom_score_adj": value, "drop_when": "never"}))
    res = guard("--config", str(cfg), "--once")
    assert res.returncode == 0, res.stderr
    assert adj_of(rank.pid) == value and adj_of(child) == value
    assert adj_of(decoy.pid) == 500
    assert f"protect run demo rank 0 pid {rank.pid}: oom_score_adj 500 -> {value}" in res.stderr
    hb = json.loads((tmp_path / "hb.json").read_text())
    assert {p["pid"] for p in hb["protected"]} == {rank.pid, child}
    print(f"oom_score_adj: rank {rank.pid} -> {adj_of(rank.pid)}, child {child} -> {adj_of(child)}, "
          f"decoy {decoy.pid} stays {adj_of(decoy.pid)}")

    if not has_cap_sys_resource():
        # The configured -1000 cannot be set here: the guard says why, and `node check` shows it.
        cfg.write_text(json.dumps({"heartbeat": str(tmp_path / "hb.json"), "runs_dirs": [str(home / "runs")],
                                   "oom_score_adj": -1000, "drop_when": "never"}))
        res = guard("--config", str(cfg), "--once")
        assert "CAP_SYS_RESOURCE" in res.stderr and adj_of(rank.pid) == value
        failures = json.loads((tmp_path / "hb.json").read_text())["failures"]
        assert {f["pid"] for f in failures} == {rank.pid, child}

    # A stopped run is no longer protected (the guard changes nothing more).
    write_record(home, "demo", "stopped", [rank.pid])
    res = guard("--config", str(cfg), "--once")
    assert json.loads((tmp_path / "hb.json").read_text())["protected"] == []


def test_guard_drops_real_page_cache_while_loading(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    home = tmp_path / "home"
    big = tmp_path / "weights.bin"
    block = os.urandom(1 << 20)
    with big.open("wb") as fh:
        for _ in range(1536):  # 1.5 GiB
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    with big.open("rb") as fh:
        while fh.read(8 << 20):
            pass
    loader = start_at_adj(["sleep", "600"], 0)
    procs.append(loader)
    hb = tmp_path / "hb.json"
    total = meminfo()["MemTotal"]
    threshold_gib = f"{(total + GIB) / GIB:.1f}"  # above anything MemFree can be: the guard must act

    # Not loading (the run is ready): no drop, whatever the memory.
    write_record(home, "big", "ready", [loader.pid])
    res = guard("--runs-dir", str(home / "runs"), "--heartbeat", str(hb), "--threshold-gib", threshold_gib, "--once")
    assert res.returncode == 0 and json.loads(hb.read_text())["drops"] == 0

    write_record(home, "big", "starting", [loader.pid])
    cached_before = meminfo()["Cached"]
    res = guard("--runs-dir", str(home / "runs"), "--heartbeat", str(hb), "--threshold-gib", threshold_gib, "--once")
    cached_after = meminfo()["Cached"]
    assert res.returncode == 0, res.stderr
    print(f"page cache: Cached {cached_before / GIB:.2f} GiB before, {cached_after / GIB:.2f} GiB after the guard")
    assert cached_before >= GIB  # the 1.5 GiB file is in the cache
    assert cached_before - cached_after >= GIB
    event = json.loads(hb.read_text())["last_drop"]
    assert event["loading_runs"] == ["big"] and event["value_bytes"] < event["threshold_bytes"]
    assert event["before"]["Cached"] - event["after"]["Cached"] >= GIB
    assert "drop page cache (mode 1): MemAvailable" in res.stderr and "while loading big" in res.stderr


def test_guard_heartbeat_healthy_then_dead_and_unstartable(root: Path, gb10: node.NodeProfile,
                                                            tmp_path: Path) -> None:
    runner = LocalRunner()
    node.apply(runner, gb10, root=str(root))
    heartbeat = root / F.GUARD_HEARTBEAT.lstrip("/")
    daemon = subprocess.Popen([sys.executable, "-m", "forklift.node.guard", "--config",
                               str(root / F.GUARD_CONFIG.lstrip("/")), "--heartbeat", str(heartbeat),
                               "--runs-dir", str(tmp_path / "runs"), "--interval", "0.2", "--drop-when", "never"],
                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(heartbeat.is_file, what="first heartbeat")
        guard_check = by_name(node.check(runner, gb10, root=str(root)))["guard"]
        assert guard_check.status in ("ok", "warn") and guard_check.details["pid"] == daemon.pid
        assert "running (pid" in guard_check.summary
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
        assert daemon.stderr is not None
        daemon.stderr.close()
    dead = by_name(node.check(runner, gb10, root=str(root)))["guard"]
    assert dead.status == "fail" and "pid gone" in dead.summary

    # A heartbeat from a live process that stopped writing it: stale.
    heartbeat.write_text(json.dumps({"pid": os.getpid(), "time": time.time() - 600, "interval_s": 1.0}))
    stale = by_name(node.check(runner, gb10, root=str(root)))["guard"]
    assert stale.status == "fail" and "not running: last heartbeat" in stale.summary
    assert stale.details["age_s"] >= 590

    # A guard that cannot start (its config is missing) exits non-zero and leaves no heartbeat.
    heartbeat.unlink()
    res = guard("--config", str(root / "etc/forklift/missing.json"), "--heartbeat", str(heartbeat))
    assert res.returncode == 2 and "cannot start" in res.stderr and not heartbeat.exists()
    unstarted = by_name(node.check(runner, gb10, root=str(root)))["guard"]
    assert unstarted.status == "fail" and "installed but not running (no heartbeat at" in unstarted.summary
    assert "forklift node guard --foreground" in (unstarted.fix or "")  # no systemd on this machine
    node.revert(runner, root=str(root))


def test_cli_guard_without_systemd_runs_in_foreground_and_says_so(tmp_path: Path) -> None:
    if Path("/run/systemd/system").is_dir():
        pytest.skip("this host runs systemd; `node guard` would start the unit instead")
    hb = tmp_path / "hb.json"
    proc = subprocess.Popen([sys.executable, "-m", "forklift.cli.main", "node", "guard", "--profile", "default",
                             "--heartbeat", str(hb)], stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(hb.is_file, what="heartbeat of the foreground guard")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert "no systemd" in err and "running the guard in the foreground" in err
    assert proc.returncode == 0 and not hb.exists()  # a clean stop removes the heartbeat
