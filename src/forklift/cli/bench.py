"""``forklift bench``: load a deployment, measure it the way vLLM does, cross-check with its /metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from forklift import bench
from forklift import record as records
from forklift.bench import speculative as spec_bench
from forklift.bench.stats import Distribution
from forklift.cli.common import JsonOpt, console, err_console, print_json
from forklift.errors import BenchError


def _levels(text: str) -> tuple[int | None, ...]:
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part in ("inf", "unbounded"):
            out.append(None)
            continue
        try:
            out.append(int(part))
        except ValueError as exc:
            raise BenchError(f"--concurrency {text!r}: {part!r} is not a whole number",
                             fix="Pass a comma-separated list like --concurrency 1,2,4.") from exc
    return tuple(out)


def _table(result: bench.BenchResult) -> Table:
    t = Table(title=f"{result.target['model']} at {result.target['base_url']}")
    for col in ("conc", "reqs", "fail", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "ITL p50 ms", "E2E p50 ms",
                "out tok/s", "tok/s/stream", "goodput", "counts"):
        t.add_column(col, justify="right")
    for run in result.runs:
        def pair(d: Distribution | None) -> str:
            return "-" if d is None else f"{d.p50:.1f} / {d.p99:.1f}"

        match = {True: "[green]match[/]", False: "[red]DIFFER[/]", None: "n/a"}[
            run.counters.match if run.counters else None]
        t.add_row(
            "∞" if run.concurrency is None else str(run.concurrency),
            f"{len(run.records)}" + (" [yellow]partial[/]" if run.partial else ""),
            str(run.failed), pair(run.ttft), pair(run.tpot), "-" if run.itl is None else f"{run.itl.p50:.1f}",
            "-" if run.e2e is None else f"{run.e2e.p50:.1f}",
            "-" if run.output_tok_s is None else f"{run.output_tok_s:.1f}",
            "-" if run.decode_tok_s_per_stream is None else f"{run.decode_tok_s_per_stream:.1f}",
            "-" if run.goodput_req_s is None else f"{run.goodput_req_s:.2f}/s", match,
        )
    return t


def bench_cmd(
    name: Annotated[str | None, typer.Argument(help="Run name (default: the only run, or 'default').")] = None,
    url: Annotated[str | None, typer.Option("--url", help="Benchmark this server instead of a run.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Served model name (default: the server's).")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="Tokenizer path or id (default: the run's model, or the server's /tokenize).")] = None,
    concurrency: Annotated[str | None, typer.Option(
        "--concurrency", "-c", help="Levels, e.g. 1,2,4,8 ('inf': no cap). Default 1, or no cap with --rate.")] = None,
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")] = 128,
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request (EOS ignored).")] = 64,
    requests: Annotated[int | None, typer.Option("--requests", "-r", help="Requests per level.")] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="Poisson arrivals, requests/s.")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="Seconds per level.")] = None,
    prompts: Annotated[Path | None, typer.Option("--prompts", help="JSONL file: {prompt, output_len}.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Warm-up requests before measuring.")] = 1,
    slo_ttft: Annotated[float | None, typer.Option("--slo-ttft-ms", help="Goodput SLO on TTFT.")] = None,
    slo_tpot: Annotated[float | None, typer.Option("--slo-tpot-ms", help="Goodput SLO on TPOT.")] = None,
    slo_e2e: Annotated[float | None, typer.Option("--slo-e2e-ms", help="Goodput SLO on E2E latency.")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="Directory for results.json and report.html.")] = None,
    workload: Annotated[str | None, typer.Option(
        "--workload", help="Repetitive prompts instead of random tokens: copy, edit or prose.")] = None,
    spec_baseline: Annotated[str | None, typer.Option(
        "--spec-baseline", help="A run name or URL without speculative decoding: run the same workload there and "
        "report acceptance and the speed-up side by side.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure TTFT, TPOT, ITL, E2E and throughput per concurrency level; write JSON and an HTML report."""
    config = bench.BenchConfig(
        concurrency=_levels(concurrency or ("inf" if rate else "1")), input_len=input_len, output_len=output_len,
        requests=requests if requests is not None or duration is not None else 16, duration_s=duration, rate=rate,
        prompts_file=prompts, warmup=warmup, slo=bench.Slo(slo_ttft, slo_tpot, slo_e2e), seed=seed,
        workload=workload)
    config.validate()
    if url:
        target = bench.from_url(url, model=model, tokenizer=tokenizer)
    else:
        target = bench.from_record(records.resolve_name(name), model=model, tokenizer=tokenizer)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = out or (records.run_dir(target.run_name) / "bench" / stamp if target.run_name
                      else Path.cwd() / "bench-results" / stamp)

    result = _run(config, target, json_out)
    written = bench.write_report(result, out_dir)
    comparison = _spec_baseline(spec_baseline, config, result, out_dir, json_out) if spec_baseline else None
    if comparison is not None:
        written["spec_comparison"] = out_dir / "spec_comparison.json"
    if json_out:
        print_json(result.to_json() | {"files": {k: str(v) for k, v in written.items()}}
                   | ({"spec_comparison": comparison} if comparison is not None else {}))
    else:
        # Piped output gets room for the whole table rather than rich's 80-column default.
        (console if console.is_terminal else Console(width=160)).print(_table(result))
        ss = result.single_stream
        if ss.decode_tok_s is not None:
            pct = f", {ss.pct_of_roofline:.1f}% of the planner's {ss.roofline_decode_tok_s:.1f} tok/s" \
                if ss.pct_of_roofline is not None else f" (no roofline: {ss.roofline_source})"
            prefill = f", prefill {ss.prefill_tok_s:.0f} tok/s" if ss.prefill_tok_s else ""
            console.print(f"single stream: decode {ss.decode_tok_s:.1f} tok/s{pct}{prefill}")
        for run in result.runs:
            if run.counters and run.counters.match is False:
                j = run.counters.to_json()
                console.print(f"[red]server counters differ[/] at c={run.concurrency}: prompt "
                              f"{j['prompt_tokens']['difference']:+.0f}, generation "
                              f"{j['generation_tokens']['difference']:+.0f} tokens (server - client)")
        if comparison is not None:
            console.print(_spec_table(comparison))
        console.print(f"report: {written['report']}\nresults: {written['results']}")
    if not result.complete:
        err_console.print(f"[red]incomplete[/]: {result.aborted}; partial results kept in {written['results']}")
        raise typer.Exit(3)


