"""``forklift service install|status|remove NAME``: the systemd unit that runs a run's supervisor at boot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from forklift.cli.common import JsonOpt, NameArg, console, print_json
from forklift.cli.status import load_run

if TYPE_CHECKING:
    from forklift.runner import Runner

DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the unit and every command; change nothing.")]
UnitDirOpt = Annotated[str, typer.Option("--unit-dir", help="Where the unit file goes.")]
NowOpt = Annotated[bool, typer.Option("--now", help="Also start the unit now (stop a supervisor `up --supervise` "
                                                    "started first: `forklift down` would stop the run too).")]

app = typer.Typer(help="The systemd unit that runs a run's supervisor at boot.", no_args_is_help=True)


def print_service_plan(plan: object, json_out: bool) -> None:
    """A unit plan's steps (--dry-run): JSON, or each command with the text it writes (runs' and the gateway's)."""
    from forklift.supervise.service import ServicePlan

    assert isinstance(plan, ServicePlan)
    if json_out:
        print_json(plan.to_json())
        return
    for action in plan.actions:
        console.print("$ " + " ".join(action.argv), highlight=False, markup=False, soft_wrap=True)
        if action.shown:
            console.print("  " + action.shown.rstrip("\n").replace("\n", "\n  "), highlight=False, markup=False,
                          soft_wrap=True)


@app.command("install")
def install_cmd(name: NameArg = None, dry_run: DryRunOpt = False, now: NowOpt = False, json_out: JsonOpt = False,
                unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Write the run's supervisor unit (and a root-only credentials file for its API key), enable it: here, or on
    node 0 through SSH when it is remote (the record goes to the forklift installed there)."""
    from forklift.runner import LocalRunner
    from forklift.supervise import service

    record = load_run(name)
    where = ""
    if record.recipe.head.is_local:
        plan = service.install_plan(record, unit_dir=unit_dir, start=now)
        if not dry_run:
            service.apply(plan, LocalRunner())
    else:
        from forklift.supervise.remote import install_on_head

        plan = install_on_head(record, start=now, dry_run=dry_run, unit_dir=unit_dir)
        where = f" on {record.recipe.head.host}"
    if dry_run:
        print_service_plan(plan, json_out)
        return
    if json_out:
        print_json(plan.to_json() | {"installed": True, "host": record.recipe.head.host})
        return
    console.print(f"installed {plan.unit_path}{where} and enabled {plan.unit}" + (" (started)" if now else "")
                  + f"; after a reboot it brings {plan.name} back. `forklift service status {plan.name}`",
                  highlight=False)


@app.command("status")
def status_cmd(name: NameArg = None, json_out: JsonOpt = False,
               unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Whether the run's unit is installed, enabled and active."""
    from forklift.record import resolve_name
    from forklift.supervise import service

    run = resolve_name(name)
    st = service.status(run, _head_runner(run), unit_dir=unit_dir)
    if json_out:
        print_json(st.to_json())
        return
    console.print(f"{st.unit}: {'installed' if st.installed else 'not installed'} ({st.unit_path}), "
                  f"enabled: {st.enabled}, active: {st.active}", highlight=False)


@app.command("remove")
def remove_cmd(name: NameArg = None, dry_run: DryRunOpt = False, json_out: JsonOpt = False,
               unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Disable and stop the unit, delete it and its credentials file (the deployment keeps running)."""
    from forklift.record import resolve_name
    from forklift.supervise import service

    run = resolve_name(name)
    plan = service.remove_plan(run, unit_dir=unit_dir)
    if dry_run:
        print_service_plan(plan, json_out)
        return
    service.apply(plan, _head_runner(run), tolerate=("systemctl disable",))
    console.print(f"removed {plan.unit}", highlight=False)


def _head_runner(name: str) -> Runner:
    """Where the run's unit lives: node 0 (through SSH when it is remote), else this machine (a run whose record
    cannot be read)."""
    from forklift.errors import RunError
    from forklift.launch.hosts import runner_for
    from forklift.record import load
    from forklift.runner import LocalRunner

    try:
        record = load(name)
    except RunError:
        return LocalRunner()
    return runner_for(record.recipe.head, ssh_config=record.ssh_config)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="service")
