"""``node apply`` and ``node revert``: an immutable plan of steps, then execution through a Runner.

Every step that changes the node first records what was there (file bytes with mode and owner,
sysctl values, swap, units) in a state file on the node (``state``), so ``revert`` puts it back exactly.
Steps are argv lists (sudo prepended when the login user is not root); a step marked ``live``
changes the running system (sysctl -w, swapon, systemctl) and is skipped when ``root`` is not ``/``:
then only files are written, under that root, and the kernel is only read. The files' text is ``file_texts``.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from forklift import paths
from forklift.errors import NodeError, SudoRequiredError
from forklift.node import facts as F
from forklift.node.facts import PrepFacts, under
from forklift.node.file_texts import LOGIND_UNIT as LOGIND_UNIT  # re-exported, with the names below
from forklift.node.file_texts import fstab_with_swap as fstab_with_swap
from forklift.node.file_texts import guard_config as guard_config
from forklift.node.file_texts import guard_module_text as guard_module_text
from forklift.node.file_texts import guard_unit_text as guard_unit_text
from forklift.node.file_texts import logind_dropin_text as logind_dropin_text
from forklift.node.file_texts import sysctl_text as sysctl_text
from forklift.node.profile import GIB, MIN_FREE_MAX_FRACTION, NodeProfile, SwapSpec
from forklift.node.state import FileRecord as FileRecord
from forklift.node.state import NodeState as NodeState
from forklift.node.state import SwapRecord as SwapRecord
from forklift.node.state import UnitRecord as UnitRecord
from forklift.runner import Runner

_WRITE = (
    'set -e; t="$1.forklift-tmp"; base64 -d > "$t"; chmod "$2" "$t"; chown "$3" "$t"; mv -f -- "$t" "$1"'
)


@dataclass(frozen=True)
class Step:
    """One command of a plan. ``argv`` never carries sudo; ``render`` and ``execute`` add it."""

    summary: str
    argv: tuple[str, ...]
    input: str | None = None
    live: bool = False
    """Changes the running system rather than a file (skipped in files-only mode)."""

    def shell(self, sudo: bool) -> str:
        """The exact command a person would type (stdin inlined as a printf pipe)."""
        cmd = shlex.join(["sudo", *self.argv] if sudo else list(self.argv))
        if self.input is None:
            return cmd
        return f"printf %s {shlex.quote(self.input)} | {cmd}"

    def display(self, sudo: bool) -> str:
        """``shell`` without the inlined content (for dry-run listings)."""
        cmd = shlex.join(["sudo", *self.argv] if sudo else list(self.argv))
        if self.input is None:
            return cmd
        return f"{cmd} < ({len(base64.b64decode(self.input))} bytes of content)"


@dataclass(frozen=True)
class ApplyPlan:
    host: str
    root: str
    live: bool
    profile: str
    sudo: bool
    """Steps need `sudo` (the login user is not root)."""
    steps: tuple[Step, ...]
    state: NodeState
    notes: tuple[str, ...] = ()
    skipped_live: tuple[Step, ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.steps)

    def commands(self) -> list[str]:
        return [s.shell(self.sudo) for s in self.steps]

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "root": self.root, "live": self.live, "profile": self.profile,
                "sudo": self.sudo, "steps": [{"summary": s.summary, "command": s.shell(self.sudo), "live": s.live}
                                             for s in self.steps],
                "skipped_live": [s.summary for s in self.skipped_live], "notes": list(self.notes)}


@dataclass
class ApplyResult:
    plan: ApplyPlan
    done: list[str] = field(default_factory=list)


# --- plan --------------------------------------------------------------------------------------------


class _Builder:
    """Collects the steps of one ``plan_apply``: file writes (recording what was there), live changes, notes."""

    def __init__(self, facts: PrepFacts, profile: NodeProfile, previous: NodeState | None) -> None:
        self.facts, self.profile = facts, profile
        self.root = facts.root
        self.live = self.root in ("", "/")
        self.state = previous.model_copy(deep=True) if previous else NodeState(
            host=facts.host, root=self.root, live=self.live, profile=profile.name)
        self.state.profile = profile.name
        self.steps: list[Step] = []
        self.live_steps: list[Step] = []
        self.notes: list[str] = []
        self.recorded = {f.path for f in self.state.files}

    def write(self, path: str, content: str, mode: str, summary: str) -> None:
        current = self.facts.file(path)
        if current.content == content.encode():
            return
        if path not in self.recorded:
            self.state.files.append(FileRecord.of(current))
            self.recorded.add(path)
        owner = current.owner if current.exists and current.owner else "0:0"
        mode = current.mode if current.exists and current.mode else mode
        b64 = base64.b64encode(content.encode()).decode()
        self.steps.append(Step(summary, ("sh", "-c", _WRITE, "forklift-write", under(self.root, path), mode, owner),
                               b64))

    def sysctl(self) -> None:
        """The persistent file, then the live values."""
        profile, facts = self.profile, self.facts
        if not profile.sysctl:
            return
        self.write(profile.sysctl_file, sysctl_text(profile), "644",
                   f"write {profile.sysctl_file} ({len(profile.sysctl)} settings)")
        for key, want in profile.sysctl.items():
            have = facts.sysctl.get(key)
            if have is None or have.strip() == str(want):
                continue
            if self.live:
                self.state.sysctl.setdefault(key, have.strip())
            self.live_steps.append(Step(f"set {key} {have.strip()} -> {want}", ("sysctl", "-w", f"{key}={want}"),
                                        live=True))

    def _swap_file(self, spec: SwapSpec) -> None:
        facts, sf, host_path = self.facts, self.facts.swap_file, under(self.root, spec.path)
        if sf is None or not sf.exists:
            self.state.swap = self.state.swap or SwapRecord(path=spec.path, created=True, activated=False,
                                                            size_bytes=spec.size_bytes)
            self.steps += [
                Step(f"create {spec.path} ({spec.size_gib:g} GiB)", ("fallocate", "-l", str(spec.size_bytes),
                                                                       host_path)),
                Step(f"chmod 600 {spec.path}", ("chmod", "600", host_path)),
                Step(f"mkswap {spec.path}", ("mkswap", host_path)),
            ]
        elif sf.size_bytes != spec.size_bytes:
            have_gib = (sf.size_bytes or 0) / GIB
            raise NodeError(
                f"{facts.host}: {spec.path} already exists with {have_gib:.2f} GiB; the profile wants "
                f"{spec.size_gib:g} GiB",
                fix=f"Keep it with `--swap-gib {have_gib:g}`, or remove it first "
                    f"(`sudo swapoff {spec.path}; sudo rm {spec.path}`) and apply again.",
            )
        elif sf.is_swap is False:
            raise NodeError(f"{facts.host}: {spec.path} exists but is not a swap area",
                            fix=f"Move {spec.path} away, or choose another path in the profile's swap.path.")
        elif sf.mode != "600":
            self.steps.append(Step(f"chmod 600 {spec.path} (was {sf.mode})", ("chmod", "600", host_path)))

    def swap(self) -> None:
        """The file (size, 0600, mkswap), one fstab entry, swapon."""
        spec = self.profile.swap
        if not spec:
            return
        self._swap_file(spec)
        fstab = self.facts.file(F.FSTAB)
        if not F.fstab_entries(fstab.text, spec.path):
            self.write(F.FSTAB, fstab_with_swap(fstab.text, spec.path), "644", f"add {spec.path} to /etc/fstab")
        if not any(s.path == spec.path for s in self.facts.swaps):
            if self.live and self.state.swap is not None:
                self.state.swap = self.state.swap.model_copy(update={"activated": True})
            elif self.live:
                self.state.swap = SwapRecord(path=spec.path, created=False, activated=True,
                                             size_bytes=spec.size_bytes)
            self.live_steps.append(Step(f"swapon {spec.path}", ("swapon", spec.path), live=True))

    def _guard_unit(self) -> None:
        unit = self.facts.guard_unit
        if unit is not None and unit.active == "active" and unit.enabled == "enabled":
            return
        if self.live and self.state.guard_unit is None:
            self.state.guard_unit = UnitRecord(name=F.GUARD_UNIT, was_enabled=unit.enabled if unit else "not-found",
                                               was_active=unit.active if unit else "inactive")
        self.live_steps += [Step("systemctl daemon-reload", ("systemctl", "daemon-reload"), live=True),
                            Step(f"enable and start {F.GUARD_UNIT}", ("systemctl", "enable", "--now", F.GUARD_UNIT),
                                 live=True)]

    def guard(self, runs_dirs: Sequence[str] | None) -> None:
        """Module, config, unit; enabled and started where systemd runs."""
        facts = self.facts
        if not self.profile.guard.enabled:
            return
        dirs = list(runs_dirs) if runs_dirs is not None else [str(paths.runs_dir()), "/run/forklift/runs"]
        names = sorted({n for n in (facts.host, facts.hostname) if n})
        cfg = guard_config(self.profile, runs_dirs=dirs, node_names=names)
        self.write(F.GUARD_MODULE, guard_module_text(), "644", f"install the guard at {F.GUARD_MODULE}")
        self.write(F.GUARD_CONFIG, json.dumps(cfg, indent=2) + "\n", "644", f"write {F.GUARD_CONFIG}")
        if not facts.guard_python_ok:
            self.notes.append(f"{facts.guard_python} cannot import psutil on {facts.host}: the guard will not start "
                              "until it can (e.g. `apt install python3-psutil`)")
        if facts.has_systemd or not self.live:
            self.write(F.GUARD_UNIT_FILE, guard_unit_text(facts.guard_python), "644", f"write {F.GUARD_UNIT_FILE}")
        if facts.has_systemd:
            self._guard_unit()
        elif self.live:
            self.notes.append(f"no systemd on {facts.host} (PID 1 is {facts.init}): the guard is not installed as a "
                              "service; run `forklift node guard --foreground` there and keep it running")

    def display_manager(self) -> None:
        """Stopped only when the profile asks."""
        spec, dm = self.profile.display_manager, self.facts.display_manager
        if not spec.stop:
            return
        if dm is None:
            self.notes.append(f"no systemd on {self.facts.host}: cannot stop a display manager")
        elif dm.active in ("active", "activating"):
            if self.live and self.state.display_manager is None:
                self.state.display_manager = UnitRecord(name=spec.unit, was_enabled=dm.enabled, was_active=dm.active)
            self.live_steps.append(Step(f"stop {spec.unit}", ("systemctl", "stop", spec.unit), live=True))

    def logind(self) -> None:
        """RemoveIPC=no as the last drop-in, then logind reloads it (reload where the unit has one, else restart:
        logind keeps its sessions across a restart)."""
        facts = self.facts
        if not self.profile.keep_ipc or not (facts.has_systemd or facts.logind or not self.live):
            return
        value, source = F.remove_ipc(facts.logind)
        if not value:
            return
        ours = F.logind_order([F.LOGIND_DROPIN, source])
        if source != F.LOGIND_DROPIN and source.endswith(".conf") and ours[-1] == source:
            self.notes.append(f"RemoveIPC=yes is set by {source}, which logind reads after {F.LOGIND_DROPIN}: "
                              f"remove the setting there (forklift does not edit files it did not write)")
        self.write(F.LOGIND_DROPIN, logind_dropin_text(), "644", f"write {F.LOGIND_DROPIN} (RemoveIPC=no)")
        if facts.has_systemd:
            if self.live:
                self.state.logind_reloaded = True
            self.live_steps.append(Step(f"reload {LOGIND_UNIT}", ("systemctl", "try-reload-or-restart", LOGIND_UNIT),
                                        live=True))

    def finish(self) -> ApplyPlan:
        """Live steps (or, files-only, a note that they were skipped), then the state record and the parent
        directories in front of everything."""
        steps, skipped = list(self.steps), []
        if self.live:
            steps += self.live_steps
        else:
            skipped = self.live_steps
            if skipped:
                self.notes.append(f"files-only under {self.root}: {len(skipped)} live change(s) not made "
                                  "(sysctl -w, swapon, systemctl); the kernel was only read")
        if steps:
            steps = self._head(steps) + steps
        return ApplyPlan(self.facts.host, self.root, self.live, self.profile.name, not self.facts.is_root,
                         tuple(steps), self.state, tuple(self.notes), tuple(skipped))

    def _head(self, steps: list[Step]) -> list[Step]:
        """Parent directories that do not exist yet are created, and recorded so revert removes them."""
        state, root = self.state, self.root
        targets = [p for p in _step_paths(steps, root)] + [F.STATE_FILE]
        missing = [d for d in F.parent_dirs(targets) if d not in self.facts.existing_dirs
                   and d not in state.created_dirs]
        state.created_dirs += missing
        state_b64 = base64.b64encode(state.model_dump_json(indent=2).encode()).decode()
        head: list[Step] = []
        if missing:
            head.append(Step(f"create {', '.join(missing)}", ("mkdir", "-p", *(under(root, d) for d in missing))))
        head.append(Step(f"record the previous state in {F.STATE_FILE}",
                         ("sh", "-c", _WRITE, "forklift-write", under(root, F.STATE_FILE), "644", "0:0"), state_b64))
        return head


def plan_apply(facts: PrepFacts, profile: NodeProfile, *, previous: NodeState | None = None,
               runs_dirs: Sequence[str] | None = None) -> ApplyPlan:
    """The steps that bring the node to ``profile`` (none when it is already there)."""
    _refuse_unsafe(facts, profile)
    build = _Builder(facts, profile, previous)
    build.sysctl()
    build.swap()
    build.guard(runs_dirs)
    build.display_manager()
    build.logind()
    return build.finish()


def _step_paths(steps: Sequence[Step], root: str) -> list[str]:
    """Node paths that steps write (for parent-directory creation)."""
    out = []
    for s in steps:
        if s.argv[:2] == ("sh", "-c") and len(s.argv) > 4:
            out.append(s.argv[4])
        elif s.argv[0] == "fallocate":
            out.append(s.argv[-1])
    prefix = root.rstrip("/")
    return [p[len(prefix):] if prefix and p.startswith(prefix + "/") else p for p in out]


def _refuse_unsafe(facts: PrepFacts, profile: NodeProfile) -> None:
    min_free = profile.sysctl.get("vm.min_free_kbytes")
    total = facts.meminfo.get("MemTotal", 0)
    if min_free is not None and total and min_free * 1024 > MIN_FREE_MAX_FRACTION * total:
        raise NodeError(
            f"{facts.host}: profile {profile.name} sets vm.min_free_kbytes={min_free} "
            f"({min_free / 1024 / 1024:.1f} GiB), over {MIN_FREE_MAX_FRACTION:.0%} of this node's "
            f"{total / GIB:.1f} GiB; the kernel would start reclaiming and OOM-killing at once",
            fix="Use a profile made for this node's memory, or lower vm.min_free_kbytes in a profile file.",
        )


# --- execution ---------------------------------------------------------------------------------------


def load_state(facts: PrepFacts) -> NodeState | None:
    fact = facts.file(F.STATE_FILE)
    if fact.content is None:
        return None
    try:
        return NodeState.model_validate_json(fact.content)
    except ValueError as exc:
        raise NodeError(f"{facts.host}: {under(facts.root, F.STATE_FILE)} is unreadable: {exc}",
                        fix="Inspect it; remove it only if you have restored the node by hand.") from exc


def execute(runner: Runner, plan: ApplyPlan, *, sudo_ok: bool) -> ApplyResult:
    """Run the plan's steps in order; stop at the first failure (the state file is already written)."""
    if plan.sudo and not sudo_ok and plan.steps:
        raise SudoRequiredError(
            f"{plan.host}: the login user is not root and `sudo -n` does not work; nothing was changed",
            host=plan.host, commands=plan.commands(),
            fix="Run these commands by hand as root (or grant passwordless sudo and run again).",
        )
    result = ApplyResult(plan)
    for s in plan.steps:
        argv = ["sudo", "-n", *s.argv] if plan.sudo else list(s.argv)
        res = runner.run(argv, timeout=600, input=base64_lines(s.input))
        if not res.ok:
            raise NodeError(
                f"{plan.host}: step '{s.summary}' failed ({res.returncode}): {res.stderr.strip()[-300:]}",
                fix="Fix the cause and run again (apply is idempotent), or `forklift node revert`.",
            )
        result.done.append(s.summary)
    return result


