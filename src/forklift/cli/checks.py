"""The one renderer for CheckResults (check, node check, up's preflight, doctor)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from forklift.cli.common import console
from forklift.results import CheckResult

STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def print_checks(results: Sequence[CheckResult], *, title: str | None = None, show_ok_fix: bool = False,
                 evidence: bool = False) -> None:
    """A table: host (when any result names one), item, verdict, summary, fix; with ``evidence``, each
    result's evidence lines after it (doctor's log lines)."""
    with_host = any(r.host for r in results)
    columns = (["host"] if with_host else []) + ["item", "status", "summary", "fix"]
    table = Table(*columns, title=title, title_justify="left")
    for r in results:
        row = [r.host or ""] if with_host else []
        fix = r.fix or "" if (r.status != "ok" or show_ok_fix) else ""
        table.add_row(*(escape(x) for x in row), escape(r.id), f"[{STYLE[r.status]}]{r.status}[/]", escape(r.summary),
                      escape(fix))
    console.print(table)
    if evidence:
        for r in results:
            for e in r.evidence:
                console.print(f"  {r.id} > {e.label}: {e.text}", markup=False, highlight=False, soft_wrap=True)


def print_warnings(results: Sequence[CheckResult]) -> None:
    """One line per warning on stderr-style output (used where a table would bury the main result)."""
    from forklift.cli.common import err_console

    for r in results:
        err_console.print(f"[{STYLE[r.status]}]{r.status}[/] {r.host or ''}: {r.id}: {r.summary}"
                          + (f" (fix: {r.fix})" if r.fix else ""), highlight=False)
