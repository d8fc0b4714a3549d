"""``forklift hw``: the local machine; ``--node HOST`` measures a node over SSH (kept for ``plan``); ``--list`` the
hardware profiles the planner knows (bundled and the user's under $FORKLIFT_HOME/hardware/)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from forklift import hardware
from forklift.cli.common import JsonOpt, console, print_json
from forklift.hardware import facts
from forklift.runner import LocalRunner, Runner
from forklift.runner.ssh import SshRunner

ListOpt = Annotated[bool, typer.Option("--list", help="List hardware profiles instead of detecting.")]
NodeOpt = Annotated[str | None, typer.Option("--node", help="Measure this node (a recipe's node host) over SSH and "
                                             "keep the facts for `forklift plan`.")]
SshOpt = Annotated[str | None, typer.Option("--ssh", help="SSH target for --node (user@host[:port]); default: HOST.")]
_LOCAL = ("localhost", "local", "127.0.0.1")


def _list(json_out: bool) -> None:
    rows = [p.model_dump(mode="json") for p in hardware.profiles().values()]
    if json_out:
        print_json(rows)
        return
    table = Table("name", "kind", "memory GiB", "bandwidth GB/s", "unified", "cc", "source", "description")
    for r in rows:
        table.add_row(r["name"], r["kind"], f"{r['memory_gib']:g}", f"{r['bandwidth_gbs']:g}", str(r["unified"]),
                      r["compute_capability"], r["source"], r["description"])
    console.print(table)


def _measure(host: str, ssh: str | None, json_out: bool) -> None:
    runner: Runner = LocalRunner() if host in _LOCAL and ssh is None else SshRunner(ssh or host, name=host)
    measured = facts.measure(runner, host=host)
    path = facts.save(measured)
    if json_out:
        print_json(measured.model_dump(mode="json"))
        return
    gpus = f"{measured.gpu_count} x {measured.gpu_name}" if measured.gpu_count else "no GPU seen by nvidia-smi"
    console.print(f"{host}: {measured.mem_total_gib} GiB memory, {measured.mem_available_gib} GiB available now; "
                  f"{gpus}; profile {measured.hardware or '?'}")
    console.print(f"[dim]kept in {path}: `forklift plan` uses the available memory on unified-memory nodes[/]")


def hw_cmd(list_: ListOpt = False, node: NodeOpt = None, ssh: SshOpt = None, json_out: JsonOpt = False) -> None:
    """Show this machine (CPU, memory, GPUs, matching profile), measure a node, or list the known profiles."""
    if list_:
        _list(json_out)
        return
    if node is not None:
        _measure(node, ssh, json_out)
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
