"""``forklift image sync``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from forklift.cli.common import JsonOpt, SetOpt, console, print_json
from forklift.cli.model import NodeSshOpt
from forklift.cli.progress import node_bars
from forklift.distribution.images import ImageOptions, ImageReport, sync_image
from forklift.launch.hosts import runners_for
from forklift.recipe import resolve
from forklift.recipe.runtime import check_image
from forklift.runner.ssh import default_ssh_config

image_app = typer.Typer(help="Container images on the nodes.", no_args_is_help=True)


def print_report(report: ImageReport) -> None:
    console.print(f"{report.image} = {report.digest} (from {report.source})", highlight=False)
    for n in report.nodes:
        if n.error:
            line = f"[red]failed[/]: {escape(n.error)}"
        elif n.method in ("source", "skip", "plan"):
            line = {"source": "source", "skip": "already has it", "plan": f"would load it (has {n.before or 'none'})"
                    }[n.method]
        else:
            speed = f" ({n.mb_s:.1f} MB/s)" if n.mb_s else ""
            size = f"{n.bytes / 1e6:.1f} MB in " if n.bytes else ""
            line = f"loaded by {n.method}: {size}{n.seconds or 0:.1f} s{speed}" + (f"; {n.note}" if n.note else "")
        console.print(f"{n.host:14} {line}", highlight=False)


@image_app.command("sync")
def sync_cmd(
    image: Annotated[str, typer.Argument(help="Image name (as `docker image inspect` knows it on the source).")],
    recipe: Annotated[str, typer.Argument(help="Recipe whose nodes get the image.")],
    set_: SetOpt = None,
    from_: Annotated[str | None, typer.Option("--from", help="Copy from this node (host) or 'local'; default: the "
                                              "first node that has it, else this machine.")] = None,
    registry: Annotated[str | None, typer.Option("--registry", help="Go through this registry "
                                                 "(HOST\\[:PORT]\\[/PATH]): one push from the source, a pull on each "
                                                 "node.")] = None,
    node_ssh_config: NodeSshOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say which nodes would get it.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Bring IMAGE to every node of RECIPE that lacks its digest (docker save | ssh docker load, node to node over
    the data network where nodes can ssh to each other, or a registry); nodes that have it are skipped."""
    try:
        check_image(image)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="IMAGE") from None
    r = resolve(recipe, set_ or []).recipe
    with node_bars(disable=json_out or dry_run) as bars:
        opts = ImageOptions(source=from_, registry=registry, node_ssh_config=node_ssh_config, on_progress=bars)
        report = sync_image(image, r, runners_for(r, ssh_config=default_ssh_config()), options=opts, dry_run=dry_run)
    if json_out:
        print_json(report.to_json())
    else:
        print_report(report)
    report.raise_if_failed()


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
