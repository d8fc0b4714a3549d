"""``forklift stack plan|up|down|status``: several models on shared nodes, one run per member."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from forklift.cli.common import ForceOpt, JsonOpt, console, err_console, print_json

stack_app = typer.Typer(help="Several models on shared nodes: planned together, started largest first.",
                        no_args_is_help=True)
StackArg = Annotated[str, typer.Argument(help="Path of a STACK.yaml.")]
StackNameArg = Annotated[str, typer.Argument(help="The stack's name (or the path of its STACK.yaml).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Plan jointly and print the order; start nothing.")]


def _name(ref: str) -> str:
    from pathlib import Path

    if ref.endswith((".yaml", ".yml")) and Path(ref).is_file():
        from forklift.stack import load

        return load(ref)[0].name
    from forklift.errors import RecipeError
    from forklift.stack.schema import checked_name

    try:
        return checked_name(ref)
    except ValueError as exc:
        raise RecipeError(f"invalid stack name {ref!r}: {exc}",
                          fix="Pass the stack's name (its `name:`) or the path of its STACK.yaml.") from None


@stack_app.command("plan")
def plan_cmd(stack_file: StackArg, json_out: JsonOpt = False) -> None:
    """The joint plan: each member's fixed memory and KV budget per shared device, the cores each member's ranks
    compute on where vLLM-CPU members share a host, and the start order."""
    from forklift.stack import joint_plan, load

    stack, base = load(stack_file)
    joint = joint_plan(stack, base)
    if json_out:
        print_json(joint.to_json())
        return
    console.print(joint.table(), highlight=False, markup=False)
    for n in joint.order:
        console.print(f"{stack.run_name(n)}: --set {' --set '.join(joint.sets[n])}", highlight=False)
    console.print(f"start order (largest first): {', '.join(joint.order)}", highlight=False)


@stack_app.command("up")
def up_cmd(stack_file: StackArg, json_out: JsonOpt = False, force: ForceOpt = False, dry_run: DryRunOpt = False,
           ) -> None:
    """Plan jointly, then start each member largest first; each must stream a real token before the next. Members
    already serving are left alone (run it again to bring back one that died); a member that fails stops the ones
    this call started, in reverse."""
    if dry_run:
        plan_cmd(stack_file, json_out)
        return
    from forklift.stack import load, stack_up

    stack, base = load(stack_file)
    t0 = time.monotonic()

    def on_event(member: str, phase: str, detail: str) -> None:
        err_console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/] {member}: {phase} {detail[:70]}", highlight=False)

    result = stack_up(stack, base, source=stack_file, on_event=on_event, force=force)
    if json_out:
        print_json(result.to_json())
        return
    for m, st in result.serving.items():
        console.print(f"[green]serving[/] {st.name}: {st.served_name} at {st.endpoint}/v1 (already; left as it "
                      "was" + ("; its settings differ from this plan: `forklift down` it and run `stack up` again"
                               if m in result.differs else "") + ")", highlight=False)
    for r in result.started.values():
        console.print(f"[green]ready[/] {r.record.name}: {r.record.served_name} at {r.record.endpoint}/v1 "
                      f"(ready in {r.ready_s:.1f} s)", highlight=False)
    console.print(f"next: `forklift gateway up {stack_file}`, `forklift stack down {stack.name}`", highlight=False)


@stack_app.command("down")
def down_cmd(stack: StackNameArg, json_out: JsonOpt = False) -> None:
    """Stop every member, in reverse start order."""
    from forklift.stack import stack_down

    done = stack_down(_name(stack))
    if json_out:
        print_json({m: (None if d is None else {"name": d.name, "was_running": d.was_running, "seconds": d.seconds})
                    for m, d in done.items()})
        return
    for m, d in done.items():
        console.print(f"{m}: " + ("no run record" if d is None else f"stopped {d.name} in {d.seconds:.1f} s"),
                      highlight=False)


@stack_app.command("status")
def status_cmd(stack: StackNameArg, json_out: JsonOpt = False) -> None:
    """Each member's run: state, endpoint, served name; exit 1 unless every member serves."""
    from forklift.stack import stack_status

    found = stack_status(_name(stack))
    if json_out:
        print_json({m: (None if s is None else s.to_json()) for m, s in found.items()})
    else:
        for m, s in found.items():
            console.print(f"{m}: " + ("no run record" if s is None else f"{s.status} {s.name} {s.served_name} at "
                                      f"{s.endpoint}"), highlight=False)
    if any(s is None or s.status != "ready" for s in found.values()):
        raise typer.Exit(1)  # with --json too: scripts read the exit code


def register(app: typer.Typer) -> None:
    app.add_typer(stack_app, name="stack")
