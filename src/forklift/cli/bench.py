"""``forklift bench``: load a deployment, measure it the way vLLM does, cross-check with its /metrics.

The options that set up the load (``--concurrency`` ... ``--seed``) are built from
:class:`forklift.bench.config.BenchConfig`: its fields name their flags, help, defaults and limits once.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from forklift.bench.config import BenchConfig
from forklift.bench.options import Option, options
from forklift.cli.common import JsonOpt, console, err_console, print_json
from forklift.cli.status import load_run

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.table import Table

    from forklift import bench
    from forklift.bench.ladder import LadderConfig
    from forklift.bench.stats import Distribution
    from forklift.endpoint import Target

COULD_NOT_RUN = 2
CUT_SHORT = 3


def _table(result: bench.BenchResult) -> Table:
    from rich.table import Table

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


def _progress(config: BenchConfig, target: Target, json_out: bool) -> bench.BenchResult:
    """Run the benchmark with a progress bar per level on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from forklift import bench

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=err_console,
                  transient=json_out) as progress:
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


def _print_result(result: bench.BenchResult, written: dict[str, Path]) -> None:
    from rich.console import Console

    # Piped output gets room for the whole table rather than rich's 80-column default.
    (console if console.is_terminal else Console(width=160)).print(_table(result))
    ss = result.single_stream
    if ss.decode_tok_s is not None:
        pct = f", {ss.pct_of_roofline:.1f}% of the planner's {ss.roofline_decode_tok_s:.1f} tok/s" \
            if ss.pct_of_roofline is not None else f" (no roofline: {ss.roofline_source})"
        prefill = f", prefill {ss.prefill_tok_s:.0f} tok/s" if ss.prefill_tok_s else ""
        console.print(f"single stream: decode {ss.decode_tok_s:.1f} tok/s{pct}{prefill}")
    for run in result.runs:
        suspect = (run.counters.spec_decode or {}).get("suspect") if run.counters else None
        if suspect:
            console.print(f"[yellow]suspect speculative acceptance[/] at c={run.concurrency or '∞'}: {suspect}",
                          highlight=False, soft_wrap=True)
        if run.counters and run.counters.match is False:
            j = run.counters.to_json()
            console.print(f"[red]server counters differ[/] at c={run.concurrency}: prompt "
                          f"{j['prompt_tokens']['difference']:+.0f}, generation "
                          f"{j['generation_tokens']['difference']:+.0f} tokens (server - client)")
    console.print(f"report: {written['report']}\nresults: {written['results']}")


def _target(name: str | None, url: str | None, model: str | None, tokenizer: str | None) -> Target:
    from forklift.endpoint import Target

    if url:
        return Target.from_url(url, model=model, tokenizer=tokenizer)
    return Target.from_record(load_run(name, exit_code=COULD_NOT_RUN), model=model, tokenizer=tokenizer)


def bench_cmd(
    name: Annotated[str | None, typer.Argument(help="Run name (default: the only run, or 'default').")] = None,
    url: Annotated[str | None, typer.Option("--url", help="Benchmark this server instead of a run.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Served model name (default: the server's).")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="Tokenizer path or id (default: the run's model when its files are here, else the "
                            "server's /tokenize).")] = None,
    spec_baseline: Annotated[str | None, typer.Option(
        "--spec-baseline", help="A run name or URL without speculative decoding: run the same workload there and "
        "report acceptance and the speed-up side by side.")] = None,
    ladder: Annotated[bool, typer.Option(
        "--ladder", help="A context-depth x concurrency ladder in llama-benchy's format (ladder.md/.json/.csv); "
        "--input-len/--output-len are its pp/tg (default 2048/32).")] = False,
    ladder_depths: Annotated[str | None, typer.Option(
        "--ladder-depths", help="Tokens of prior context per rung; default 0,4096,16384.")] = None,
    ladder_users: Annotated[str | None, typer.Option(
        "--ladder-users", help="Concurrent users per rung; default 1,2,4,8.")] = None,
    ladder_runs: Annotated[int | None, typer.Option(
        "--ladder-runs", help="Batches of N simultaneous requests per cell (llama-benchy --runs); default 3.")] = None,
    ladder_out: Annotated[Path | None, typer.Option(
        "--ladder-out", help="Also write the ladder to this .md, .json or .csv file.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Directory for results.json and report.html.")] = None,
    json_out: JsonOpt = False,
    **flags: Any,
) -> None:
    """Measure TTFT, TPOT, ITL, E2E and throughput per concurrency level; write JSON and an HTML report."""
    from forklift import bench
    from forklift import record as records
    from forklift.record.runfiles import fresh

    values = {opt.path: flags.get(opt.dest) for opt in options(BenchConfig)}
    if ladder:
        from forklift.bench.ladder import LadderConfig

        if spec_baseline:
            from forklift.errors import BenchError

            raise BenchError("--spec-baseline does not combine with --ladder",
                             fix="Run the ladder on each server separately; their ladder.md files sit side by side.")
        ladder_config = LadderConfig.from_flags(values, ladder_depths, ladder_users, ladder_runs)
    config = BenchConfig.from_flags(values) if not ladder else None
    target = _target(name, url, model, tokenizer)
    out_dir = out or fresh(records.run_dir(target.run_name) / "bench" if target.run_name
                           else Path.cwd() / "bench-results")  # two benches in one second get two folders
    _writable_before_the_run(out_dir, ladder_out, given=out is not None)
    if ladder:
        _ladder(ladder_config, target, out_dir, ladder_out, json_out)
        return
    assert config is not None
    result = _progress(config, target, json_out)
    written = bench.write_report(result, out_dir)
    comparison = _spec_baseline(spec_baseline, config, result, out_dir, json_out) if spec_baseline else None
    if comparison is not None:
        written["spec_comparison"] = out_dir / "spec_comparison.json"
    if json_out:
        print_json(result.to_json() | {"files": {k: str(v) for k, v in written.items()}}
                   | ({"spec_comparison": comparison} if comparison is not None else {}))
    else:
        _print_result(result, written)
        if comparison is not None:
            console.print(_spec_table(comparison))
    if not result.complete:
        err_console.print(f"[red]incomplete[/]: {result.aborted}; partial results kept in {written['results']}")
        raise typer.Exit(CUT_SHORT)


