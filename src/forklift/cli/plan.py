"""``forklift plan RECIPE``: per-rank memory, KV capacity, max context and speed, before anything loads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from forklift import plan as planner
from forklift.cli import common
from forklift.cli.common import ApplyOpt, JsonOpt, RecipeArg, SetOpt, print_json
from forklift.errors import DoesNotFitError
from forklift.model import configs_index
from forklift.recipe import resolve

CalibrateOpt = Annotated[Path | None, typer.Option("--calibrate", help="Store the terms of this vLLM startup log.")]
ListOpt = Annotated[bool, typer.Option("--list-configs", help="List the model configs bundled for planning.")]
def _release(value: str | None) -> str | None:
    from forklift.plan.rules import check_release

    try:
        return None if value is None else check_release(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


VersionOpt = Annotated[str | None, typer.Option("--vllm-version", help="vLLM release the nodes run (sizing rules).",
                                                callback=_release)]


def plan_cmd(recipe: RecipeArg = None, set_: SetOpt = None, json_out: JsonOpt = False,
             calibrate: CalibrateOpt = None, vllm_version: VersionOpt = None,
             list_configs: ListOpt = False, apply: ApplyOpt = False) -> None:
    """Predict per-rank memory, KV tokens, max context and decode speed for a recipe."""
    if list_configs:
        if json_out:
            print_json([{"name": e.name, "note": e.note, "aliases": list(e.aliases)}
                        for e in configs_index.bundled_configs().values()])
            return
        for entry in configs_index.bundled_configs().values():
            common.console.print(f"[bold]{entry.name}[/]: {entry.note} (aliases: {', '.join(entry.aliases)})")
        return
    deployment = resolve(recipe, set_ or [])
    if calibrate is not None:
        planner.calibrate_from_log(deployment, calibrate, vllm_version=vllm_version)
    result = planner.make(deployment, vllm_version=vllm_version, apply=apply)
    if json_out:
        print_json(result.to_json())
    else:
        render(result)
    if not result.fits:
        if result.verdict == "too close to call":
            raise DoesNotFitError(result.error or "does not fit",
                                  fix=f"Too close to call: `forklift probe {result.recipe or 'RECIPE'}` measures it "
                                  "on the nodes, and the next plan uses the measurement.")
        fitting = [a for a in result.advice if a.fits] or result.advice
        fix = f"{fitting[0].action}: {' '.join('--set ' + s for s in fitting[0].set)}" if fitting else None
        raise DoesNotFitError(result.error or "does not fit", fix=fix or "See the notes above.")


def render(p: planner.Plan) -> None:
    from rich.table import Table

    console = common.console
    table = Table("rank", "host", "layers", "weights", "activation", "cuda graphs", "non-torch", "KV pool",
                  "KV B/token", title=f"{p.model} ({p.architecture}), tp={p.tp} pp={p.pp} dcp={p.dcp}  [GiB]")
    for r in p.ranks:
        cg = f"{r.cudagraph_gib:.2f}" + ("" if r.cudagraph_subtracted else " (n/s)")
        table.add_row(str(r.rank), r.host, f"{r.layer_start}-{r.layer_end - 1}", f"{r.weights_gib:.2f}",
                      f"{r.activation_gib:.2f}", cg, f"{r.non_torch_gib:.2f}", f"{r.kv_pool_gib:.2f}",
                      f"{r.kv_bytes_per_token:,}")
    console.print(table)
    if p.model_files is not None:
        render_files(p.model_files)
    verdict = {"fits": "[green]fits[/]", "does not fit": "[red]does not fit[/]"}.get(
        p.verdict, f"[yellow]too close to call[/] (vLLM would {'start' if p.fits else 'refuse'}, by "
        f"{p.kv_margin_gib or 0:+.2f} GiB within +/-{p.uncertainty_gib or 0:.2f} GiB; "
        f"`forklift probe {p.recipe or 'RECIPE'}` settles it)")
    console.print(f"{verdict}: {p.kv_tokens:,} KV tokens, max_model_len {p.max_model_len:,} "
                  f"(largest that fits {p.largest_max_model_len:,}), max concurrency {p.max_concurrency:.2f}x")
    if p.interval is not None and p.platform == "cuda":
        iv = p.interval
        bands = "; ".join(f"{b.term} {b.planned_gib:.2f} +/-{b.band_gib:.2f} ({b.why})" if b.term != "kv_pool"
                          else f"+/-{b.band_gib:.2f} ({b.why})" for b in iv.terms)
        console.print(f"KV pool {iv.kv_pool_gib[0]:.2f}..{iv.kv_pool_gib[1]:.2f} GiB, headroom "
                      f"{iv.margin_gib[0]:+.2f}..{iv.margin_gib[1]:+.2f} GiB: {bands}", highlight=False)
    rf = p.roofline
    console.print(f"decode <= {rf.decode_tok_s_single:.1f} tok/s single stream, <= {rf.decode_tok_s_aggregate:.1f} "
                  f"tok/s at {rf.concurrency} streams; prefill <= {rf.prefill_tok_s:,.0f} tok/s")
    if p.decisions.applied:
        console.print(f"[bold]applied[/]: {' '.join('--set ' + s for s in p.decisions.applied)}", highlight=False)
    for a in p.advice:
        console.print(f"[bold]advice[/]: {a.action}: {' '.join('--set ' + s for s in a.set)} -> {a.effect}",
                      markup=True, highlight=False)
    for n in p.notes:
        console.print(f"[dim]note[/]: {n}", highlight=False)


def render_files(mf: planner.ModelFiles) -> None:
    from rich.table import Table

    table = Table("node", "host", "layers", "shards", "files", "bytes", "GiB",
                  title=f"model files per node ({mf.shards_total} safetensors, {mf.total_bytes:,} bytes in all)",
                  caption=mf.dir)
    for n in mf.nodes:
        table.add_row(str(n.node), n.host, n.layers, str(n.shards), str(n.files), f"{n.bytes:,}",
                      f"{n.bytes / 1024**3:.2f}")
    common.console.print(table)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
