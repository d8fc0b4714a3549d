"""``forklift service install|status|remove NAME``: the systemd unit that runs a run's supervisor at boot."""

from __future__ import annotations

from typing import Annotated

import typer

from forklift.cli.common import JsonOpt, NameArg, console, print_json
from forklift.cli.status import load_run

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
    """Write the run's supervisor unit (and a root-only credentials file for its API key), enable it."""
    from forklift.runner import LocalRunner
    from forklift.supervise import service

    plan = service.install_plan(load_run(name), unit_dir=unit_dir, start=now)
    if dry_run:
        print_service_plan(plan, json_out)
        return
    service.apply(plan, LocalRunner())
    if json_out:
        print_json(plan.to_json() | {"installed": True})
        return
    console.print(f"installed {plan.unit_path} and enabled {plan.unit}" + (" (started)" if now else "")
                  + f"; after a reboot it brings {plan.name} back. `forklift service status {plan.name}`",
                  highlight=False)


@app.command("status")
def status_cmd(name: NameArg = None, json_out: JsonOpt = False,
               unit_dir: UnitDirOpt = "/etc/systemd/system") -> None:
    """Whether the run's unit is installed, enabled and active."""
    from forklift.record import resolve_name
    from forklift.runner import LocalRunner
    from forklift.supervise import service

    st = service.status(resolve_name(name), LocalRunner(), unit_dir=unit_dir)
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
    from forklift.runner import LocalRunner
    from forklift.supervise import service

    plan = service.remove_plan(resolve_name(name), unit_dir=unit_dir)
    if dry_run:
        print_service_plan(plan, json_out)
        return
    service.apply(plan, LocalRunner(), tolerate=("systemctl disable",))
    console.print(f"removed {plan.unit}", highlight=False)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="service")
