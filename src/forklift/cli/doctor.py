"""``forklift doctor``: read a run (every rank and node), log files, dmesg or a pasted report; say what broke.

Exit code: 1 when doctor names a failure (or is unsure between candidates), 0 when it finds none, 2 when it
could not run (empty or binary input, a missing file, an unknown run).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from forklift.cli.check_table import print_checks
from forklift.cli.common import JsonOpt, console, print_json, render_error
from forklift.doctor import (
    Context,
    Finding,
    Report,
    Source,
    diagnose_sources,
    kv_advice,
    planner_numbers,
    scan_stream,
    to_checks,
)
from forklift.doctor.scan import Excerpt
from forklift.errors import DoctorError, ForkliftError, RunNotFoundError

BAD_INPUT = 2


def _checked(ex: Excerpt) -> Excerpt:
    """Refuse input doctor cannot read (empty or binary), with the reason; any text is read (one pasted line, a
    traceback, an issue body, dmesg): what it does not show gives no finding, not a refusal."""
    name = ex.source or "input"
    if ex.total_bytes == 0 or ex.empty:
        raise DoctorError(f"{name} is empty", fix="Pass a log file, dmesg output, a pasted report, or a run name.")
    if ex.binary:
        raise DoctorError(f"{name} is binary, not text (NUL or undecodable bytes)",
                          fix="Pass the text log (decompress it first), dmesg output or a pasted report.")
    return ex


def _file_sources(inputs: list[str]) -> list[Source]:
    out = []
    for item in inputs:
        if item == "-":
            out.append(Source("stdin", _checked(scan_stream(sys.stdin.buffer, "stdin"))))
            continue
        path = Path(item)
        if not path.exists():
            raise DoctorError(f"no such file: {item}", fix="Pass log files, '-' for stdin, or a run name.")
        if not path.is_file():
            raise DoctorError(f"{item} is not a regular file", fix="Pass log files, '-' for stdin, or a run name.")
        with path.open("rb") as fh:
            out.append(Source(path.name, _checked(scan_stream(fh, path.name))))
    return out


def _run_diagnosis(name: str, threshold: float | None) -> tuple[Report, list[str], dict[str, list[str]]]:
    from forklift import record as records
    from forklift.cluster.diagnose import diagnose_run
    from forklift.cluster.stop import record_runners

    try:
        record = records.load(name)
    except RunNotFoundError as exc:
        if "." in name:  # a file name more likely than a run name
            raise DoctorError(f"no run named {name!r} and no file {name} here",
                              fix=f"Pass the log's path (e.g. ./{name}), '-' for stdin, or a run name. "
                                  + (exc.fix or "")) from None
        raise
    diag = diagnose_run(record, record_runners(record), threshold=threshold)
    return diag.report, [s.label for s in diag.sources], diag.read


def _diagnose(inputs: list[str], version: str | None,
              threshold: float | None) -> tuple[Report, list[str], dict[str, list[str]]]:
    """The report, the labels of what was read, and (for a run) what was read on each node."""
    if not inputs:
        from forklift import record as records

        return _run_diagnosis(records.resolve_name(None), threshold)
    if len(inputs) == 1 and inputs[0] != "-" and "/" not in inputs[0] and not Path(inputs[0]).exists():
        return _run_diagnosis(inputs[0], threshold)
    sources = _file_sources(inputs)
    report = diagnose_sources(sources, Context(vllm_version=version) if version else None, threshold=threshold)
    return report, [s.label for s in sources], {}


def _attach_plan(report: Report, recipe_ref: str) -> tuple[Report, str | None]:
    """KV findings get advice that knows the recipe, and the planner's numbers when it has them."""
    from forklift.recipe.load import load

    recipe = load(recipe_ref)
    from forklift.plan import make

    view = planner_numbers(recipe, make)
    serve = recipe.serve.model_dump()
    out: list[Finding] = []
    for f in report.findings:
        if f.category == "kv_cache_insufficient":
            advice = kv_advice(f.facts, serve)
            if view.available:
                advice.append("planner: " + ", ".join(f"{k}={v}" for k, v in view.numbers.items()))
            f = Finding(**{**f.__dict__, "advice": advice})
        out.append(f)
    return Report(**{**report.__dict__, "findings": out}), None if view.available else view.reason


def _render(report: Report, planner_note: str | None) -> None:
    verdict = (f"unsure: no candidate reaches p={report.threshold:g}; verify before acting"
               if report.unsure else None)
    title = f"doctor: {report.lines_read} lines" + (f", phase reached: {report.phase}" if report.phase else "")
    print_checks(to_checks(report), title=title, verbose=True)
    if verdict:
        console.print(f"[yellow]{verdict}[/]", highlight=False)
    top = report.top
    if top and top.advice:
        for a in top.advice:
            console.print(f"  - {a}", markup=False, highlight=False, soft_wrap=True)
    if planner_note:
        console.print(f"[dim]planner numbers unavailable: {planner_note}[/]", highlight=False)


def doctor_cmd(
    inputs: Annotated[list[str] | None, typer.Argument(
        help="A run name, log / dmesg files, or '-' for stdin (default: the only run).")] = None,
    json_out: JsonOpt = False,
    recipe: Annotated[str | None, typer.Option(
        "--recipe", help="Recipe whose planner numbers a KV-cache finding should show.")] = None,
    vllm_version: Annotated[str | None, typer.Option(
        "--vllm-version", help="vLLM version of the logs (a run record knows it).")] = None,
    threshold: Annotated[float | None, typer.Option(
        "--threshold", min=0.0, max=1.0, help="Below this probability doctor says it is unsure (default 0.5).")] = None,
) -> None:
    """Say what broke a start: the cause, its probability, the fix and the lines that show it.

    With a run name it reads every rank's log and each node's dmesg, Ray logs and free memory over SSH.
    Exit code: 1 when it names a failure (or is unsure between candidates), 0 when none, 2 on bad input.
    """
    try:
        report, labels, collected = _diagnose(list(inputs or []), vllm_version, threshold)
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
        data["sources"] = labels
        if collected:
            data["collected"] = collected
        data["checks"] = [c.to_json() for c in to_checks(report)]
        if planner_note:
            data["planner_note"] = planner_note
        print_json(data)
    else:
        _render(report, planner_note)
    raise typer.Exit(1 if report.has_error else 0)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
