"""Node checks: small pure functions from facts (and a profile) to a ``CheckResult``.

Nothing here runs a command; ``forklift.node.facts.gather`` reads the node once and every check
reads those facts. The same result shape serves ``node check``, ``up``'s preflight and ``doctor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forklift.node.facts import (
    FSTAB,
    GUARD_CONFIG,
    GUARD_UNIT,
    GUARD_UNIT_FILE,
    LOGIND_DROPIN,
    OTHER_GUARDS,
    REPORTED_SYSCTLS,
    SYSTEM_UID_MAX,
    FileFact,
    Heartbeat,
    PrepFacts,
    SwapArea,
    SwapFileFact,
    UnitFact,
    fstab_entries,
    parse_sysctl_conf,
    remove_ipc,
)
from forklift.node.profile import GIB, DisplayManagerSpec, GuardSpec, NodeProfile, SwapSpec
from forklift.results import CheckResult, Status

HEARTBEAT_SLACK_S = 5.0


def _gib(n: float | int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def check_sysctl(key: str, want: int | None, live: str | None, persisted: str | None, *, file: str) -> CheckResult:
    name = f"sysctl {key}"
    ev: dict[str, Any] = {"live": live, "want": want, "persisted": persisted, "file": file}
    if want is None:
        return CheckResult(name, "skip", f"{live if live is not None else 'absent'} (profile sets no value)", ev)
    if live is None:
        return CheckResult(name, "warn", "not present on this kernel", ev)
    if live.strip() == str(want):
        if persisted != str(want):
            return CheckResult(name, "warn", f"{live} live but not persisted in {file} (lost on reboot)", ev,
                               fix="forklift node apply")
        return CheckResult(name, "ok", f"{live}", ev)
    if persisted == str(want):
        return CheckResult(name, "warn", f"{live} live, {want} persisted in {file} but not active", ev,
                           fix=f"sysctl -p {file} (or reboot)")
    return CheckResult(name, "fail", f"{live}, profile wants {want}", ev, fix="forklift node apply")


def check_swap(spec: SwapSpec | None, swaps: tuple[SwapArea, ...], swap_file: SwapFileFact | None,
               fstab: str | None, *, unified_memory: bool) -> CheckResult:
    total = sum(s.size_bytes for s in swaps)
    ev: dict[str, Any] = {"active_bytes": total, "areas": [s.path for s in swaps]}
    if spec is None:
        return CheckResult("swap", "skip", f"{_gib(total)} active (profile asks for none)", ev)
    ev.update(want_bytes=spec.size_bytes, path=spec.path, fstab_entries=len(fstab_entries(fstab, spec.path)))
    if swap_file is not None:
        ev.update(file_bytes=swap_file.size_bytes, file_mode=swap_file.mode, file_is_swap=swap_file.is_swap)
    ours_active = any(s.path == spec.path for s in swaps)
    if total >= spec.size_bytes or (ours_active and swap_file and swap_file.size_bytes == spec.size_bytes):
        return CheckResult("swap", "ok", f"{_gib(total)} active (want {_gib(spec.size_bytes)})", ev)
    if swap_file is not None and swap_file.exists and swap_file.size_bytes == spec.size_bytes and ev["fstab_entries"]:
        return CheckResult("swap", "warn", f"{spec.path} ({_gib(swap_file.size_bytes)}) configured but not active",
                           ev, fix=f"swapon {spec.path} (or reboot)")
    status: Status = "fail" if unified_memory else "warn"
    return CheckResult("swap", status, f"{_gib(total)} active, profile wants {_gib(spec.size_bytes)}", ev,
                       fix="forklift node apply (add --swap-gib N to choose the size)")


def check_guard(spec: GuardSpec, *, installed: bool, unit: UnitFact | None, heartbeat: Heartbeat | None,
                heartbeat_error: str | None, heartbeat_path: str, has_systemd: bool) -> CheckResult:
    ev: dict[str, Any] = {"installed": installed, "heartbeat_path": heartbeat_path, "systemd": has_systemd}
    if unit is not None:
        ev.update(unit_enabled=unit.enabled, unit_active=unit.active)
    if not spec.enabled:
        return CheckResult("guard", "skip", "disabled in the profile", ev)
    start_fix = (f"systemctl restart {GUARD_UNIT}; journalctl -u {GUARD_UNIT} -n 50" if has_systemd
                 else "no systemd on this host: run `forklift node guard --foreground` (keep it running)")
    if heartbeat is not None:
        interval = float(heartbeat.data.get("interval_s", spec.interval_s))
        limit = 3 * interval + HEARTBEAT_SLACK_S
        ev.update(pid=heartbeat.pid, age_s=round(heartbeat.age_s, 1), limit_s=limit,
                  protected=len(heartbeat.data.get("protected", [])), drops=heartbeat.data.get("drops", 0))
        failures = heartbeat.data.get("failures") or []
        if heartbeat.pid_alive and heartbeat.age_s <= limit and failures:
            ev["failures"] = failures
            first = failures[0]
            return CheckResult("guard", "warn", f"running (pid {heartbeat.pid}) but cannot protect {len(failures)} "
                               f"process(es): pid {first.get('pid')}: {first.get('error')}", ev,
                               fix="run the guard as root with CAP_SYS_RESOURCE (not inside a container that drops it)")
        if heartbeat.pid_alive and heartbeat.age_s <= limit:
            return CheckResult("guard", "ok", f"running (pid {heartbeat.pid}, heartbeat {heartbeat.age_s:.0f} s ago, "
                               f"{ev['protected']} processes protected, {ev['drops']} cache drops)", ev)
        why = "pid gone" if not heartbeat.pid_alive else f"limit {limit:.0f} s"
        return CheckResult("guard", "fail", f"not running: last heartbeat {heartbeat.age_s:.0f} s ago "
                           f"(pid {heartbeat.pid}, {why})", ev, fix=start_fix)
    ev["heartbeat_error"] = heartbeat_error
    if installed or (unit is not None and unit.enabled not in ("not-found", "")):
        state = f", unit {unit.active}" if unit is not None else ""
        return CheckResult("guard", "fail", f"installed but not running ({heartbeat_error}{state})", ev, fix=start_fix)
    status: Status = "fail" if spec.required else "skip"
    return CheckResult("guard", status, "not installed" + ("" if spec.required else " (optional for this profile)"),
                       ev, fix="forklift node apply")


def check_display_manager(spec: DisplayManagerSpec, unit: UnitFact | None, *, unified_memory: bool) -> CheckResult:
    if unit is None:
        return CheckResult("display manager", "skip", "no systemd: cannot tell", {})
    ev = {"unit": spec.unit, "active": unit.active, "enabled": unit.enabled}
    if unit.active in ("active", "activating"):
        if spec.stop or unified_memory:
            return CheckResult("display manager", "warn", f"{spec.unit} running (its memory competes with the model)",
                               ev, fix="forklift node apply --stop-display-manager")
        return CheckResult("display manager", "ok", f"{spec.unit} running (profile leaves it)", ev)
    return CheckResult("display manager", "ok", f"{spec.unit} {unit.active}", ev)


def check_page_cache(meminfo: Mapping[str, int], *, warn_fraction: float, unified_memory: bool) -> CheckResult:
    total = meminfo.get("MemTotal", 0)
    cached = meminfo.get("Cached", 0)
    ev: dict[str, Any] = {k: meminfo.get(k) for k in ("MemTotal", "MemFree", "MemAvailable", "Cached", "Dirty")}
    frac = cached / total if total else 0.0
    ev["cached_fraction"] = round(frac, 3)
    summary = f"{_gib(cached)} cached of {_gib(total)} ({frac:.0%}); {_gib(meminfo.get('MemFree'))} free"
    if frac > warn_fraction:
        status: Status = "warn" if unified_memory else "ok"
        return CheckResult("page cache", status, summary, ev,
                           fix="the guard drops it while weights load; "
                               "by hand: sync; echo 1 > /proc/sys/vm/drop_caches")
    return CheckResult("page cache", "ok", summary, ev)


def check_other_guards(found: tuple[tuple[int, str], ...]) -> CheckResult:
    if not found:
        return CheckResult("other OOM guards", "ok", "none running", {"found": []})
    names = sorted({name for _, name in found})
    return CheckResult(
        "other OOM guards", "warn", ", ".join(f"{n} (pid {p})" for p, n in found),
        {"found": [{"pid": p, "name": n, "why": OTHER_GUARDS[n]} for p, n in found]},
        fix="; ".join(OTHER_GUARDS[n] for n in names) + ": stop them or make sure they spare the serving ranks",
    )


def check_remove_ipc(files: tuple[FileFact, ...], *, uid: int, has_systemd: bool, keep_ipc: bool) -> CheckResult:
    """systemd-logind RemoveIPC (logind.conf(5)): when yes, a regular user's IPC objects go when the user's last
    session ends, so the ranks a login user started over SSH lose vLLM's semaphores and shared memory."""
    name = "logind RemoveIPC"
    value, source = remove_ipc(files)
    ev: dict[str, Any] = {"remove_ipc": value, "set_by": source, "files": [f.path for f in files], "uid": uid,
                          "drop_in": LOGIND_DROPIN}
    setting = f"RemoveIPC={'yes' if value else 'no'} ({source})"
    if not keep_ipc:
        return CheckResult(name, "skip", f"{setting}; the profile leaves it", ev)
    if not has_systemd and not files:
        return CheckResult(name, "skip", "no systemd-logind on this host", ev)
    if not value:
        return CheckResult(name, "ok", setting, ev)
    if uid <= SYSTEM_UID_MAX:
        who = "root" if uid == 0 else f"system user {uid}"
        return CheckResult(name, "warn", f"{setting}: spares {who} (the login user), but ranks started by a "
                           "regular user lose vLLM's semaphores when their SSH session ends", ev,
                           fix="forklift node apply (writes a logind.conf.d drop-in with RemoveIPC=no)")
    return CheckResult(name, "fail", f"{setting}: logind deletes uid {uid}'s semaphores and shared memory when "
                       "the SSH session that started a rank ends, and the rank dies", ev,
                       fix="forklift node apply (writes a logind.conf.d drop-in with RemoveIPC=no)")


