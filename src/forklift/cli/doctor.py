"""``forklift doctor``: read a run (every rank and node), log files, dmesg or a pasted report; say what broke.

Exit code: 1 when doctor names a failure (or is unsure between candidates), 0 when it finds none, 2 when it
could not run (empty or binary input, a missing file, an unknown run).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from forklift.cli.checks import print_checks
from forklift.cli.common import JsonOpt, console, print_json, render_error
from forklift.doctor import (
    Context,
    Finding,
    Report,
    Source,
    diagnose_sources,
    kv_advice,
    planner_numbers,
    scan_bytes,
    scan_stream,
    to_checks,
)
from forklift.doctor.scan import Excerpt
from forklift.errors import DoctorError, ForkliftError

BAD_INPUT = 2
_FAILED_RANK = re.compile(r"(?:rank|ray) (\d+) on (\S+) (?:exited|stopped)|^(\S+) stopped answering")
_PHASE = re.compile(r"\(phase: ([^)]+)\)|during startup \((?!phase: )([^)]+)\)")


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


def _plan_facts(record: Any) -> dict[str, Any]:
    plan = record.planned
    if plan is None:
        return {"plan_fits": False} if getattr(record.plan, "kind", "") == "unplanned" else {}
    margins = [r.kv_pool_gib - r.kv_needed_gib for r in plan.ranks]
    notes = tuple(f"plan: rank {r.rank} KV pool {r.kv_pool_gib:.2f} GiB, one max_model_len request needs "
                  f"{r.kv_needed_gib:.2f} GiB" for r in plan.ranks)
    return {"plan_fits": plan.fits, "kv_margin_gib": round(min(margins), 3) if margins else None, "plan_notes": notes}


def _context(record: Any, mem: dict[str, tuple[int, int]]) -> Context:
    from forklift.hardware.profiles import get as get_profile

    recipe = record.recipe
    error = record.error or ""
    failed = _FAILED_RANK.search(error)
    phase = _PHASE.search(error)
    unified = []
    for node in recipe.nodes:
        try:
            unified.append(get_profile(node.hardware).unified)
        except ForkliftError:
            unified.append(False)
    applied = tuple(dict.fromkeys([p.id for p in record.pins.patches] + [str(p.get("id")) for p in record.patches
                                                                         if isinstance(p, dict) and p.get("id")]))
    return Context(
        vllm_version=record.vllm_version, phase=(phase.group(1) or phase.group(2)) if phase else None,
        status=record.status, error=record.error,
        failed_rank=int(failed.group(1)) if failed and failed.group(1) else None,
        failed_host=(failed.group(2) or failed.group(3)) if failed else None,
        patches_applied=applied, patches_wanted=tuple(p.id for p in recipe.patches), backend=recipe.parallel.backend,
        nodes=len(recipe.nodes), unified_memory=any(unified), mem_available=mem, **_plan_facts(record),
    )


def _run_sources(name: str) -> tuple[list[Source], Context, dict[str, list[str]]]:
    from forklift import record as records
    from forklift.cluster import collect as gather
    from forklift.cluster.stop import record_runners

    record = records.load(name)
    got = gather.collect(record, record_runners(record))
    sources = [Source(f"{p.host} {p.label}", scan_bytes(p.text.encode("utf-8", "surrogateescape"),
                                                         f"{p.host} {p.label}"), host=p.host)
               for p in got.pieces if p.text.strip()]
    if not sources:
        raise DoctorError(f"run {name}: nothing could be read from its nodes",
                          fix=f"Check the nodes answer over SSH (`forklift status {name}`).")
    return sources, _context(record, got.mem_available), got.read()


def _sources(inputs: list[str], version: str | None) -> tuple[list[Source], Context | None, dict[str, list[str]]]:
    """The sources to read, the run's context, and (for a run) what was read on each node."""
    if not inputs:
        from forklift import record as records

        return _run_sources(records.resolve_name(None))
    if len(inputs) == 1 and inputs[0] != "-" and "/" not in inputs[0] and not Path(inputs[0]).exists():
        return _run_sources(inputs[0])
    return _file_sources(inputs), Context(vllm_version=version) if version else None, {}


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
        sources, ctx, collected = _sources(list(inputs or []), vllm_version)
        report = diagnose_sources(sources, ctx, threshold=threshold)
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
        data["sources"] = [s.label for s in sources]
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
