"""``forklift net check|apply``: prove the links between nodes and write the NCCL settings that fit them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from forklift import net
from forklift.cli.check_table import print_checks
from forklift.cli.common import JsonOpt, SetOpt, console, err_console, print_json
from forklift.net import apply as net_apply
from forklift.results import worst

TargetArg = Annotated[str, typer.Argument(help="A recipe (bundled name or YAML path) or a cluster file.")]
NoMeasureOpt = Annotated[bool, typer.Option("--no-measure", help="Facts and routes only: no port or bandwidth test.")]

net_app = typer.Typer(help="Network: find each node pair's link, measure it, write NCCL's settings.",
                      no_args_is_help=True)


@net_app.command("check")
def check_cmd(target: TargetArg, set_: SetOpt = None, json_out: JsonOpt = False,
              no_measure: NoMeasureOpt = False) -> None:
    """Per node: interfaces, MTU, speed, RDMA devices and GIDs, the NCCL vLLM would load. Per pair: the route to the
    peer's data_ip, MTU at both ends, the head's ports, iperf3 / ib_write_bw against the network profile."""
    tgt = net.load(target, set_ or [])
    report = net.check(tgt, measure=not no_measure,
                       on_event=(lambda m: None) if json_out else (lambda m: err_console.print(f"[dim]{m}[/]")))
    if json_out:
        print_json(report.to_json())
    else:
        print_checks(report.checks, title=f"net check: {tgt.origin} ({report.seconds:.1f} s)")
        _print_derived(report)
    if worst(report.checks) == "fail":
        raise typer.Exit(1)


def _print_derived(report: net.NetReport) -> None:
    table = Table("node", "data_ip", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "RoCE v2 GID index",
                  title="derived settings (`forklift net apply --write` writes them)", title_justify="left")
    for host, s in report.derived.items():
        env = s.env()
        gids = ", ".join(f"{h}={i}" for h, i in s.gid_index.items())
        table.add_row(host, s.data_ip or "-", env.get("NCCL_SOCKET_IFNAME", "-"), env.get("GLOO_SOCKET_IFNAME", "-"),
                      env.get("NCCL_IB_HCA", "-"), gids or "-")
    console.print(table)


@net_app.command("apply")
def apply_cmd(target: TargetArg, write: Annotated[bool, typer.Option("--write", help="Write the file (else only "
                                                                       "show the diff).")] = False,
              dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the diff; change nothing.")] = False,
              gid_index: Annotated[bool, typer.Option("--gid-index", help="Also write each node's NCCL_IB_GID_INDEX "
                                                      "(NCCL >= 2.21.5 finds it itself; only where one fits all "
                                                      "HCAs).")] = False,
              no_measure: NoMeasureOpt = False, json_out: JsonOpt = False) -> None:
    """Check, then show the diff of the data_ip / NCCL fields in the recipe (or its cluster file); --write writes it."""
    tgt = net.load(target)
    report = net.check(tgt, measure=not no_measure)
    change = net_apply.plan(tgt, report.derived, gid_index=gid_index)
    written = write and not dry_run and change.changed
    if written:
        net_apply.write(change)
    if json_out:
        print_json({"file": str(change.path), "diff": change.diff, "written": written,
                    "checks": [c.to_json() for c in report.checks if c.status != "ok"]})
        return
    if not change.changed:
        console.print(f"{change.path}: already matches the derived settings", highlight=False, soft_wrap=True)
        return
    console.print(change.diff, markup=False, highlight=False, end="", soft_wrap=True)
    console.print(f"{'wrote' if written else 'would write'} {change.path}"
                  + ("" if written else " (add --write)"), highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(net_app, name="net")
