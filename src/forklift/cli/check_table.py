"""The one renderer for CheckResults (check, node check, up's preflight, doctor)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from forklift.cli.common import console, err_console
from forklift.results import CheckResult, Evidence

STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def print_checks(results: Sequence[CheckResult], *, title: str | None = None, show_ok_fix: bool = False,
                 seconds: bool = False, verbose: bool = False) -> None:
    """A table: host (when any result names one), item, verdict, time (``seconds``), summary, fix; with
    ``verbose``, each result's evidence below it."""
    with_host = any(r.host for r in results)
    columns = (["host"] if with_host else []) + ["item", "status"] + (["s"] if seconds else []) + ["summary", "fix"]
    table = Table(*columns, title=title, title_justify="left")
    for r in results:
        row = [escape(r.host or "")] if with_host else []
        row += [escape(r.id), f"[{STYLE[r.status]}]{r.status}[/]"] + ([f"{r.seconds:.1f}"] if seconds else [])
        fix = r.fix or "" if (r.status != "ok" or show_ok_fix) else ""
        table.add_row(*row, escape(r.summary), escape(fix))
    console.print(table)
    if verbose:
        for r in results:
            print_evidence(r)


def _evidence_lines(ev: Evidence) -> list[str]:
    took = f" ({ev.seconds:.2f} s)" if ev.seconds is not None else ""
    lines = [f"  {ev.label}{took}" + (f": {ev.note}" if ev.note else "")]
    if ev.request:
        lines.append(f"    request:  {json.dumps(ev.request, default=str)}")
    if ev.response:
        lines.append(f"    response: {ev.response}")
    if ev.text:
        lines.append(f"    {ev.text}")
    return lines


def print_evidence(result: CheckResult) -> None:
    """What one verdict rests on: every request and response (or line read), in order."""
    if not result.evidence:
        return
    console.print(f"[bold]{result.id}[/] [{STYLE[result.status]}]{result.status}[/] evidence:", highlight=False)
    for ev in result.evidence:
        for line in _evidence_lines(ev):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def print_progress(result: CheckResult) -> None:
    """One line on stderr as a check finishes (the table comes at the end)."""
    err_console.print(f"[{STYLE[result.status]}]{result.status:>4}[/] {result.id:<10} {result.seconds:6.1f} s",
                      highlight=False)


def print_warnings(results: Sequence[CheckResult]) -> None:
    """One line per warning on stderr-style output (used where a table would bury the main result)."""
    for r in results:
        err_console.print(f"[{STYLE[r.status]}]{r.status}[/] {r.host or ''}: {r.id}: {r.summary}"
                          + (f" (fix: {r.fix})" if r.fix else ""), highlight=False)
