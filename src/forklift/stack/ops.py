"""``stack up|down|status``: start the members largest first, each gated on a real token; stop in reverse.

The stack's own record (``$FORKLIFT_HOME/stacks/<name>.json``) keeps the start order and the members' run names;
each member is an ordinary run (``forklift check|canary|logs|down <stack>-<member>`` work on it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift import paths
from forklift.cluster.down import DownResult, StatusResult, down, status
from forklift.cluster.up import UpResult, up
from forklift.errors import ForkliftError, RunNotFoundError, StackMemberError, StackNotFoundError
from forklift.record import load as load_record
from forklift.stack.joint import JointPlan, joint_plan
from forklift.stack.schema import StackFile

EventFn = Callable[[str, str, str], None]
"""on_event(member, phase, detail)."""


def _noop(member: str, phase: str, detail: str) -> None:
    return None


def stacks_dir() -> Path:
    return paths.home() / "stacks"


def record_path(name: str) -> Path:
    return stacks_dir() / f"{name}.json"


def save_record(stack: StackFile, order: list[str], source: str | None) -> Path:
    p = record_path(stack.name)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"name": stack.name, "source": source, "order": order,
                             "runs": {n: stack.run_name(n) for n in order}}, indent=2))
    return p


def load_runs(name: str) -> dict[str, str]:
    """member -> run name, in start order."""
    p = record_path(name)
    if not p.is_file():
        raise StackNotFoundError(f"no stack named {name!r} was started here ({p})",
                                 fix="Start it with `forklift stack up STACK.yaml`.")
    data = json.loads(p.read_text())
    return {n: str(data["runs"][n]) for n in data["order"]}


@dataclass
class StackUpResult:
    joint: JointPlan
    started: dict[str, UpResult] = field(default_factory=dict)
    serving: dict[str, StatusResult] = field(default_factory=dict)
    """Members whose run already served (left as they were)."""
    differs: list[str] = field(default_factory=list)
    """Those of them whose running settings differ from this plan's."""

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.joint.stack.name, "order": self.joint.order,
                "plan": self.joint.to_json(),
                "members": {n: {"run": r.record.name, "endpoint": r.record.endpoint,
                                "served_name": r.record.served_name, "ready_s": r.ready_s,
                                "first_token": r.first_token} for n, r in self.started.items()},
                "already_serving": {n: {"run": s.name, "endpoint": s.endpoint, "served_name": s.served_name,
                                        "settings_differ": n in self.differs} for n, s in self.serving.items()}}


def _serving(run: str) -> StatusResult | None:
    """The member's run when it is up and healthy now (a second `stack up` leaves it alone), else None."""
    try:
        found = status(load_record(run))
    except RunNotFoundError:
        return None
    return found if found.status == "ready" and found.healthy else None


def stack_up(stack: StackFile, base: Path, *, source: str | None = None, on_event: EventFn = _noop,
             force: bool = False) -> StackUpResult:
    """Plan jointly (refused with the per-device table when it does not fit), then start each member, largest
    first, each returning only once it streams a real token. A member whose run already serves is left alone, so
    `stack up` again brings back the members that died. A member that fails stops the ones this call started, in
    reverse, and StackMemberError names it (with its own error: the log tail and doctor's finding)."""
    joint = joint_plan(stack, base)
    result = StackUpResult(joint)
    save_record(stack, joint.order, source)
    current = ""
    try:
        for n in joint.order:
            current = n

            def event(phase: str, detail: str, member: str = n) -> None:
                on_event(member, phase, detail)

            serving = _serving(stack.run_name(n))
            if serving is not None:
                result.serving[n] = serving
                if serving.record.recipe != joint.plans[n].deployment.recipe:
                    result.differs.append(n)
                on_event(n, "serving", f"{serving.name} already serves at {serving.endpoint}: left as it is")
                continue
            result.started[n] = up(joint.plans[n], name=stack.run_name(n), on_event=event, force=force)
    except BaseException as exc:
        stopped = []
        for n in reversed(list(result.started)):
            on_event(n, "stopping", f"{stack.name}: {current} failed, stopping {result.started[n].record.name}")
            down(result.started[n].record)
            stopped.append(result.started[n].record.name)
        if isinstance(exc, ForkliftError):
            again = f"; stopped {', '.join(stopped)} again" if stopped else ""
            raise StackMemberError(f"stack {stack.name}: member '{current}' (run {stack.run_name(current)}) did not "
                                   f"start{again}", member=current, run=stack.run_name(current), stopped=stopped,
                                   cause=exc) from exc
        raise
    return result


def stack_down(name: str) -> dict[str, DownResult | None]:
    """Stop every member, in reverse start order (None: that member has no run record)."""
    out: dict[str, DownResult | None] = {}
    for member, run in reversed(list(load_runs(name).items())):
        try:
            out[member] = down(load_record(run))
        except RunNotFoundError:
            out[member] = None
    return out


def stack_status(name: str) -> dict[str, StatusResult | None]:
    out: dict[str, StatusResult | None] = {}
    for member, run in load_runs(name).items():
        try:
            out[member] = status(load_record(run))
        except RunNotFoundError:
            out[member] = None
    return out
