"""``forklift hw``: the local machine, and ``--list`` for the hardware profiles the planner knows."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from forklift import hardware
from forklift.cli.common import JsonOpt, console, print_json

ListOpt = Annotated[bool, typer.Option("--list", help="List hardware profiles instead of detecting.")]


def hw_cmd(list_: ListOpt = False, json_out: JsonOpt = False) -> None:
    """Show this machine (CPU, memory, GPUs, matching profile), or the known profiles."""
    if list_:
        rows = [p.model_dump(mode="json") for p in hardware.profiles().values()]
        if json_out:
            print_json(rows)
            return
        table = Table("name", "kind", "memory GiB", "bandwidth GB/s", "unified", "description")
        for r in rows:
            table.add_row(r["name"], r["kind"], f"{r['memory_gib']:g}", f"{r['bandwidth_gbs']:g}", str(r["unified"]),
                          r["description"])
        console.print(table)
        return
    local = hardware.detect()
    if json_out:
        print_json(local.model_dump(mode="json"))
        return
    console.print(f"{local.hostname}: {local.cpu_model}, {local.cores} cores{' (AMX)' if local.amx else ''}, "
                  f"{local.memory_total_gib:.1f} GiB memory ({local.memory_available_gib:.1f} available), "
                  f"profile [bold]{local.profile}[/]")
    for g in local.gpus:
        console.print(f"  GPU {g.index}: {g.name}, {g.memory_gib:.1f} GiB, profile {g.profile or '?'}")


def register(app: typer.Typer) -> None:
    app.command("hw")(hw_cmd)