def _run(config: bench.BenchConfig, target: bench.Target, quiet: bool) -> bench.BenchResult:
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=err_console,
                  transient=quiet) as progress:
        tasks: dict[int, TaskID] = {}

        def on_event(ev: bench.Progress) -> None:
            if ev.phase not in ("warmup", "run"):
                return
            if ev.level not in tasks:
                label = "warm-up" if ev.phase == "warmup" else f"c={ev.concurrency or '∞'}"
                tasks[ev.level] = progress.add_task(label, total=ev.total, detail="")
            detail = f"{ev.failed} failed" if ev.failed else ""
            if ev.duration_s:
                detail += f" {ev.elapsed_s:.0f}/{ev.duration_s:.0f}s"
            progress.update(tasks[ev.level], completed=ev.done, detail=detail)

        return bench.run(config, target, on_event)


def _spec_baseline(ref: str, config: bench.BenchConfig, spec: bench.BenchResult, out_dir: Path,
                   quiet: bool) -> dict[str, object]:
    """The same workload on the baseline (a run or a URL), its report under ``baseline/``, and the comparison."""
    tokenizer = str(spec.target.get("tokenizer")) if spec.target.get("tokenizer") != "server /tokenize" else None
    if ref.startswith(("http://", "https://")):
        base_target = bench.from_url(ref, tokenizer=tokenizer)
    else:
        base_target = bench.from_record(records.resolve_name(ref), tokenizer=tokenizer)
    base = _run(config, base_target, quiet)
    bench.write_report(base, out_dir / "baseline")
    return spec_bench.write_comparison(spec_bench.compare(spec, base), out_dir)


def _spec_table(comparison: dict[str, object]) -> Table:
    t = Table(title=f"speculative vs baseline ({comparison['workload']})")
    for col in ("conc", "AL", "per position", "tok/step", "coverage", "tok/s/stream spec", "base", "speedup"):
        t.add_column(col, justify="right")
    levels = comparison["levels"]
    assert isinstance(levels, list)
    for lv in levels:
        d = lv["decode_tok_s_per_stream"]
        t.add_row("∞" if lv["concurrency"] is None else str(lv["concurrency"]), str(lv["acceptance_length"]),
                  ", ".join(str(p) for p in lv["per_position_acceptance_rate"]), str(lv["tokens_per_step"]),
                  str(lv["draft_coverage"]), str(d["speculative"]), str(d["baseline"]),
                  f"{d['speedup']}x" if d["speedup"] is not None else "-")
    return t


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cmd)