def _ladder(config: LadderConfig, target: Target, out_dir: Path, extra: Path | None, json_out: bool) -> None:
    """Run the ladder with a line per cell on stderr, write it, print the llama-benchy table (or the JSON)."""
    from forklift.bench import ladder

    def on_cell(cell: ladder.Cell, index: int, total: int) -> None:
        err_console.print(f"[dim]cell {index + 1}/{total}: depth {cell.depth}, {cell.users} user(s), "
                          f"{cell.requests} requests[/]")

    report = ladder.run_on(config, target, on_cell)
    written = ladder.write_all(report, out_dir)
    if extra is not None:
        written["extra"] = ladder.write(report, extra)
    if json_out:
        print_json(report.to_json() | {"files": {k: str(v) for k, v in written.items()}})
    else:
        console.print(ladder.markdown(report), markup=False, highlight=False, soft_wrap=True)
        for cell in report.skipped:
            console.print(f"[yellow]skipped[/] depth {cell.depth} x {cell.users} user(s): {cell.skip}")
        console.print("files: " + ", ".join(str(p) for p in written.values()))
    if not report.complete:
        err_console.print(f"[red]incomplete[/]: {report.aborted}; measured cells kept in {written['json']}")
        raise typer.Exit(CUT_SHORT)


def _flag_parameter(opt: Option) -> inspect.Parameter:
    """A typer option for one config field: its flag, help and default as the model states them."""
    shown = opt.default_text
    text = opt.flag.help if shown is None else f"{opt.flag.help.rstrip('.')}; default {shown}."
    decls = [opt.flag.name, *([opt.flag.short] if opt.flag.short else [])]
    annotation = Annotated[opt.type | None, typer.Option(*decls, help=text, show_default=False)]  # type: ignore[name-defined]
    return inspect.Parameter(opt.dest, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def with_config_flags(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` as typer sees it: its own parameters, the config's flags where ``**flags`` stands, ``--out``
    and ``--json`` last."""
    own = list(inspect.signature(command, eval_str=True).parameters.values())
    head = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name not in ("out", "json_out", "flags")]
    tail = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name in ("out", "json_out")]

    @functools.wraps(command)
    def with_flags(**values: Any) -> None:
        command(**values)

    with_flags.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        head + [_flag_parameter(opt) for opt in options(BenchConfig)] + tail)
    return with_flags


def _spec_baseline(ref: str, config: BenchConfig, spec: bench.BenchResult, out_dir: Path,
                   quiet: bool) -> dict[str, object]:
    """The same workload on the baseline (a run or a URL), its report under ``baseline/``, and the comparison."""
    from forklift import bench
    from forklift.bench import speculative as spec_bench

    tokenizer = str(spec.target.get("tokenizer")) if spec.target.get("tokenizer") not in (None, "none") else None
    is_url = ref.startswith(("http://", "https://"))
    base_target = _target(None if is_url else ref, ref if is_url else None, None, tokenizer)
    base = _progress(config, base_target, quiet)
    bench.write_report(base, out_dir / "baseline")
    return spec_bench.write_comparison(spec_bench.compare(spec, base), out_dir)


def _spec_table(comparison: dict[str, object]) -> Table:
    from rich.table import Table

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


def _writable_before_the_run(out_dir: Path, ladder_out: Path | None, *, given: bool) -> None:
    """Where the results go is checked before any request: a bench that cannot be written, or that would write
    over an earlier bench's results, is refused while nothing has been measured yet."""
    from forklift.bench.ladder import FORMATS
    from forklift.errors import BenchError

    if given and (out_dir / "results.json").exists():
        raise BenchError(f"--out {out_dir} already holds a bench's results.json",
                         fix="Pass a new --out folder (or leave --out out: each bench gets a fresh folder).")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"--out {out_dir}: cannot make it ({exc.strerror or exc})",
                         fix="Pass --out DIR in a writable place.") from None
    if not os.access(out_dir, os.W_OK):
        raise BenchError(f"--out {out_dir}: not writable", fix="Pass --out DIR in a writable place.")
    if ladder_out is not None and ladder_out.suffix.lower() not in FORMATS:
        raise BenchError(f"--ladder-out {ladder_out}: the ladder is written as .md, .json or .csv",
                         fix="Pass --ladder-out with a .md, .json or .csv file name.")


def register(app: typer.Typer) -> None:
    app.command("bench")(with_config_flags(bench_cmd))
