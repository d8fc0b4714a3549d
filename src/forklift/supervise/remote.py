"""The supervisor on the head node (``supervise.where: head``), so a control machine that sleeps does not stop it.

When node 0 is remote, this machine sends the run's record, rewritten as the head sees it
(``record.head.for_head``), and the supervisor's starting state to the head's own forklift on the ssh channel's
stdin (``forklift supervise NAME --receive --detach``, one argv through the head's Runner; the API key rides in the
same stdin, never in a file or a command line there). The head's forklift saves both in its forklift home and
starts ``forklift supervise NAME`` detached; its receipt (home, pid, output) is kept here in ``supervisor.json``
(``head``), which ``status`` and ``down`` follow over SSH (``cluster.head``). A restart there is a whole ``up``, which
is why forklift itself must be installed on the head.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from forklift import paths
from forklift.cluster.down import stop_supervisor, supervisor_state
from forklift.endpoint.auth import api_key
from forklift.errors import RemoteHeadError, ServiceError
from forklift.launch.hosts import runner_for
from forklift.recipe.schema import Recipe
from forklift.record import RunRecord, run_dir
from forklift.record.head import for_head, state_for_head
from forklift.record.supervisor import HeadRef, SupervisorState, load_state, save_state
from forklift.runner import Completed, Runner
from forklift.supervise import SUPERVISOR_LOG, spawn
from forklift.supervise.service import CREDENTIALS_DIR, UNIT_DIR, ServicePlan, apply, install_plan

_MISSING = ("command not found", "No such file or directory", "No module named 'forklift", "No module named forklift")
_TOO_OLD = ("No such option", "No such command")


def on_head(recipe: Recipe) -> bool:
    """Whether `up --supervise` starts the supervisor on a remote head (else on this machine)."""
    return recipe.supervise.where == "head" and not recipe.head.is_local


def head_forklift(recipe: Recipe) -> list[str]:
    """The argv that runs forklift on the head: the recipe's ``supervise.forklift``, else the venv runtime's python
    (the head runs its ranks with it, so forklift installed there is found), else ``forklift`` on its PATH."""
    if recipe.supervise.forklift:
        return list(recipe.supervise.forklift)
    rt = recipe.runtime
    if rt.kind == "venv" and rt.python:
        return [rt.python, "-m", "forklift.cli.main"]
    return ["forklift"]


def bundle(record: RunRecord, state: SupervisorState, secrets: Mapping[str, str]) -> str:
    """What the head's forklift reads on stdin: its record, its supervisor's starting state, the API key."""
    return json.dumps({"record": for_head(record).model_dump(mode="json"),
                       "state": state_for_head(state, record.recipe.head.host).model_dump(mode="json"),
                       "secrets": dict(secrets)})


def failure(res: Completed, argv: list[str], host: str) -> RemoteHeadError:
    """Why ``forklift supervise --receive`` failed on the head, with the fix: forklift missing there, too old, or
    what it said."""
    said = (res.stderr.strip() or res.stdout.strip()).splitlines()
    tail = said[-1] if said else f"exit {res.returncode}"
    shown = " ".join(argv)
    if res.returncode in (126, 127) or any(s in tail for s in _MISSING):
        return RemoteHeadError(
            f"{host}: forklift is not installed on the head (`{shown}`: {tail}); the supervisor runs there",
            fix=f"Install forklift on {host} (into the python the recipe's runtime names, or on its PATH), or set "
            "`supervise.forklift` to the command that runs it there, or `supervise.where: here` to supervise "
            "from this machine.")
    if any(s in tail for s in _TOO_OLD):
        return RemoteHeadError(f"{host}: the forklift on the head is too old to take a supervisor (`{shown}`: {tail})",
                               fix=f"Upgrade forklift on {host} to this machine's version.")
    return RemoteHeadError(f"{host}: starting the supervisor there failed (`{shown}` exited {res.returncode}): {tail}",
                           fix=f"Run `{shown} --help` on {host}; `supervise.where: here` supervises from this "
                           "machine instead.")


def parse_receipt(stdout: str, host: str) -> dict[str, Any]:
    """The head's answer: the last JSON object line of its output (home, hostname, pid, log)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                break
            if isinstance(data, dict) and isinstance(data.get("home"), str):
                return data
            break
    raise RemoteHeadError(f"{host}: the head's forklift answered without saying where it keeps the run: "
                          f"{stdout.strip()[-200:]!r}", fix=f"Upgrade forklift on {host} to this machine's version.")


def _head_runner(record: RunRecord) -> Runner:
    head = record.recipe.head
    return runner_for(head, ssh_config=record.ssh_config, timeout_s=record.recipe.timeouts.ssh_s)


def _head_ref(record: RunRecord, receipt: Mapping[str, Any], forklift: list[str], log: str | None) -> HeadRef:
    """Where this machine follows the run's supervisor on the head (``status``, ``down``)."""
    head = record.recipe.head
    return HeadRef(host=head.host, ssh=head.ssh or head.host, ssh_config=record.ssh_config, home=receipt["home"],
                   forklift=forklift, log=log)


