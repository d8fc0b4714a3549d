"""``forklift up``: start a deployment and wait until it really answers."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from forklift import recipe as recipes
from forklift.cli.common import JsonOpt, NameOpt, RecipeArg, SetOpt, console, err_console, print_json
from forklift.cluster.hosts import runners_for
from forklift.cluster.inventory import resolve as resolve_inventory
from forklift.cluster.phases import PHASE_NAMES
from forklift.cluster.preflight import PreflightReport
from forklift.cluster.up import preflight, up
from forklift.errors import NodeError
from forklift.node import CheckResult
from forklift.recipe.schema import Recipe
from forklift.runner.fanout import fan_out
from forklift.runner.ssh import default_ssh_config

PreflightOpt = Annotated[bool, typer.Option("--preflight-only", help="Check every node, start nothing.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Start even when the plan says it will not fit.")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Refuse when a node check warns (no guard or swap on "
                                                           "unified-memory nodes).")]


def _node_checks(r: Recipe, strict: bool) -> None:
    """`forklift node`'s preflight on every node: warn (or refuse with --strict) on unready hosts."""
    from forklift.node import preflight as node_preflight
    from forklift.node import resolve_profile

    runners = runners_for(r, ssh_config=default_ssh_config())

    def one(idx: int) -> list[CheckResult]:
        name = "gb10" if r.nodes[idx].hardware == "gb10" else "auto"
        return node_preflight(runners[idx], resolve_profile(runners[idx], name))

    done = fan_out(((i, i) for i in runners), one)
    warns = [c for res in done.results.values() for c in res if c.status in ("warn", "fail")]
    for c in warns:
        err_console.print(f"[yellow]warn[/] {c.host}: {c.name}: {c.summary}" + (f" (fix: {c.fix})" if c.fix else ""),
                          highlight=False)
    if strict and warns:
        raise NodeError(f"{len(warns)} node check(s) warned and --strict is set",
                        fix="Run `forklift node apply` on those nodes, or drop --strict.")


def _print_report(report: PreflightReport) -> None:
    colour = {"ok": "green", "warn": "yellow", "fail": "red"}
    for c in report.checks:
        console.print(f"[{colour[c.status]}]{c.status:4}[/] {c.node:16} {c.name:13} {c.detail}", highlight=False)
        if c.fix and c.status != "ok":
            console.print(f"     fix: {c.fix}", highlight=False)


def up_cmd(recipe: RecipeArg = None, name: NameOpt = None, set_: SetOpt = None, json_out: JsonOpt = False,
           preflight_only: PreflightOpt = False, force: ForceOpt = False, strict: StrictOpt = False) -> None:
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
    _node_checks(r, strict)
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

        result = up(r, name=run_name, on_event=on_event, force=force)
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
