"""``forklift doctor``: read logs (a run's ranks, files or stdin) and say what went wrong and the fix."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from forklift.cli.common import JsonOpt, console, print_json, render_error
from forklift.doctor import Finding, Report, diagnose_report, iter_binary, kv_advice, planner_numbers
from forklift.errors import DoctorError, ForkliftError

BAD_INPUT = 2


def _file_lines(path: Path) -> Iterator[str]:
    with path.open("rb") as fh:
        yield from iter_binary(fh)


def _run_lines(name: str) -> tuple[list[Iterator[str]], str | None]:
    from forklift import record as records
    from forklift.cluster import down as ops

    rec = records.load(name)
    sources: list[Iterator[str]] = []
    for r in rec.ranks:
        path = Path(ops.log_path(rec, r.rank))
        if path.is_file():
            sources.append(_file_lines(path))
        else:  # not on this machine: let cluster fetch it
            sources.append(iter(ops.read_log(rec, r.rank)))
    if not sources:
        raise DoctorError(f"run {name} has no rank logs", fix="Start it with `forklift up` first.")
    return sources, rec.vllm_version


def _sources(inputs: list[str]) -> tuple[list[Iterator[str]], str | None]:
    if not inputs:
        from forklift import record as records

        return _run_lines(records.resolve_name(None))
    sources: list[Iterator[str]] = []
    version = None
    for item in inputs:
        path = Path(item)
        if item == "-":
            sources.append(iter_binary(sys.stdin.buffer))
        elif path.is_file():
            sources.append(_file_lines(path))
        elif path.exists():
            raise DoctorError(f"{item} is not a regular file", fix="Pass log files, '-' for stdin, or a run name.")
        elif "/" not in item and len(inputs) == 1:
            run_sources, version = _run_lines(item)
            sources.extend(run_sources)
        else:
            raise DoctorError(f"no such file: {item}", fix="Pass log files, '-' for stdin, or a run name.")
    return sources, version


def _attach_plan(report: Report, recipe_ref: str) -> tuple[Report, str | None]:
    """KV findings get advice that knows the recipe, and the planner's numbers when it has them."""
    from forklift.recipe.load import load

    recipe = load(recipe_ref)
    view = planner_numbers(recipe)
    serve = recipe.serve.model_dump()
    out: list[Finding] = []
    for f in report.findings:
        if f.category == "kv_cache_insufficient":
            advice = kv_advice(f.facts, serve)
            if view.available:
                advice.append("planner: " + ", ".join(f"{k}={v}" for k, v in view.numbers.items()))
            f = Finding(**{**f.__dict__, "advice": advice})
        out.append(f)
    return Report(out, report.lines_read, report.error_tail), None if view.available else view.reason


def _render(report: Report, planner_note: str | None) -> None:
    if not report.findings:
        console.print(f"no known failure in {report.lines_read} lines")
        if report.error_tail:
            console.print("[dim]last error lines:[/]")
            for line in report.error_tail:
                console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        return
    for i, f in enumerate(report.findings, 1):
        colour = {"error": "red", "warning": "yellow", "info": "blue"}[f.severity]
        extra = f" (explained by {f.superseded_by})" if f.superseded_by else ""
        console.print(f"[bold]{i}. [{colour}]{f.severity}[/] {f.title}[/] [dim]{f.rule}, {f.category}, "
                      f"confidence {f.confidence:.2f}{extra}[/]", highlight=False)
        for line in f.lines:
            console.print(f"   > {line}", markup=False, highlight=False, soft_wrap=True)
        console.print(f"   cause: {f.cause}", markup=False, highlight=False, soft_wrap=True)
        console.print(f"   fix:   {f.fix}", markup=False, highlight=False, soft_wrap=True)
        for a in f.advice:
            console.print(f"     - {a}", markup=False, highlight=False, soft_wrap=True)
        console.print(f"   refs:  {', '.join(f.references)}", markup=False, highlight=False, soft_wrap=True)
    if planner_note:
        console.print(f"[dim]planner numbers unavailable: {planner_note}[/]", highlight=False)


def doctor_cmd(
    inputs: Annotated[list[str] | None, typer.Argument(
        help="A run name, log files, or '-' for stdin (default: the only run).")] = None,
    json_out: JsonOpt = False,
    recipe: Annotated[str | None, typer.Option(
        "--recipe", help="Recipe whose planner numbers a KV-cache finding should show.")] = None,
    vllm_version: Annotated[str | None, typer.Option(
        "--vllm-version", help="vLLM version of the logs (a run record knows it).")] = None,
) -> None:
    """Diagnose a failed start: the cause, the fix and the log lines that show it.

    Exit code: 1 when a finding of error severity is found, 0 when none, 2 on bad input.
    """
    try:
        sources, record_version = _sources(list(inputs or []))
        report = diagnose_report(itertools.chain.from_iterable(sources),
                                 vllm_version=vllm_version or record_version)
        planner_note = None
        if recipe:
            report, planner_note = _attach_plan(report, recipe)
    except OSError as exc:
        render_error(DoctorError(f"cannot read input: {exc}", fix="Check the path and its permissions."))
        raise typer.Exit(BAD_INPUT) from exc
    except ForkliftError as exc:
        render_error(exc)
        raise typer.Exit(BAD_INPUT) from exc
    if json_out:
        data = report.to_json()
        if planner_note:
            data["planner_note"] = planner_note
        print_json(data)
    else:
        _render(report, planner_note)
    raise typer.Exit(1 if report.has_error else 0)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
