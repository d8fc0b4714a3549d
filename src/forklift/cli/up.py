"""``forklift up``: start a deployment and wait until it really answers."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from forklift.cli.check_table import print_checks, print_warnings
from forklift.cli.common import (
    ApplyOpt,
    ForceOpt,
    JsonOpt,
    NameOpt,
    RecipeArg,
    SetOpt,
    console,
    err_console,
    print_json,
)
from forklift.cluster.phases import PHASE_NAMES
from forklift.cluster.up import preflight, up
from forklift.plan import for_launch
from forklift.recipe import Deployment, resolve
from forklift.record import RunRecord

PreflightOpt = Annotated[bool, typer.Option("--preflight-only", help="Check every node, start nothing.")]
SuperviseOpt = Annotated[bool, typer.Option("--supervise", help="Once it serves, keep it serving: start the "
                                                               "supervisor detached (the recipe's `supervise:`).")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Refuse when a node check warns (no guard or swap on "
                                                           "unified-memory nodes).")]


def _preflight_only(plan_name: str, recipe: str | None, sets: list[str], json_out: bool, force: bool) -> None:
    plan = for_launch(resolve(recipe, sets), force=True)
    pre = preflight(plan, plan_name)
    if json_out:
        print_json({"ok": pre.report.ok, "versions": pre.report.versions, "stacks": pre.report.stacks,
                    "checks": [c.to_json() for c in pre.report.checks]})
    else:
        print_checks(pre.report.checks, title=f"preflight: {plan_name}")
    pre.report.raise_if_failed()


def _mem_before(deployment: Deployment) -> dict[str, int]:
    from forklift.supervise import baseline

    return baseline(deployment.recipe)


def _supervise(rec: RunRecord, mem_before: dict[str, int]) -> tuple[int | None, str | None, str]:
    """Start the supervisor (on the head when the recipe says so): its pid, the remote head it runs on, its output."""
    from forklift.supervise import SUPERVISOR_LOG
    from forklift.supervise.remote import start

    started = start(rec, mem_before)
    if started.head is not None:
        return started.pid, started.head.host, started.head.log or "?"
    return started.pid, None, str(rec.path().parent / SUPERVISOR_LOG)


def up_cmd(recipe: RecipeArg = None, name: NameOpt = None, set_: SetOpt = None, json_out: JsonOpt = False,
           preflight_only: PreflightOpt = False, force: ForceOpt = False, strict: StrictOpt = False,
           apply: ApplyOpt = False, supervise: SuperviseOpt = False) -> None:
    """Start the recipe's deployment, detached; exit 0 once a streamed chat completion returns a token."""
    deployment = resolve(recipe, set_ or [])
    run_name = name or deployment.name
    if preflight_only:
        _preflight_only(run_name, recipe, set_ or [], json_out, force)
        return
    plan = for_launch(deployment, force=force, apply=apply)
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

        mem_before = _mem_before(deployment) if supervise else {}
        result = up(plan, name=run_name, on_event=on_event, force=force, strict=strict)
        progress.update(task, completed=len(steps))
    print_warnings(result.warnings)
    rec = result.record
    supervisor, supervisor_on, supervisor_log = (_supervise(rec, mem_before) if supervise else (None, None, None))
    if json_out:
        print_json({"name": rec.name, "endpoint": rec.endpoint, "served_name": rec.served_name,
                    "ready_s": result.ready_s, "phases": result.phases, "first_token": result.first_token,
                    "vllm_version": rec.vllm_version, "ranks": [x.model_dump() for x in rec.ranks],
                    "warnings": [w.to_json() for w in result.warnings], "supervisor_pid": supervisor,
                    "supervisor_on": supervisor_on})
        return
    console.print(f"[green]ready[/] {rec.name}: {rec.served_name} at {rec.endpoint}/v1 "
                  f"(vLLM {rec.vllm_version}, ready in {result.ready_s:.1f} s, first token {result.first_token!r})")
    if supervisor is not None:
        where = f" on {supervisor_on}" if supervisor_on else ""
        console.print(f"supervised by pid {supervisor}{where} (output {supervisor_log}); "
                      f"`forklift status {rec.name}` shows it, `forklift down {rec.name}` stops both", highlight=False)
    console.print(f"next: `forklift check {rec.name}`, `forklift logs {rec.name}`, `forklift down {rec.name}`")


def register(app: typer.Typer) -> None:
    app.command("up")(up_cmd)
