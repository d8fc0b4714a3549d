from __future__ import annotations

from typing import Any

from forklift.host.parse import meminfo as parse_meminfo
from forklift.node.checks import (
    check_display_manager,
    check_guard,
    check_other_guards,
    check_page_cache,
    check_swap,
    check_sysctl,
    run_checks,
)
from forklift.node.facts import FileFact, SwapFileFact, UnitFact, fstab_entries, parse_sysctl_conf
from forklift.node.profile import GIB, load_profile
from forklift.results import worst
from tests.unit.node.helpers import heartbeat, make_facts, swap

F = "/etc/sysctl.d/99-forklift-node.conf"


def test_sysctl_verdicts() -> None:
    assert check_sysctl("vm.swappiness", 100, "100", "100", file=F).status == "ok"
    assert check_sysctl("vm.swappiness", None, "60", None, file=F).status == "skip"
    fail = check_sysctl("vm.swappiness", 100, "60", None, file=F)
    assert fail.status == "fail" and fail.details["live"] == "60" and fail.fix == "forklift node apply"
    pending = check_sysctl("vm.swappiness", 100, "60", "100", file=F)
    assert pending.status == "warn" and "not active" in pending.summary
    volatile = check_sysctl("vm.swappiness", 100, "100", None, file=F)
    assert volatile.status == "warn" and "lost on reboot" in volatile.summary


def test_swap_verdicts() -> None:
    spec = load_profile("gb10").swap
    assert spec is not None
    assert check_swap(spec, (swap("/swapfile", 64),), None, None, unified_memory=True).status == "ok"
    none = check_swap(spec, (), SwapFileFact(exists=False), "", unified_memory=True)
    assert none.status == "fail" and "wants 64.0 GiB" in none.summary
    assert check_swap(spec, (), SwapFileFact(exists=False), "", unified_memory=False).status == "warn"
    configured = check_swap(spec, (), SwapFileFact(True, 64 * GIB, "600", True),
                            "/swapfile-forklift none swap sw 0 0\n", unified_memory=True)
    assert configured.status == "warn" and "not active" in configured.summary
    assert check_swap(None, (), None, None, unified_memory=True).status == "skip"


def test_guard_healthy_stale_dead_missing() -> None:
    g = load_profile("gb10").guard
    kw: dict[str, Any] = dict(heartbeat_path="/run/forklift/guard-heartbeat.json", has_systemd=True,
                              heartbeat_error=None)
    ok = check_guard(g, installed=True, unit=UnitFact("enabled", "active"),
                     heartbeat=heartbeat(0.5, protected=[{"pid": 7}], drops=2), **kw)
    assert ok.status == "ok" and "1 processes protected" in ok.summary and ok.details["drops"] == 2
    stale = check_guard(g, installed=True, unit=UnitFact("enabled", "active"), heartbeat=heartbeat(60), **kw)
    assert stale.status == "fail" and "60 s ago" in stale.summary
    dead = check_guard(g, installed=True, unit=UnitFact("enabled", "failed"), heartbeat=heartbeat(0.5, alive=False),
                       **kw)
    assert dead.status == "fail" and "pid gone" in dead.summary and "journalctl" in (dead.fix or "")
    cannot_start = check_guard(g, installed=True, unit=UnitFact("enabled", "failed"), heartbeat=None,
                               heartbeat_path="/run/hb", has_systemd=True, heartbeat_error="no heartbeat at /run/hb")
    assert cannot_start.status == "fail" and "installed but not running" in cannot_start.summary
    assert "unit failed" in cannot_start.summary
    missing = check_guard(g, installed=False, unit=UnitFact("not-found", "inactive"), heartbeat=None, **kw)
    assert missing.status == "fail" and missing.summary == "not installed"
    optional = check_guard(load_profile("default").guard, installed=False, unit=None, heartbeat=None, **kw)
    assert optional.status == "skip"


def test_guard_without_systemd_says_foreground() -> None:
    res = check_guard(load_profile("gb10").guard, installed=True, unit=None, heartbeat=None, heartbeat_path="/h",
                      has_systemd=False, heartbeat_error="no heartbeat at /h")
    assert res.status == "fail" and "forklift node guard --foreground" in (res.fix or "")


def test_guard_that_cannot_protect_warns() -> None:
    hb = heartbeat(0.2, failures=[{"pid": 9, "error": "Permission denied (lacks CAP_SYS_RESOURCE)"}])
    res = check_guard(load_profile("gb10").guard, installed=True, unit=None, heartbeat=hb, heartbeat_path="/h",
                      has_systemd=False, heartbeat_error=None)
    assert res.status == "warn" and "CAP_SYS_RESOURCE" in res.summary


def test_display_manager_page_cache_other_guards() -> None:
    dm = load_profile("gb10").display_manager
    assert check_display_manager(dm, UnitFact("enabled", "active"), unified_memory=True).status == "warn"
    assert check_display_manager(dm, UnitFact("enabled", "inactive"), unified_memory=True).status == "ok"
    assert check_display_manager(dm, None, unified_memory=True).status == "skip"
    mem = {"MemTotal": 100 * GIB, "MemFree": 10 * GIB, "Cached": 60 * GIB}
    assert check_page_cache(mem, warn_fraction=0.25, unified_memory=True).status == "warn"
    assert check_page_cache(mem, warn_fraction=0.25, unified_memory=False).status == "ok"
    assert check_other_guards(()).status == "ok"
    found = check_other_guards(((812, "earlyoom"),))
    assert found.status == "warn" and "earlyoom (pid 812)" in found.summary


def test_run_checks_covers_every_item() -> None:
    results = run_checks(make_facts(), load_profile("gb10"))
    names = [r.name for r in results]
    assert names[:5] == ["sysctl vm.swappiness", "sysctl vm.vfs_cache_pressure", "sysctl vm.min_free_kbytes",
                         "sysctl vm.dirty_ratio", "sysctl vm.dirty_background_ratio"]
    assert names[5:] == ["swap", "guard", "display manager", "page cache", "other OOM guards", "logind RemoveIPC"]
    assert all(r.host == "spark1" for r in results)
    assert worst(results) == "fail"


def test_run_checks_reads_persisted_file() -> None:
    conf = FileFact(F, True, "644", "0:0", b"vm.swappiness = 100\n")
    facts = make_facts(files={F: conf})
    res = next(r for r in run_checks(facts, load_profile("gb10")) if r.name == "sysctl vm.swappiness")
    assert res.status == "warn" and res.details["persisted"] == "100"


def test_parsers() -> None:
    mem = parse_meminfo("MemTotal:       24684000 kB\nHugePages_Total:       0\n")
    assert mem == {"MemTotal": 24684000 * 1024, "HugePages_Total": 0}
    assert parse_sysctl_conf("# c\nvm.swappiness=10\n vm/dirty_ratio = 5\n-vm.x = 1\n") == {
        "vm.swappiness": "10", "vm.dirty_ratio": "5", "vm.x": "1"}
    fstab = "/swapfile none swap sw 0 0\n#/swapfile-forklift none swap sw 0 0\n/swapfile-forklift none swap sw 0 0"
    assert fstab_entries(fstab, "/swapfile-forklift") == ["/swapfile-forklift none swap sw 0 0"]
