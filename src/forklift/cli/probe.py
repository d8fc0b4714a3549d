"""``forklift probe RECIPE``: measure the recipe's memory on its own nodes (dummy weights, stop once the KV cache
is sized) and keep it for ``plan``."""

from __future__ import annotations

import shlex
import time
from dataclasses import asdict
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, err_console, print_json
from forklift.cluster.phases import PHASE_NAMES
from forklift.cluster.probe import dry_run, probe
from forklift.recipe import resolve

DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the argv and env per node; start nothing.")]
NameOpt = Annotated[str | None, typer.Option("--name", "-n", help="Run name of the probe's processes "
                                                                  "(default: probe-RECIPE).")]
TimeoutOpt = Annotated[float | None, typer.Option("--timeout", help="Seconds to wait for the KV sizing "
                                                                    "(default: the recipe's timeouts.ready_s).")]


def probe_cmd(recipe: RecipeArg = None, set_: SetOpt = None, json_out: JsonOpt = False, name: NameOpt = None,
              dry: DryRunOpt = False, timeout: TimeoutOpt = None) -> None:
    """Start vLLM on the recipe's nodes with dummy weights, stop once the KV cache is sized; plan uses it."""
    deployment = resolve(recipe, set_ or [])
    if dry:
        procs = dry_run(deployment)
        if json_out:
            print_json({"processes": [asdict(x) for x in procs]})
            return
        for x in procs:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(x.env.items()))
            console.print(f"[bold]{x.host}[/] ({x.role} {x.rank}): {env} {shlex.join(x.argv)}", highlight=False,
                          soft_wrap=True)
        return
    t0 = time.monotonic()
    steps = ["preflight", "prepare", *PHASE_NAMES[:-2], "sized", "stopping"]
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TextColumn("{task.fields[detail]}"),
                  TimeElapsedColumn(), console=err_console, transient=False) as progress:
        task = progress.add_task("preflight", total=len(steps), detail="")

        def on_event(phase: str, detail: str) -> None:
            done = steps.index(phase) if phase in steps else 0
            progress.update(task, description=phase, completed=done, detail=detail[:60])
            progress.log(f"[dim]{time.monotonic() - t0:6.1f}s[/] {phase} {detail}")

        result = probe(deployment, name=name, on_event=on_event, timeout_s=timeout)
        progress.update(task, completed=len(steps))
    p = result.probe
    if json_out:
        print_json({"path": str(result.path), "wall_s": result.wall_s, "phases": result.phases,
                    "killed": result.killed, "probe": p.model_dump(mode="json")})
        return
    pool = f"{p.kv_pool_bytes / 1024**3:.2f} GiB" if p.kv_pool_bytes else "unknown"
    per = f", {p.kv_bytes_per_token:,.0f} B/token" if p.kv_bytes_per_token else ""
    console.print(f"[green]probed[/] {deployment.name} on {', '.join(p.hosts)} (vLLM {p.vllm_build}) in "
                  f"{result.wall_s:.1f} s: {p.kv_tokens:,} KV tokens, pool {pool}{per}"
                  + (f"; vLLM refused to start: {p.error}" if p.error else ""), highlight=False)
    for r in p.ranks:
        terms = [f"{k} {v:.2f} GiB" for k, v in (("weights", r.weights_gib), ("activation", r.activation_gib),
                                                 ("non-torch", r.non_torch_gib), ("CUDA graphs", r.cudagraph_gib),
                                                 ("KV", r.available_kv_gib or r.cpu_kv_gib)) if v is not None]
        console.print(f"  node {r.node} {r.host}: {', '.join(terms) or 'no memory lines'}", highlight=False)
    console.print(f"stored {result.path}; next: `forklift plan {recipe or 'default'}` uses it")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe_cmd)
