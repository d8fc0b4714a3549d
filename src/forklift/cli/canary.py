"""``forklift canary RECIPE --set ...``: try a change against the running baseline; keep it or roll back."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.markup import escape

from forklift import record as records
from forklift.canary import DEFAULT_THRESHOLD
from forklift.canary import flow as canary_flow
from forklift.cli.common import ForceOpt, JsonOpt, NameOpt, RecipeArg, SetOpt, console, err_console, print_json
from forklift.cli.compare import VERDICT_STYLE, GateOpt, ThresholdOpt, comparison_table, gate_list, wide
from forklift.errors import CanaryError


def _run_name(recipe: str | None, name: str | None) -> str:
    """--name; else RECIPE when a run has that name; else the run `forklift up RECIPE` would have made."""
    if name:
        return name
    if recipe and recipe in records.list_names():
        return recipe
    if recipe is None:
        return records.resolve_name(None)
    from forklift.recipe import resolve

    return resolve(recipe).name


def _show(out: canary_flow.Outcome) -> None:
    if out.patch_check is not None:
        bad = out.patch_check.broken
        console.print(f"patches against {out.patch_check.against}: " +
                      ("ok" if not bad else ", ".join(f"{r['id']} {r['status']}" for r in bad)), highlight=False)
    if out.startup:
        console.print(f"[bold red]start failed[/]: {escape(str(out.startup['message']))}", highlight=False)
        if out.startup.get("doctor"):
            console.print(f"[bold]doctor[/]: {escape(str(out.startup['doctor']))}", highlight=False)
    for c in (out.checks, out.bench):
        if c is not None:
            wide().print(comparison_table(c))
    for note in out.notes:
        console.print(f"[dim]note: {note}[/]", highlight=False)
    style = VERDICT_STYLE.get(out.verdict, "")
    console.print(f"[{style}]{out.verdict}[/]: {out.reason}", highlight=False)
    if out.kept:
        console.print(f"kept the candidate as {out.candidate_name}")
    elif out.restored is not None:
        r = out.restored
        console.print(f"baseline {out.name} restored and answering at {r.get('endpoint')}" if r.get("ok")
                      else f"[bold red]baseline NOT restored[/]: {r.get('error') or r.get('checks')}", highlight=False)
    console.print(f"report: {out.folder / 'report.html'}")


def canary_cmd(
    recipe: RecipeArg = None,
    set_: SetOpt = None,
    name: NameOpt = None,
    keep_on_ok: Annotated[bool, typer.Option("--keep-on-ok", help="Keep the candidate when the verdict is ok "
                                                                  "(default: restore the baseline).")] = False,
    beside: Annotated[bool, typer.Option("--beside", help="Start the candidate beside the baseline (next port) when "
                                                          "the plans say both fit, instead of replacing it.")] = False,
    threshold: ThresholdOpt = DEFAULT_THRESHOLD,
    gate: GateOpt = None,
    rebench: Annotated[bool, typer.Option("--rebench-baseline/--no-rebench-baseline",
                                          help="Bench the baseline again right before the swap and compare against "
                                               "that (same window; default).")] = True,
    repeats: Annotated[int, typer.Option("--repeats", help="Bench runs per side; with --beside they alternate "
                                                           "baseline / candidate while both run.")] = 1,
    prior_noise: Annotated[float | None, typer.Option(
        "--prior-noise", help="Run-to-run noise of one run from a fresh start (0.05 = 5%), as for compare.")] = None,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Try a change (a vLLM venv or image, a setting) against the running baseline: patch check, start the
    candidate, the baseline's check tier and bench workload, compare; ok / regressed / inconclusive / broken.
    Exit 1 unless ok (inconclusive included: the candidate was not shown to be as fast)."""
    if not set_:
        raise CanaryError("nothing to try: pass the change with --set", fix="For example --set runtime.python="
                          "/opt/vllm-next/bin/python, --set runtime.image=IMAGE or --set serve.max_num_seqs=8.")
    run_name = _run_name(recipe, name)
    t0 = time.monotonic()

    def on_event(phase: str, detail: str) -> None:
        if not json_out:
            err_console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/] {phase}: {detail}", highlight=False)

    opts = canary_flow.Options(sets=tuple(set_), keep_on_ok=keep_on_ok, beside=beside, threshold=threshold,
                               gate=gate_list(gate), force=force, rebench_baseline=rebench, repeats=repeats,
                               prior_noise=prior_noise)
    out = canary_flow.run(run_name, opts, on_event=on_event)
    if json_out:
        print_json(out.to_json())
    else:
        _show(out)
    if out.restored is not None and not out.restored.get("ok"):
        raise typer.Exit(3)
    if out.verdict != "ok":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("canary")(canary_cmd)
