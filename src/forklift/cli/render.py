"""``forklift render``: the exact per-rank commands ``up`` would run, from the plan (no node is contacted)."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Annotated

import typer
import yaml
from rich.markup import escape

from forklift.cli.common import ApplyOpt, ForceOpt, JsonOpt, RecipeArg, SetOpt, console, print_json
from forklift.errors import RecipeError
from forklift.launch.k8s import DEFAULT_IMAGE, leader_worker_set
from forklift.launch.render import render
from forklift.patches import recipes as recipe_patches
from forklift.plan import Unplanned, for_launch
from forklift.recipe import exposure, resolve
from forklift.recipe.exposure import open_without_key
from forklift.recipe.runtime import check_image

RuntimeOpt = Annotated[str | None, typer.Option("--runtime", help="Render for this runtime: venv or docker.")]
ImageOpt = Annotated[str | None, typer.Option("--image", help="Image for --runtime docker / --format k8s.")]
FormatOpt = Annotated[str, typer.Option("--format", help="text, json or k8s (a LeaderWorkerSet manifest).")]


def shell_word(arg: str) -> str:
    """``shlex.quote`` that leaves a leading ``~/`` outside the quotes, so a pasted command still expands it."""
    if arg.startswith("~/"):
        return "~/" + shlex.quote(arg[2:]) if arg[2:] else "~/"
    return shlex.quote(arg)


def _runtime_sets(runtime: str | None, image: str | None) -> list[str]:
    if runtime is None:
        return []
    if runtime == "docker":  # the image as one JSON string (a flow value YAML reads as is): never spliced syntax
        return [f"runtime={json.dumps({'kind': 'docker', 'image': image or DEFAULT_IMAGE})}"]
    if runtime == "venv":
        return ["runtime={kind: venv}"]
    raise RecipeError(f"--runtime {runtime}: expected venv or docker", fix="Use --runtime venv or docker.")


def render_cmd(recipe: RecipeArg = None, set_: SetOpt = None, json_out: JsonOpt = False, runtime: RuntimeOpt = None,
               image: ImageOpt = None, fmt: FormatOpt = "text", force: ForceOpt = False,
               apply: ApplyOpt = False) -> None:
    """Print per-rank argv, env and start order (workers first, head last), or a k8s manifest."""
    if fmt not in ("text", "json", "k8s"):
        raise RecipeError(f"--format {fmt}: expected text, json or k8s", fix="Use --format text, json or k8s.")
    if image is not None:
        try:
            check_image(image)
        except ValueError as exc:
            raise RecipeError(f"--image {exc}", fix="Name an image such as vllm/vllm-openai:v0.32.0.") from None
    deployment = resolve(recipe, [*(set_ or []), *_runtime_sets(runtime, image)])
    plan = for_launch(deployment, force=force, apply=apply)
    if fmt == "k8s":
        manifest = leader_worker_set(plan, image=image)
        if json_out:  # the same manifest as JSON (kubectl reads both)
            print_json(manifest)
        else:
            sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False))
        return
    launch = render(plan)
    if json_out or fmt == "json":
        exposed = open_without_key(deployment.recipe)
        print_json({**launch.model_dump(mode="json"), "warnings": [exposed] if exposed else [],
                    "plan": plan.to_json() if isinstance(plan, Unplanned)
                    else {"fits": plan.fits, "error": plan.error, "decisions": plan.decisions.model_dump()}})
        return
    ray = f" + {len(launch.ray)} Ray process(es)" if launch.ray else ""
    console.print(f"[bold]{deployment.name}[/]: {len(launch.ranks)} engine rank(s){ray}, runtime {launch.runtime}, "
                  f"endpoint {launch.endpoint}")
    for note in recipe_patches.notes(deployment.recipe):  # forklift-patches
        console.print(f"note: {note}", markup=False, highlight=False)
    exposed = open_without_key(deployment.recipe)
    if exposed:
        console.print(f"[yellow]security[/]: {escape(exposed)}. {escape(exposure.FIX)}", highlight=False)
    if isinstance(plan, Unplanned):
        console.print(f"[yellow]no plan[/]: {plan.error}", highlight=False)
    elif not plan.fits:
        console.print(f"[yellow]the plan says this will not start[/]: {plan.error} (`forklift plan` for advice)",
                      highlight=False)
    for order, rl in enumerate(launch.processes, 1):
        role = rl.role if rl.role != "engine" else "head" if rl.rank == 0 else "worker (headless)"
        console.print(f"\n[bold]{order}. rank {rl.rank}[/] on {rl.host} ({role})")
        for k, v in sorted(rl.env.items()):
            console.print(f"  env {k}={v}", markup=False, highlight=False)
        for k, v in sorted(rl.secret_env.items()):
            console.print(f"  env {k}=<from ${v}>", markup=False, highlight=False)
        console.print("  " + " ".join(shell_word(a) for a in rl.argv), markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("render")(render_cmd)
