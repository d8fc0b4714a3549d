"""The node operations the CLI and ``up`` call: check, apply, revert, preflight, guard.

Each takes a Runner (local or SSH) and a profile; files go under ``root`` (``/`` on a real node).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from forklift.errors import NodeError
from forklift.hardware.profiles import for_gpu, node_profile
from forklift.host.facts import probe
from forklift.node import facts as F
from forklift.node.apply import ApplyPlan, ApplyResult, NodeState, execute, load_state, plan_apply, plan_revert
from forklift.node.checks import guard_result, run_checks
from forklift.node.profile import NodeProfile, load_profile
from forklift.results import CheckResult
from forklift.runner import Runner

AUTO = "auto"


def resolve_profile(runner: Runner, name: str | None) -> NodeProfile:
    """A profile by name or path; ``auto`` (or None) picks the one the node's GPU implies (a hardware profile's
    ``node_profile`` in profiles.yaml: gb10 for a GB10), else ``default``."""
    if name and name != AUTO:
        return load_profile(name)
    gpus = probe(runner, ("gpus",)).gpus or ()
    implied = (node_profile(hw.name) for g in gpus if (hw := for_gpu(g.name)) is not None)
    return load_profile(next((p for p in implied if p), "default"))


def check(runner: Runner, profile: NodeProfile, *, root: str = "/") -> list[CheckResult]:
    """Every ``node check`` item for one node.

    Where ``apply`` chose another swap size (``--swap-gib``) for the profile's swap file, the check
    compares against the size applied.
    """
    facts = F.gather(runner, profile, root=root)
    return run_checks(facts, applied_profile(profile, load_state(facts)))


def applied_profile(profile: NodeProfile, state: NodeState | None) -> NodeProfile:
    sw = state.swap if state else None
    if sw and sw.size_bytes and profile.swap and sw.path == profile.swap.path:
        return profile.with_swap_gib(sw.size_bytes / (1 << 30))
    return profile


def plan(runner: Runner, profile: NodeProfile, *, root: str = "/",
         runs_dirs: Sequence[str] | None = None) -> tuple[ApplyPlan, bool]:
    """The apply plan for one node, and whether sudo works there."""
    facts = F.gather(runner, profile, root=root)
    return plan_apply(facts, profile, previous=load_state(facts), runs_dirs=runs_dirs), facts.sudo_ok


def apply(runner: Runner, profile: NodeProfile, *, root: str = "/", dry_run: bool = False,
          runs_dirs: Sequence[str] | None = None) -> ApplyResult:
    """Bring the node to ``profile``, recording what was there; with ``dry_run`` only plan."""
    p, sudo_ok = plan(runner, profile, root=root, runs_dirs=runs_dirs)
    if dry_run:
        return ApplyResult(p)
    return execute(runner, p, sudo_ok=sudo_ok)


def revert(runner: Runner, *, root: str = "/", dry_run: bool = False) -> ApplyResult:
    """Undo what ``apply`` recorded: files byte-identical, values as before, swap file removed."""
    facts = F.gather(runner, load_profile("default"), root=root)
    state = load_state(facts)
    if state is None:
        raise NodeError(f"{runner.host}: nothing to revert (no {F.under(root, F.STATE_FILE)})",
                        fix="`forklift node apply` records what it changes; there is no record here.")
    p = plan_revert(facts, state)
    if dry_run:
        return ApplyResult(p)
    return execute(runner, p, sudo_ok=facts.sudo_ok)


def preflight(runner: Runner, profile: NodeProfile) -> list[CheckResult]:
    """What ``up`` checks on each node before starting ranks.

    On a unified-memory profile a missing or dead guard and missing swap come back as ``warn``
    (``up --strict`` refuses on any warn); on other profiles both are ``skipped``.
    """
    facts = F.gather(runner, profile)
    profile = applied_profile(profile, load_state(facts))
    checks = run_checks(facts, profile)
    wanted = {"guard": guard_result(facts, profile), "swap": next(c for c in checks if c.name == "swap")}
    out = []
    for name, res in wanted.items():
        if not profile.unified_memory:
            out.append(CheckResult(name, "skip", f"{res.summary} (not a unified-memory node)", res.details,
                                   host=runner.host))
        elif res.status == "fail":
            out.append(CheckResult(name, "warn", res.summary, res.details, res.fix, host=runner.host))
        else:
            out.append(CheckResult(name, res.status, res.summary, res.details, res.fix, host=runner.host))
    return out


@dataclass(frozen=True)
class GuardLaunch:
    """How ``node guard`` ran the guard: as the systemd unit, or in this process."""

    mode: str
    """'systemd' or 'foreground'."""
    reason: str


def start_guard(runner: Runner, *, foreground: bool, root: str = "/") -> GuardLaunch:
    """Start the installed unit when systemd runs; otherwise say the guard must run in the foreground."""
    if foreground:
        return GuardLaunch("foreground", "--foreground asked")
    res = runner.run(["test", "-d", "/run/systemd/system"], timeout=30)
    if not res.ok:
        init = runner.run(["cat", "/proc/1/comm"], timeout=30).stdout.strip() or "?"
        return GuardLaunch("foreground", f"no systemd on {runner.host} (PID 1 is {init}): running the guard in the "
                                         "foreground; keep this process running")
    installed = runner.run(["test", "-f", F.under(root, F.GUARD_UNIT_FILE)], timeout=30).ok
    if not installed:
        raise NodeError(f"{runner.host}: {F.GUARD_UNIT} is not installed", fix="forklift node apply")
    prefix = [] if runner.run(["id", "-u"], timeout=30).stdout.strip() == "0" else ["sudo", "-n"]
    runner.run([*prefix, "systemctl", "start", F.GUARD_UNIT], timeout=60).check()
    return GuardLaunch("systemd", f"started {F.GUARD_UNIT}")


def run_guard_foreground(profile: NodeProfile, *, heartbeat: str | None = None,
                         runs_dirs: Sequence[str] | None = None, stop: threading.Event | None = None) -> None:
    """Run the guard loop in this process until ``stop`` is set (the CLI's ``node guard --foreground``)."""
    from forklift import paths
    from forklift.node import guard
    from forklift.node.apply import guard_config

    data = guard_config(profile, runs_dirs=list(runs_dirs or [str(paths.runs_dir()), "/run/forklift/runs"]),
                        node_names=[])
    if heartbeat:
        data["heartbeat"] = heartbeat
    guard.run(guard.GuardConfig.from_json(data), stop=stop)