def run_checks(facts: PrepFacts, profile: NodeProfile) -> list[CheckResult]:
    """Every item of ``node check`` for one node."""
    persisted = parse_sysctl_conf(facts.file(profile.sysctl_file).text)
    results = [
        check_sysctl(k, profile.sysctl.get(k), facts.sysctl.get(k), persisted.get(k), file=profile.sysctl_file)
        for k in dict.fromkeys([*REPORTED_SYSCTLS, *profile.sysctl])
    ]
    results.append(check_swap(profile.swap, facts.swaps, facts.swap_file, facts.file(FSTAB).text,
                              unified_memory=profile.unified_memory))
    results.append(guard_result(facts, profile))
    results.append(check_display_manager(profile.display_manager, facts.display_manager,
                                         unified_memory=profile.unified_memory))
    results.append(check_page_cache(facts.meminfo, warn_fraction=profile.page_cache_warn_fraction,
                                    unified_memory=profile.unified_memory))
    results.append(check_other_guards(facts.other_guards))
    results.append(check_remove_ipc(facts.logind, uid=facts.uid, has_systemd=facts.has_systemd,
                                    keep_ipc=profile.keep_ipc))
    return [CheckResult(r.name, r.status, r.summary, r.details, r.fix, host=facts.host) for r in results]


def guard_result(facts: PrepFacts, profile: NodeProfile) -> CheckResult:
    installed = facts.file(GUARD_UNIT_FILE).exists or facts.file(GUARD_CONFIG).exists
    return check_guard(profile.guard, installed=installed, unit=facts.guard_unit, heartbeat=facts.heartbeat,
                       heartbeat_error=facts.heartbeat_error, heartbeat_path=facts.heartbeat_path,
                       has_systemd=facts.has_systemd)
