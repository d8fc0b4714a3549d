"""``forklift up``: start a deployment and wait until it really answers."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from forklift import recipe as recipes
from forklift.cli.common import JsonOpt, NameOpt, RecipeArg, SetOpt, console, err_console, print_json
from forklift.cluster.inventory import resolve as resolve_inventory
from forklift.cluster.phases import PHASE_NAMES
from forklift.cluster.preflight import PreflightReport
from forklift.cluster.up import preflight, up

PreflightOpt = Annotated[bool, typer.Option("--preflight-only", help="Check every node, start nothing.")]


def _print_report(report: PreflightReport) -> None:
    colour = {"ok": "green", "warn": "yellow", "fail": "red"}
    for c in report.checks:
        console.print(f"[{colour[c.status]}]{c.status:4}[/] {c.node:16} {c.name:13} {c.detail}", highlight=False)
        if c.fix and c.status != "ok":
            console.print(f"     fix: {c.fix}", highlight=False)


def up_cmd(recipe: RecipeArg = None, name: NameOpt = None, set_: SetOpt = None, json_out: JsonOpt = False,
           preflight_only: PreflightOpt = False) -> None:
    """Start the recipe's deployment, detached; exit 0 once a streamed chat completion returns a token."""
    r = resolve_inventory(recipes.load(recipe, set_ or []))
    run_name = name or r.name or "default"
    if preflight_only:
        pre = preflight(r, run_name, raise_on_failure=False)
        if json_out:
            print_json({"ok": pre.report.ok, "versions": pre.report.versions,
                        "checks": [c.__dict__ for c in pre.report.checks]})
        else:
            _print_report(pre.report)
        pre.report.raise_if_failed()
        return
    t0 = time.monotonic()
    steps = ["preflight", "prepare", *PHASE_NAMES]
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TextColumn("{task.fields[detail]}"),
                  TimeElapsedColumn(), console=err_console, transient=False) as progress:
        task = progress.add_task("preflight", total=len(steps), detail="")

        def on_event(phase: str, detail: str) -> None:
            done = steps.index(phase) if phase in steps else 0
            progress.update(task, description=phase, completed=done, detail=detail[:60])
            if phase != "ready":
                progress.log(f"[dim]{time.monotonic() - t0:6.1f}s[/] {phase} {detail}")

        result = up(r, name=run_name, on_event=on_event)
        progress.update(task, completed=len(steps))
    rec = result.record
    if json_out:
        print_json({"name": rec.name, "endpoint": rec.endpoint, "served_name": rec.served_name,
                    "ready_s": result.ready_s, "phases": result.phases, "first_token": result.first_token,
                    "vllm_version": rec.vllm_version, "ranks": [x.model_dump() for x in rec.ranks]})
        return
    console.print(f"[green]ready[/] {rec.name}: {rec.served_name} at {rec.endpoint}/v1 "
                  f"(vLLM {rec.vllm_version}, ready in {result.ready_s:.1f} s, first token {result.first_token!r})")
    console.print(f"next: `forklift check {rec.name}`, `forklift logs {rec.name}`, `forklift down {rec.name}`")


def register(app: typer.Typer) -> None:
    app.command("up")(up_cmd)