def base64_lines(data: str | None) -> str | None:
    if data is None:
        return None
    return "\n".join(data[i:i + 76] for i in range(0, len(data), 76)) + "\n"


def plan_revert(facts: PrepFacts, state: NodeState) -> ApplyPlan:
    """Steps that undo ``state``: live values back, files byte-identical (or gone), swap removed."""
    root = facts.root
    live = state.live and root in ("", "/")
    steps: list[Step] = []
    if live and state.display_manager and state.display_manager.was_active in ("active", "activating"):
        steps.append(Step(f"start {state.display_manager.name}", ("systemctl", "start", state.display_manager.name),
                          live=True))
    if live and state.guard_unit and facts.has_systemd:
        g = state.guard_unit
        if g.was_active != "active":
            steps.append(Step(f"stop {g.name}", ("systemctl", "stop", g.name), live=True))
        if g.was_enabled != "enabled":
            steps.append(Step(f"disable {g.name}", ("systemctl", "disable", g.name), live=True))
    if state.swap:
        sw = state.swap
        if live and sw.activated and any(s.path == sw.path for s in facts.swaps):
            steps.append(Step(f"swapoff {sw.path}", ("swapoff", sw.path), live=True))
    for key, value in state.sysctl.items() if live else ():
        if (facts.sysctl.get(key) or "").strip() != value:
            steps.append(Step(f"set {key} back to {value}", ("sysctl", "-w", f"{key}={value}"), live=True))
    for rec in reversed(state.files):
        host_path = under(root, rec.path)
        if rec.existed and rec.content_b64 is not None:
            current = facts.file(rec.path)
            same = (current.content is not None and base64.b64encode(current.content).decode() == rec.content_b64
                    and current.mode == rec.mode and current.owner == rec.owner)
            if not same:
                steps.append(Step(f"restore {rec.path}", ("sh", "-c", _WRITE, "forklift-write", host_path,
                                                          rec.mode or "644", rec.owner or "0:0"), rec.content_b64))
        else:
            steps.append(Step(f"remove {rec.path}", ("rm", "-f", "--", host_path)))
    if state.swap and state.swap.created:
        steps.append(Step(f"remove {state.swap.path}", ("rm", "-f", "--", under(root, state.swap.path))))
    if live and state.guard_unit and facts.has_systemd:
        steps.append(Step("systemctl daemon-reload", ("systemctl", "daemon-reload"), live=True))
    if live and state.logind_reloaded and facts.has_systemd:
        steps.append(Step(f"reload {LOGIND_UNIT}", ("systemctl", "try-reload-or-restart", LOGIND_UNIT), live=True))
    steps.append(Step(f"remove {F.STATE_FILE}", ("rm", "-f", "--", under(root, F.STATE_FILE))))
    for d in sorted(state.created_dirs, key=lambda d: -d.count("/")):
        steps.append(Step(f"remove {d} if empty", ("rmdir", "--ignore-fail-on-non-empty", "--", under(root, d))))
    return ApplyPlan(facts.host, root, live, state.profile, not facts.is_root, tuple(steps), state)
