"""``forklift render``: the exact per-rank commands ``up`` would run."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml

from forklift import recipe as recipes
from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, print_json
from forklift.cluster.inventory import resolve as resolve_inventory
from forklift.errors import ModelNotFoundError, RecipeError
from forklift.launch.k8s import DEFAULT_IMAGE, leader_worker_set
from forklift.launch.render import render
from forklift.model.bundled import target_dir
from forklift.model.resolve import local_path
from forklift.recipe.schema import DockerRuntime, Recipe, VenvRuntime


def _model_path(r: Recipe) -> Path:
    if r.model.is_bundled:
        return target_dir(r.model.bundled_name)
    try:
        return local_path(r.model)
    except ModelNotFoundError:
        if r.model.source.startswith("/"):
            return Path(r.model.source)  # only the nodes have it
        raise


def render_cmd(
    recipe: RecipeArg = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
    runtime: Annotated[str | None, typer.Option("--runtime", help="Render for this runtime: venv or docker.")] = None,
    image: Annotated[str | None, typer.Option("--image", help="Image for --runtime docker / --format k8s.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text, json or k8s (a LeaderWorkerSet manifest).")] = "text",
) -> None:
    """Print per-rank argv, env and start order (workers first, head last), or a k8s manifest."""
    r = resolve_inventory(recipes.load(recipe, set_ or []))
    if runtime == "docker" and r.runtime.kind != "docker":
        r = r.model_copy(update={"runtime": DockerRuntime(image=image or DEFAULT_IMAGE)})
    elif runtime == "venv" and r.runtime.kind != "venv":
        r = r.model_copy(update={"runtime": VenvRuntime()})
    elif runtime not in (None, "venv", "docker"):
        raise RecipeError(f"--runtime {runtime}: expected venv or docker", fix="Use --runtime venv or docker.")
    model_path = _model_path(r)
    if fmt == "k8s":
        sys.stdout.write(yaml.safe_dump(leader_worker_set(r, str(model_path), image=image), sort_keys=False))
        return
    launch = render(r, model_path)
    if json_out or fmt == "json":
        print_json(launch.model_dump(mode="json"))
        return
    ray = f" + {len(launch.ray)} Ray process(es)" if launch.ray else ""
    console.print(f"[bold]{r.name}[/]: {len(launch.ranks)} engine rank(s){ray}, runtime {launch.runtime}, "
                  f"endpoint {launch.endpoint}")
    for order, rl in enumerate(launch.processes, 1):
        role = rl.role if rl.role != "engine" else "head" if rl.rank == 0 else "worker (headless)"
        console.print(f"\n[bold]{order}. rank {rl.rank}[/] on {rl.host} ({role})")
        for k, v in sorted(rl.env.items()):
            console.print(f"  env {k}={v}", markup=False, highlight=False)
        for k, v in sorted(rl.secret_env.items()):
            console.print(f"  env {k}=<from ${v}>", markup=False, highlight=False)
        console.print("  " + shlex.join(rl.argv), markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("render")(render_cmd)
