"""``forklift service``: the systemd unit that runs a run's supervisor at boot, rendered as text (pure) and written,
enabled, inspected or removed through a Runner (every step an argv, so ``--dry-run`` prints exactly what would run).

The unit execs ``<python> -m forklift.cli.main supervise NAME`` on the head; the supervisor reaches the workers over
SSH as ``up`` does, so the workers need nothing of their own (sshd and their runtime). No secret is in the unit:
the API key goes to a root-only (0600) EnvironmentFile under /etc/forklift/credentials, written through stdin.
``KillMode=process``: stopping or restarting the supervisor never kills the engine it started (those processes
share its cgroup); ``forklift down`` stops the engine. Exit 143 (SIGTERM) is a clean stop; exit 3 (gave up) and 2
(no such run, bad state dir: a restart cannot help) are never restarted; the state dir's mount comes first.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forklift import paths
from forklift.endpoint.auth import api_key
from forklift.errors import ServiceError, SupervisorGaveUpError
from forklift.names import has_control
from forklift.record import RunRecord
from forklift.runner import Completed, Runner
from forklift.supervise import command

UNIT_DIR = "/etc/systemd/system"
CREDENTIALS_DIR = "/etc/forklift/credentials"
RESTART_SEC = 30
_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_CARRIED = ("FORKLIFT_CACHE", "PYTHONPATH", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE")
"""Environment this process has that the supervisor needs to find the same caches and code at boot."""


def unit_name(name: str) -> str:
    return f"forklift-supervise-{name}.service"


def quote(value: str) -> str:
    """One word of a unit line: ``%`` escaped (systemd's specifiers), quoted when it holds anything but plain
    path characters. A control character (a newline would start a directive of its own) is refused."""
    _one_line(value)
    value = value.replace("%", "%%")
    if _PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _one_line(value: str) -> str:
    if has_control(value):
        raise ServiceError(f"{value!r} holds a control character, which would end its line of the unit file",
                           fix="Use one line of printable text in the run's names, paths and environment.")
    return value


def render_unit(name: str, *, argv: Sequence[str], home: str, user: str, environment: Mapping[str, str],
                credentials: str | None, stop_s: float, description: str = "", title: str | None = None) -> str:
    """The unit's text. ``environment`` must hold no secret (the credentials file carries the API key).
    ``title``: the whole Description (default: the run supervisor's, with ``description`` after it)."""
    title = title or f"forklift supervisor for run {name}" + (f" ({description})" if description else "")
    lines = ["[Unit]", f"Description={_one_line(title).replace('%', '%%')}",
             "Wants=network-online.target", "After=network-online.target", f"RequiresMountsFor={quote(home)}", "",
             "[Service]", "Type=simple",
             f"User={user}", f"ExecStart={' '.join(quote(a) for a in argv)}",
             f"Environment={quote(f'FORKLIFT_HOME={home}')}"]
    lines += [f"Environment={quote(f'{k}={v}')}" for k, v in sorted(environment.items())]
    if credentials:
        lines.append(f"EnvironmentFile={quote(credentials)}")
    lines += ["Restart=on-failure", f"RestartSec={RESTART_SEC}", "SuccessExitStatus=143",
              f"RestartPreventExitStatus=2 {SupervisorGaveUpError.exit_code}", "KillMode=process",
              f"TimeoutStopSec={int(stop_s) + 60}", "", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def carried_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a unit carries from the installing shell (FORKLIFT_CACHE, PYTHONPATH, HF_*), paths absolute."""
    return {k: _absolute(env[k]) for k in _CARRIED if env.get(k)}


def _absolute(value: str) -> str:
    """Relative paths made absolute (a unit runs from /): each part of a PATH-like list that names a path."""
    parts = value.split(os.pathsep)
    if not all(p and not p.startswith(("http:", "https:")) for p in parts):
        return value
    return os.pathsep.join(str(Path(p).resolve()) if not p.startswith("/") else p for p in parts)


def credentials_text(var: str, key: str) -> str:
    if "\n" in key or "\0" in key:
        raise ServiceError(f"${var} holds a newline or NUL byte; it cannot go into an EnvironmentFile",
                           fix=f"Set {var} to the key alone.")
    return f'{var}="' + key.replace("\\", "\\\\").replace('"', '\\"') + '"\n'


@dataclass(frozen=True)
class Action:
    argv: list[str]
    input: str | None = None
    shown: str | None = None
    """What ``--dry-run`` prints for the input (the unit's text, or a line naming the secret, never the secret)."""


@dataclass(frozen=True)
class ServicePlan:
    name: str
    unit: str
    unit_path: str
    unit_text: str
    credentials_path: str | None = None
    actions: list[Action] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "unit": self.unit, "unit_path": self.unit_path, "unit_text": self.unit_text,
                "credentials_path": self.credentials_path,
                "actions": [{"argv": a.argv, "input": a.shown} for a in self.actions]}


def install_plan(record: RunRecord, *, unit_dir: str = UNIT_DIR, credentials_dir: str = CREDENTIALS_DIR,
                 python: str | None = None, environ: Mapping[str, str] | None = None, start: bool = False,
                 user: str | None = None, forklift: Sequence[str] | None = None, home: str | None = None,
                 carried: Mapping[str, str] | None = None) -> ServicePlan:
    """What ``service install`` writes and runs for a run: the unit, the credentials file when the recipe names
    an API key variable (read here from ``environ``), daemon-reload, enable (and start with ``start``).
    For a unit on a remote head (``record`` as the head keeps it): ``forklift`` (the argv that runs forklift
    there), ``home`` (its forklift home) and ``carried`` (the environment its unit carries) as the head said."""
    if not record.recipe.head.is_local:
        raise ServiceError(
            f"{record.name}: the head is {record.recipe.head.host}, not this machine; the supervisor unit runs on "
            "the head, beside its run record",
            fix=f"`forklift service install {record.name}` installs it there through SSH (forklift must be "
            f"installed on {record.recipe.head.host}).")
    env = dict(os.environ if environ is None else environ)
    name = record.name
    unit = unit_name(name)
    unit_path = f"{unit_dir.rstrip('/')}/{unit}"
    var = record.api_key_env
    cred_path = f"{credentials_dir.rstrip('/')}/{name}.env" if var else None
    carried = dict(carried) if carried is not None else carried_environment(env)
    argv = [*forklift, "supervise", name] if forklift else command(name, python)
    text = render_unit(name, argv=argv, home=home or str(paths.home().resolve()),
                       user=user or getpass.getuser(), environment=carried, credentials=cred_path,
                       stop_s=record.recipe.timeouts.stop_s, description=f"{record.served_name} at {record.endpoint}")
    actions = []
    if var and cred_path:
        key = api_key(var, environ=env, who=f"the unit of '{name}'") or ""
        actions += [Action(["install", "-d", "-m", "0700", credentials_dir]),
                    Action(["install", "-m", "0600", "/dev/stdin", cred_path], credentials_text(var, key),
                           f"{var}=<the API key from ${var}, root-only>")]
    actions += unit_actions(unit_dir, unit_path, text, unit, start=start)
    return ServicePlan(name, unit, unit_path, text, cred_path, actions)


def unit_actions(unit_dir: str, unit_path: str, text: str, unit: str, *, start: bool) -> list[Action]:
    """Write the unit file, reload systemd, enable it (and start it with ``start``)."""
    return [Action(["install", "-d", "-m", "0755", unit_dir]),
            Action(["install", "-m", "0644", "/dev/stdin", unit_path], text, text),
            Action(["systemctl", "daemon-reload"]),
            Action(["systemctl", "enable", *(["--now"] if start else []), unit])]


def remove_plan(name: str, *, unit_dir: str = UNIT_DIR, credentials_dir: str = CREDENTIALS_DIR) -> ServicePlan:
    """Disable and stop the unit (the deployment keeps running: `forklift down` stops it), delete its files."""
    unit = unit_name(name)
    unit_path = f"{unit_dir.rstrip('/')}/{unit}"
    cred = f"{credentials_dir.rstrip('/')}/{name}.env"
    actions = [Action(["systemctl", "disable", "--now", unit]), Action(["rm", "-f", unit_path, cred]),
               Action(["systemctl", "daemon-reload"])]
    return ServicePlan(name, unit, unit_path, "", cred, actions)


def apply(plan: ServicePlan, runner: Runner, *, tolerate: Sequence[str] = ()) -> list[Completed]:
    """Run the plan's actions in order; the first that fails raises ServiceError (except the programs named in
    ``tolerate``, e.g. ``systemctl disable`` of a unit already gone)."""
    done = []
    for action in plan.actions:
        res = runner.run(action.argv, input=action.input, timeout=60)
        if not res.ok and action.argv[0] + " " + action.argv[1] not in tolerate:
            tail = (res.stderr.strip().splitlines() or [""])[-1]
            raise ServiceError(f"{runner.host}: `{' '.join(action.argv)}` exited {res.returncode}: {tail}",
                               fix="Run it as root (systemd units and /etc need it), or use --dry-run and apply "
                               "the steps by hand.")
        done.append(res)
    return done


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    unit: str
    unit_path: str
    installed: bool
    enabled: str
    active: str

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def unit_state(unit: str, runner: Runner, *, unit_dir: str = UNIT_DIR) -> tuple[str, bool, str, str]:
    """(unit file path, installed, is-enabled, is-active) of one unit on the runner's host."""
    path = f"{unit_dir.rstrip('/')}/{unit}"
    installed = runner.run(["test", "-f", path], timeout=15).ok
    enabled = runner.run(["systemctl", "is-enabled", unit], timeout=15).stdout.strip() or "unknown"
    active = runner.run(["systemctl", "is-active", unit], timeout=15).stdout.strip() or "unknown"
    return path, installed, enabled, active


def status(name: str, runner: Runner, *, unit_dir: str = UNIT_DIR) -> ServiceStatus:
    unit = unit_name(name)
    return ServiceStatus(name, unit, *unit_state(unit, runner, unit_dir=unit_dir))


__all__ = ["CREDENTIALS_DIR", "UNIT_DIR", "Action", "ServicePlan", "ServiceStatus", "apply", "credentials_text",
           "install_plan", "quote", "remove_plan", "render_unit", "status", "unit_actions", "unit_name", "unit_state"]
