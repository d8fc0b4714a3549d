"""``forklift render``: the exact per-rank commands ``up`` would run."""

from __future__ import annotations

import shlex

import typer

from forklift import recipe as recipes
from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, print_json
from forklift.launch.render import render
from forklift.model.bundled import target_dir
from forklift.model.resolve import local_path


def render_cmd(recipe: RecipeArg = None, set_: SetOpt = None, json_out: JsonOpt = False) -> None:
    """Print per-rank argv, env and start order (workers first, head last)."""
    r = recipes.load(recipe, set_ or [])
    model_path = target_dir(r.model.bundled_name) if r.model.is_bundled else local_path(r.model)
    launch = render(r, model_path)
    if json_out:
        print_json(launch.model_dump(mode="json"))
        return
    console.print(f"[bold]{r.name}[/]: {len(launch.ranks)} rank(s), endpoint {launch.endpoint}")
    for order, rl in enumerate(launch.ranks, 1):
        role = "head" if rl.rank == 0 else "worker (headless)" if rl.headless else "worker"
        console.print(f"\n[bold]{order}. rank {rl.rank}[/] on {rl.host} ({role})")
        for k, v in sorted(rl.env.items()):
            console.print(f"  env {k}={v}", markup=False, highlight=False)
        for k, v in sorted(rl.secret_env.items()):
            console.print(f"  env {k}=<from ${v}>", markup=False, highlight=False)
        console.print("  " + shlex.join(rl.argv), markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("render")(render_cmd)
