"""``forklift tune RECIPE --workload chat --slo ttft_p95=2000,tpot_p95=80 --budget 30``: measured settings that
beat vLLM's defaults on the owner's workload (the library is ``forklift.tune``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, err_console, print_json
from forklift.tune import flow


def tune_cmd(
    recipe: RecipeArg = None,
    workload: Annotated[str, typer.Option("--workload", "-w", help="chat, rag, code, agent, summarize, or "
                                                                   "a JSONL file of {prompt, output_len}.")] = "chat",
    slo: Annotated[str, typer.Option("--slo", help="Latency objectives, e.g. ttft_p95=2000,tpot_p95=80 "
                                                   "(ms; '2s' works).")] = "ttft_p95=2000,tpot_p95=100",
    budget: Annotated[float, typer.Option("--budget", help="Minutes the whole search may take.")] = 30.0,
    sets: SetOpt = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", help="Users (default: the workload "
                                                                                "class's).")] = None,
    size: Annotated[float, typer.Option("--size", help="Scale of the synthetic prompts (0.5: half as long).")] = 1.0,
    requests: Annotated[int, typer.Option("--requests", help="Distinct requests of a synthetic workload (sent in "
                                                             "order, cycling).")] = 64,
    run_s: Annotated[float, typer.Option("--run-seconds", help="Seconds per bench run.")] = 60.0,
    max_runs: Annotated[int, typer.Option("--max-runs", help="Bench runs per candidate start (at most).")] = 3,
    max_candidates: Annotated[int, typer.Option("--candidates", help="At most this many candidates besides the "
                                                                     "baseline.")] = 6,
    confirm: Annotated[int, typer.Option("--confirm", help="A/B rounds (baseline, winner restarted) after the "
                                                           "search.")] = 1,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for tune.json, tune.md, pareto.html.")] = None,
    name: Annotated[str, typer.Option("--name", "-n", help="Run name the candidates start under.")] = "tune",
    prior_noise: Annotated[float | None, typer.Option(
        "--prior-noise", help="Run-to-run noise of one run from a fresh start (0.05 = 5%); default: vLLM-CPU's "
                              "measured 9%. The session's own spread is used when larger.")] = None,
    candidate: Annotated[list[str] | None, typer.Option(
        "--candidate", help="Measure this candidate instead of the plan's grid: 'serve.KEY=VALUE ...' "
                            "(repeatable; still checked by the plan).")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Write the winner into the recipe file (with the evidence "
                                                        "as a comment) when it beat the baseline with "
                                                        "confidence.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the candidates the plan keeps; start "
                                                            "nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Start each candidate the plan says fits, bench the workload under the SLO, and report goodput with
    intervals (server starts as the unit), a table and a Pareto page. Exit 0; 2 for bad input."""
    req = flow.Request(recipe or "default", (workload,), slo, budget, tuple(sets or ()), concurrency, size, run_s,
                       max_runs, max_candidates, confirm, apply, dry_run, out_dir, name,
                       prior_noise, tuple(candidate or ()), requests)

    def progress(text: str) -> None:
        if not json_out:
            err_console.print(f"[dim]{text}[/]", highlight=False)

    result = flow.run(req, on_event=progress)
    if json_out:
        print_json(result.to_json())
        return
    if dry_run:
        t = Table("candidate", "sets", "predicted goodput req/s", "ttft_p95 ms", "tpot_p95 ms",
                  title="candidates the plan keeps, in order (predicted)")
        for c in result.space.candidates:
            p95 = c.predicted_p95_ms
            t.add_row(c.name, " ".join(c.sets) or "-", f"{c.predicted:.3g}", f"{p95.get('ttft_p95', 0):.4g}",
                      f"{p95.get('tpot_p95', 0):.3g}")
        console.print(t)
        for s, why in result.space.pruned:
            console.print(f"[dim]pruned[/] {s}: {why}", highlight=False)
        for n in result.space.notes:
            console.print(f"[yellow]note[/]: {n}", highlight=False)
        return
    t = Table("workload", "candidate", "status", "starts/runs", "goodput req/s", "interval", "tok/s",
              *[f"{x.key} ms" for x in result.slo.limits], title=f"tune {req.recipe} (SLO {result.slo.text()})")
    for r in result.table:
        iv = r["goodput_interval"]
        span = "-" if iv is None else f"{iv[0]:.3g}..{iv[1]:.3g}"
        t.add_row(r["workload"], ("* " if r["winner"] else "") + r["candidate"], r["status"],
                  f"{r['starts']}/{r['runs']}", "-" if r["goodput_req_s"] is None else f"{r['goodput_req_s']:.3g}",
                  span, "-" if r["output_tok_s"] is None else f"{r['output_tok_s']:.1f}",
                  *["-" if r.get(f"{x.key}_ms") is None else f"{r[f'{x.key}_ms']:.0f}" for x in result.slo.limits])
    console.print(t)
    assert result.outcome is not None
    for line in flow.evidence_lines(result)[1:]:
        console.print(line, highlight=False)
    for n in result.outcome.notes:
        console.print(f"[yellow]note[/]: {n}", highlight=False)
    if result.applied is not None:
        console.print(("applied: " + " ".join(result.applied["sets"])) if result.applied.get("applied")
                      else f"not applied: {result.applied['reason']}", highlight=False)
    console.print(f"files: {result.files.get('md')}, {result.files.get('html')}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_cmd)
