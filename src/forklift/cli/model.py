"""``forklift model prepare | pull | sync``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, print_json
from forklift.cli.progress import node_bars
from forklift.distribution.copy import CopyOptions
from forklift.distribution.pull import PullReport, pull
from forklift.distribution.sync import SyncReport, sync
from forklift.errors import HubError, ModelError, ModelNotFoundError
from forklift.launch.hosts import runners_for
from forklift.model import bundled
from forklift.model.resolve import local_path
from forklift.recipe import resolve
from forklift.recipe.schema import BUNDLED_PREFIX, Recipe
from forklift.runner.ssh import default_ssh_config

model_app = typer.Typer(help="Prepare models forklift serves.", no_args_is_help=True)


@model_app.command("prepare")
def prepare_cmd(
    source: Annotated[str, typer.Argument(help="bundled:NAME (e.g. bundled:smollm2-135m-instruct)")],
    force: Annotated[bool, typer.Option("--force", help="Convert again even if already prepared.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Convert a bundled model to safetensors in forklift's cache (idempotent, no network)."""
    if not source.startswith(BUNDLED_PREFIX):
        raise ModelError(f"'{source}' is not a bundled model",
                         fix="Only bundled:NAME needs preparing; other sources are used as they are.")
    name = source[len(BUNDLED_PREFIX):]
    already = bundled.is_prepared(name) and not force
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=json_out) as progress:
        task = progress.add_task("preparing", total=1.0)
        path = bundled.prepare(name, force=force,
                               progress=lambda msg, frac: progress.update(task, description=msg, completed=frac))
    if json_out:
        print_json({"model": source, "path": str(path), "already_prepared": already})
    else:
        console.print(f"{source} {'already prepared' if already else 'prepared'}: {path}")


NodeSshOpt = Annotated[str | None, typer.Option(
    "--node-ssh-config", envvar="FORKLIFT_NODE_SSH_CONFIG",
    help="ssh_config path ON THE NODES for node-to-node copies (default: each node's own ~/.ssh/config).")]
BwOpt = Annotated[float | None, typer.Option("--bwlimit", help="Per-node limit in MB/s.")]


def _here(r: Recipe) -> Path | None:
    """This machine's copy of the recipe's model, when it has one."""
    try:
        return local_path(r.model, prepare_bundled=True)
    except ModelNotFoundError:
        return None


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} MB"


def _speed(value: float | None) -> str:
    return "" if value is None else f" ({value:.1f} MB/s)"


def print_sync(report: SyncReport, *, dry_run: bool) -> None:
    console.print(f"source: {report.source} {report.source_path}", highlight=False)
    for x in report.nodes:
        what = f"{len(x.files)} files, {_mb(x.bytes)} needed"
        if x.error:
            done = f"[red]failed[/]: {escape(x.error)}"
        elif x.method in ("skip", "source"):
            done = x.note
        elif dry_run:
            done = f"would send {len(x.sent)} files by {x.method}" + (f" ({x.note})" if x.note else "")
        else:
            done = f"{x.method}: {_mb(x.transferred)} in {x.seconds:.1f} s{_speed(x.mb_s)}" + \
                (f"; re-sent {', '.join(x.repaired)}" if x.repaired else "") + (f"; {x.note}" if x.note else "")
        console.print(f"{x.host:14} {x.dest}: {what}; {done}", highlight=False)


@model_app.command("sync")
def sync_cmd(
    recipe: RecipeArg = None,
    set_: SetOpt = None,
    from_: Annotated[str | None, typer.Option("--from", help="Copy from this node (host) or 'local'; default: "
                                              "the fullest copy, nodes first.")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Compare every file's sha256 with the source "
                                         "(finds corruption that kept the size).")] = False,
    bwlimit: BwOpt = None,
    node_ssh_config: NodeSshOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what each node would get.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Copy the recipe's model to every node that lacks it, from whichever node has it; with PP only that
    node's shards. Node to node over the data network when they can ssh to each other, else through here."""
    r = resolve(recipe, set_ or []).recipe
    with node_bars(disable=json_out or dry_run) as bars:
        opts = CopyOptions(verify=verify, bwlimit_mb=bwlimit, node_ssh_config=node_ssh_config, on_progress=bars)
        report = sync(r, runners_for(r, ssh_config=default_ssh_config()), here=_here(r), source=from_,
                      options=opts, dry_run=dry_run)
    if json_out:
        print_json(report.to_json())
    else:
        print_sync(report, dry_run=dry_run)
    report.raise_if_failed()


def print_pull(report: PullReport, *, dry_run: bool) -> None:
    how = ("each node pulls its own files" if report.mode == "each"
           else f"{report.via} pulls, then copies to the others")
    console.print(f"{report.repo} @ {report.revision} = commit {report.commit}; {how}", highlight=False)
    for n in report.nodes:
        head = f"{n.host:14} {n.dest} ({n.layout}): {len(n.files)} files, {_mb(n.bytes)}"
        if dry_run or n.error:
            tail = " \\[dry run]" if dry_run else f"; [red]failed[/]: {escape(n.error or '')}"
            console.print(escape(head) + tail, highlight=False)
            continue
        got = f"from {n.via}" if n.via else f"downloaded {_mb(n.downloaded)}" + (
            f" in {n.seconds:.1f} s{_speed(n.mb_s)}" if n.seconds else "")
        console.print(f"{head}; {got}; {n.present} already there; {n.verified} verified", highlight=False)
    if report.fanout:
        print_sync(report.fanout, dry_run=False)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)


@model_app.command("pull")
def pull_cmd(
    ref: Annotated[str | None, typer.Argument(help="ORG/NAME or ORG/NAME@REVISION; default: the recipe's "
                                              "model.")] = None,
    recipe: Annotated[str | None, typer.Option("--recipe", "-r", help="Pull onto this recipe's nodes (each gets "
                                               "what its stage needs); default: this machine's HF cache.")] = None,
    set_: SetOpt = None,
    via: Annotated[str | None, typer.Option("--via", help="Pull on this node only, then copy to the others over "
                                            "the data network (default: decided from what the nodes need).")] = None,
    python: Annotated[str | None, typer.Option("--python", help="Python with huggingface_hub on the nodes.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Files downloaded at once per node.")] = 4,
    bwlimit: BwOpt = None,
    node_ssh_config: NodeSshOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what each node would get.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Download a Hugging Face model where the recipe's nodes need it, pinned to one commit, verified by size
    and sha256 against the Hub; resumable. The token is HF_TOKEN or the hub login's (never printed or stored)."""
    r = resolve(recipe, set_ or []).recipe if recipe else None
    if ref is None:
        if r is None or not r.model.is_hub_id:
            raise HubError("nothing to pull: give ORG/NAME, or a recipe whose model.source is a Hub id",
                           fix="forklift model pull ORG/NAME[@REVISION] [--recipe RECIPE]")
        ref = r.model.source + (f"@{r.model.revision}" if r.model.revision else "")
    with node_bars(disable=json_out or dry_run) as bars:
        opts = CopyOptions(bwlimit_mb=bwlimit, node_ssh_config=node_ssh_config, on_progress=bars)
        report = pull(ref, r, via=via, python=python, workers=workers, dry_run=dry_run, on_progress=bars,
                      options=opts)
    if json_out:
        print_json(report.to_json())
    else:
        print_pull(report, dry_run=dry_run)
    report.raise_if_failed()


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