def start_on_head(record: RunRecord, mem_before: Mapping[str, int], *, runner: Runner | None = None,
                  environ: Mapping[str, str] | None = None) -> SupervisorState:
    """Send the record to the head's forklift and start the supervisor there, detached; keep its receipt here."""
    head = record.recipe.head
    runner = runner or _head_runner(record)
    stop_supervisor(record.name)  # one supervisor per run: one started earlier (here or there) stops first
    state = load_state(record.name) or SupervisorState(name=record.name)
    state.baseline_mem_available = dict(mem_before)
    state.state = "starting"
    state.gave_up = None
    state.startup_findings = []
    state.started_at = time.time()
    var = record.api_key_env
    key = api_key(var, environ=dict(os.environ if environ is None else environ),
                  who=f"the supervisor of '{record.name}' on {head.host}") if var else None
    secrets = {var: key} if var and key else {}
    forklift = head_forklift(record.recipe)
    argv = [*forklift, "supervise", record.name, "--receive", "--detach"]
    res = runner.run(argv, input=bundle(record, state, secrets), timeout=120)
    if not res.ok:
        raise failure(res, argv, head.host)
    receipt = parse_receipt(res.stdout, head.host)
    state.head = _head_ref(record, receipt, forklift, receipt.get("log"))
    state.pid = receipt.get("pid")
    state.host = receipt.get("hostname")
    save_state(state)
    return state


def facts() -> dict[str, Any]:
    """What the head says about itself: its forklift home, host name, user and the environment a unit there
    carries (``service.carried_environment``)."""
    from forklift.supervise.service import carried_environment

    return {"home": str(paths.home().resolve()), "hostname": socket.gethostname(), "user": getpass.getuser(),
            "environment": carried_environment(os.environ)}


def receive(text: str, *, detach: bool) -> dict[str, Any]:
    """On the head: keep the record and state read from ``text`` in this forklift home and, with ``detach``, start
    the supervisor (stopping an earlier one of the run here first). Without ``detach`` (a unit is being installed)
    a supervisor of the run that runs here keeps its own record and state. Empty ``text``: keep nothing, only say
    where (``service install --dry-run``). Returns the receipt: ``facts()``, and the pid and output when started."""
    out = facts()
    if not text.strip():
        return out
    try:
        data = json.loads(text)
        record = RunRecord.model_validate(data["record"])
        state = SupervisorState.model_validate(data["state"])
        secrets = {str(k): str(v) for k, v in (data.get("secrets") or {}).items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise RemoteHeadError(f"the run sent to this head cannot be read: {str(exc)[:300]}",
                              fix="Run the same forklift version on the control machine and here.") from None
    if detach:
        stop_supervisor(record.name)
    elif supervisor_state(record.name)[1]:
        return out | {"record": str(record.path()), "kept": False}
    record.save()
    save_state(state)
    out |= {"record": str(record.path()), "kept": True}
    if detach:
        started = spawn(record, state.baseline_mem_available, secrets=secrets)
        out |= {"pid": started.pid, "log": str(run_dir(record.name) / SUPERVISOR_LOG)}
    return out


def install_on_head(record: RunRecord, *, start: bool = False, dry_run: bool = False, unit_dir: str = UNIT_DIR,
                    credentials_dir: str = CREDENTIALS_DIR, runner: Runner | None = None,
                    environ: Mapping[str, str] | None = None) -> ServicePlan:
    """``service install`` for a remote head: the record goes to the head's forklift (as for a detached
    supervisor, without starting one), and the unit, rendered with the head's forklift, home, user and
    environment, is written and enabled there through its Runner. ``dry_run``: the head only says where."""
    head = record.recipe.head
    runner = runner or _head_runner(record)
    forklift = head_forklift(record.recipe)
    argv = [*forklift, "supervise", record.name, "--receive"]
    state, alive = supervisor_state(record.name)
    if state is not None and state.head is None and alive:
        raise ServiceError(f"{record.name}: its supervisor runs on this machine (pid {state.pid}); the unit would "
                           f"start a second one on {head.host}",
                           fix=f"`forklift supervise {record.name} --detach` moves it to {head.host}; then install.")
    state = state or SupervisorState(name=record.name)
    res = runner.run(argv, input="" if dry_run else bundle(record, state, {}), timeout=120)
    if not res.ok:
        raise failure(res, argv, head.host)
    receipt = parse_receipt(res.stdout, head.host)
    plan = install_plan(for_head(record), unit_dir=unit_dir, credentials_dir=credentials_dir, start=start,
                        environ=os.environ if environ is None else environ, user=str(receipt.get("user") or "root"),
                        forklift=forklift, home=receipt["home"], carried=receipt.get("environment") or {})
    if dry_run:
        return plan
    apply(plan, runner)
    if state.head is None:  # from now on `status` and `down` here follow the head's supervisor
        state.pid = None  # until the head's own state says which pid the unit's supervisor has
        state.head = _head_ref(record, receipt, forklift, f"journalctl -u {plan.unit}")
        save_state(state)
    return plan


def attach(record: RunRecord) -> SupervisorState:
    """A supervisor for a run that already serves (``forklift supervise NAME --detach``), where ``start`` puts it.
    The memory gate keeps the baseline an earlier supervisor took before the start (none: the gate passes)."""
    prior = load_state(record.name)
    return start(record, prior.baseline_mem_available if prior is not None else {})


def start(record: RunRecord, mem_before: Mapping[str, int]) -> SupervisorState:
    """`up --supervise`: on the head when the recipe says so and node 0 is remote, else here."""
    if on_head(record.recipe):
        try:
            return start_on_head(record, mem_before)
        except RemoteHeadError as exc:
            raise RemoteHeadError(f"{exc.message} ({record.name} serves, unsupervised; `forklift down "
                                  f"{record.name}` stops it)", fix=exc.fix) from None
    stop_supervisor(record.name)  # one supervisor per run (a remote one included)
    return spawn(record, mem_before)


__all__ = ["attach", "bundle", "facts", "failure", "head_forklift", "install_on_head", "on_head", "parse_receipt",
           "receive", "start", "start_on_head"]
