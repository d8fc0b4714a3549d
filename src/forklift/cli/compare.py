"""``forklift compare A B``: two saved bench results (or check reports), metric by metric, with intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from forklift import canary
from forklift.canary.html import comparison_page
from forklift.cli.common import JsonOpt, console, print_json

VERDICT_STYLE = {"ok": "green", "regressed": "bold red", "improved": "cyan", "broken": "bold magenta"}

ThresholdOpt = Annotated[float, typer.Option("--threshold", help="Relative change that counts (0.05 = 5%): a "
                                                                 "metric regresses when its whole interval is worse "
                                                                 "by more.")]
GateOpt = Annotated[str | None, typer.Option("--gate", help="Metrics that decide the verdict, comma-separated "
                                                            "(default: " + ",".join(canary.GATED) + ").")]


def gate_list(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(x.strip() for x in text.split(",") if x.strip())


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def wide() -> Console:
    """The console, or a 160-column one when piped (rich's 80-column default wraps every row)."""
    return console if console.is_terminal else Console(width=160)


def comparison_table(c: canary.Comparison) -> Table:
    table = Table("level", "metric", "A", "B", "change", "interval", "verdict", title=f"B against A ({c.kind})")
    for m in c.metrics:
        span = "-" if m.low is None else f"{_pct(m.low)} .. {_pct(m.high)}"
        style = VERDICT_STYLE.get(m.verdict, "")
        label = m.metric if m.gated else f"[dim]{m.metric}[/]"
        table.add_row(m.level, label, _value(m.a), _value(m.b), _pct(m.change), span, f"[{style}]{m.verdict}[/]")
    return table


def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Baseline: a bench results.json (or its folder), or a saved check report.")],
    b: Annotated[Path, typer.Argument(help="Candidate, of the same kind.")],
    threshold: ThresholdOpt = canary.DEFAULT_THRESHOLD,
    confidence: Annotated[float, typer.Option("--confidence", help="Interval confidence level.")] = 0.95,
    gate: GateOpt = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the comparison as an HTML page.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Per metric: B's change against A with a bootstrap interval over requests, and ok / regressed / improved.
    Exits 1 when a gated metric regressed."""
    c = canary.compare(canary.load(a), canary.load(b), threshold=threshold, confidence=confidence,
                       gate=gate_list(gate))
    if html_out is not None:
        html_out.write_text(comparison_page(c))
    if json_out:
        print_json(c.to_json() | ({"html": str(html_out)} if html_out else {}))
    else:
        wide().print(comparison_table(c))
        for note in c.notes:
            console.print(f"[yellow]note[/]: {note}", highlight=False)
        style = VERDICT_STYLE[c.verdict]
        worse = ", ".join(f"{m.metric}@{m.level}" for m in c.regressed)
        console.print(f"[{style}]{c.verdict}[/]" + (f": {worse}" if worse else "") +
                      (f"; html: {html_out}" if html_out else ""), highlight=False)
    if c.verdict == "regressed":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
