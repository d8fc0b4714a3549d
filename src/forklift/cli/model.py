"""``forklift model prepare``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, print_json
from forklift.cluster.sync import sync
from forklift.errors import ModelError
from forklift.launch.hosts import runners_for
from forklift.model import bundled
from forklift.model.resolve import local_path
from forklift.recipe import resolve
from forklift.recipe.schema import BUNDLED_PREFIX
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


@model_app.command("sync")
def sync_cmd(
    recipe: RecipeArg = None,
    set_: SetOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what each node would get.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Copy the recipe's model to every node that lacks it (rsync over ssh); with PP only that node's shards."""
    r = resolve(recipe, set_ or []).recipe
    model_dir = local_path(r.model, prepare_bundled=True)
    result = sync(r, model_dir, runners_for(r, ssh_config=default_ssh_config()), dry_run=dry_run)
    if json_out:
        print_json([x.__dict__ for x in result])
        return
    for x in result:
        moved = "" if x.transferred is None else f", sent {x.transferred / 2**30:.2f} GiB"
        console.print(f"{x.host:16} {x.dest}: {len(x.files)} files, {x.bytes / 2**30:.2f} GiB needed{moved}"
                      + (f" ({x.note})" if x.note else "") + (" [dry run]" if dry_run else ""), highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
