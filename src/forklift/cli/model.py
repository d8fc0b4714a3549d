"""``forklift model prepare``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from forklift.cli.common import JsonOpt, console, print_json
from forklift.errors import ModelError
from forklift.model import bundled
from forklift.recipe.schema import BUNDLED_PREFIX

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


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
