"""``forklift node check|apply|revert|guard``: ready hosts for big-model loads, provably and reversibly."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Annotated

import typer

from forklift import node
from forklift.cli.check_table import print_checks
from forklift.cli.common import JsonOpt, console, err_console, print_json
from forklift.errors import ForkliftError, RecipeError
from forklift.hardware.profiles import node_profile
from forklift.launch.hosts import runners_for
from forklift.names import check_ssh_target
from forklift.recipe import bundled_names, resolve
from forklift.runner import LocalRunner, Runner
from forklift.runner.ssh import SshRunner, default_ssh_config

LOCAL = ("localhost", "local", "127.0.0.1")
STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}

NodesArg = Annotated[list[str] | None, typer.Argument(
    help="Nodes: a recipe (bundled name or YAML file: all its nodes), 'localhost', or SSH targets (user@host[:port]).")]
ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="gb10, default, a profile YAML, or auto.")]
RootOpt = Annotated[str, typer.Option("--root", help="Write files under this directory instead of / (kernel "
                                      "values are only read; nothing live changes).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]

node_app = typer.Typer(help="Prepare nodes: sysctl, swap, the OOM/page-cache guard. Checkable and reversible.",
                       no_args_is_help=True)


def _runner(target: str) -> Runner:
    if target in LOCAL:
        return LocalRunner()
    try:
        check_ssh_target(target)
    except ValueError as exc:
        raise RecipeError(f"{target!r} is neither a recipe nor an SSH target: {exc}",
                          fix="Pass a bundled recipe name (`forklift recipe list`), a recipe YAML file, 'localhost', "
                              "or user@host[:port].") from None
    return SshRunner(target)


def _is_recipe(arg: str) -> bool:
    """A bundled recipe's name or a recipe file; a name ending .yaml/.yml is a recipe even when it is missing (the
    recipe loader then says so; as an ssh host it would only fail to connect)."""
    return arg in bundled_names() or arg.endswith((".yaml", ".yml"))


def _targets(args: list[str] | None, profile: str) -> list[tuple[str, Runner, str]]:
    """(name, runner, profile) for every node named: a recipe expands to its nodes, each with the profile its
    hardware implies (its profile's node_profile: gb10 for GB10 nodes) unless --profile names one."""
    out: list[tuple[str, Runner, str]] = []
    for arg in args or ["localhost"]:
        if not _is_recipe(arg):
            out.append((arg, _runner(arg), profile))
            continue
        recipe = resolve(arg).recipe
        runners = runners_for(recipe, ssh_config=default_ssh_config())
        for i, n in enumerate(recipe.nodes):
            chosen = profile if profile != "auto" else (node_profile(n.hardware) or "auto")
            out.append((n.host, runners[i], chosen))
    return out


@node_app.command("check")
def check_cmd(nodes: NodesArg = None, profile: ProfileOpt = "auto", root: RootOpt = "/",
              json_out: JsonOpt = False) -> None:
    """Check each node against a profile: sysctls, swap, guard health, display manager, page cache, other guards and
    logind RemoveIPC."""
    results: list[node.CheckResult] = []
    for target, runner, prof in _targets(nodes, profile):
        try:
            results += node.check(runner, node.resolve_profile(runner, prof), root=root)
        except ForkliftError as exc:
            results.append(node.CheckResult("reachable", "fail", exc.message, {}, exc.fix, host=target))
    if json_out:
        print_json([r.to_json() for r in results])
    else:
        print_checks(results)
    if node.worst(results) == "fail":
        raise typer.Exit(1)


@node_app.command("apply")
def apply_cmd(nodes: NodesArg = None, profile: ProfileOpt = "auto", dry_run: DryRunOpt = False,
              swap_gib: Annotated[float | None, typer.Option("--swap-gib", help="Swap file size (0: none).")] = None,
              stop_display_manager: Annotated[bool, typer.Option("--stop-display-manager")] = False,
              root: RootOpt = "/", json_out: JsonOpt = False) -> None:
    """Apply a profile (idempotent): sysctl file, swap file, guard unit; records what was there for revert."""
    out = []
    for _target, runner, name in _targets(nodes, profile):
        prof = node.resolve_profile(runner, name).with_swap_gib(swap_gib)
        prof = prof.with_stop_display_manager(stop_display_manager)
        try:
            res = node.apply(runner, prof, root=root, dry_run=dry_run)
        except node.SudoRequiredError as exc:
            _print_by_hand(exc)
            raise typer.Exit(exc.exit_code) from exc
        out.append(res.plan.to_json() | {"done": res.done, "dry_run": dry_run})
        if not json_out:
            _print_plan(res.plan, res.done, dry_run, "apply")
    if json_out:
        print_json(out)


@node_app.command("revert")
def revert_cmd(nodes: NodesArg = None, dry_run: DryRunOpt = False, root: RootOpt = "/",
               json_out: JsonOpt = False) -> None:
    """Undo `node apply`: files byte-identical, sysctls and units as they were, swap file removed."""
    out = []
    for _target, runner, _profile in _targets(nodes, "auto"):
        try:
            res = node.revert(runner, root=root, dry_run=dry_run)
        except node.SudoRequiredError as exc:
            _print_by_hand(exc)
            raise typer.Exit(exc.exit_code) from exc
        out.append(res.plan.to_json() | {"done": res.done, "dry_run": dry_run})
        if not json_out:
            _print_plan(res.plan, res.done, dry_run, "revert")
    if json_out:
        print_json(out)


@node_app.command("guard")
def guard_cmd(
    foreground: Annotated[bool, typer.Option("--foreground", help="Run the guard in this process.")] = False,
    profile: ProfileOpt = "auto",
    heartbeat: Annotated[str | None, typer.Option("--heartbeat", help="Heartbeat file path.")] = None,
) -> None:
    """Start the guard: the installed systemd unit, or in the foreground where there is no systemd."""
    runner = LocalRunner()
    how = node.start_guard(runner, foreground=foreground)
    if how.mode == "systemd":
        console.print(f"{how.reason}; `forklift node check` shows its heartbeat")
        return
    err_console.print(f"[yellow]{how.reason}[/]" if not foreground else "guard running in the foreground (Ctrl-C)",
                      soft_wrap=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s forklift-guard %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        node.run_guard_foreground(node.resolve_profile(runner, profile), heartbeat=heartbeat, stop=stop)
    except KeyboardInterrupt:
        stop.set()


def _print_plan(plan: node.ApplyPlan, done: list[str], dry_run: bool, verb: str) -> None:
    where = f" under {plan.root}" if plan.root not in ("", "/") else ""
    if not plan.steps:
        console.print(f"{plan.host}: nothing to {verb}{where} (profile {plan.profile})")
    elif dry_run:
        console.print(f"{plan.host}: would {verb}{where} (profile {plan.profile}):")
        for s in plan.steps:
            console.print(f"  - {s.summary}", highlight=False)
            console.print(f"    {s.display(plan.sudo)}", highlight=False, markup=False, style="dim")
    else:
        console.print(f"{plan.host}: {verb} done{where} ({len(done)} steps, profile {plan.profile})")
        for summary in done:
            console.print(f"  - {summary}", highlight=False)
    for s in plan.skipped_live:
        console.print(f"  [dim]not done (files-only): {s.summary}[/]", highlight=False)
    for note in plan.notes:
        console.print(f"  [yellow]note[/]: {note}", highlight=False)


def _print_by_hand(exc: node.SudoRequiredError) -> None:
    err_console.print(f"[bold red]{type(exc).__name__}[/]: {exc.message}", highlight=False)
    err_console.print("run these as root on that node, in order:", highlight=False)
    for cmd in exc.commands:
        print(cmd)


def register(app: typer.Typer) -> None:
    app.add_typer(node_app, name="node")
