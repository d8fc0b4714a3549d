"""``forklift compare A B`` (or ``-a A1 -a A2 -b B1 -b B2``): saved bench results (or check reports), metric by
metric, with intervals over server starts and runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from forklift import canary
from forklift.canary.html import comparison_page
from forklift.cli.common import JsonOpt, console, print_json
from forklift.errors import CompareError

VERDICT_STYLE = {"ok": "green", "regressed": "bold red", "improved": "cyan", "broken": "bold magenta",
                 "inconclusive": "yellow"}

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


def sides(paths: list[Path], baseline: list[Path], candidate: list[Path]) -> tuple[list[Path], list[Path]]:
    """A's and B's results from two positional paths, or from repeated -a / -b."""
    if paths and (baseline or candidate):
        raise CompareError("pass either two results (A B) or -a/--baseline and -b/--candidate, not both",
                           fix="forklift compare A B, or forklift compare -a A1 -a A2 -b B1 -b B2")
    if paths:
        if len(paths) != 2:
            raise CompareError(f"{len(paths)} positional result(s): positionally, compare takes exactly A and B",
                               fix="Several runs per side go with -a/--baseline and -b/--candidate, repeated.")
        return [paths[0]], [paths[1]]
    if not baseline or not candidate:
        raise CompareError("a side has no result", fix="Pass -a/--baseline and -b/--candidate at least once each.")
    return baseline, candidate


def compare_cmd(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="A (the baseline) and B (the candidate): a bench results.json (or its folder), or a saved check "
             "report.", show_default=False)] = None,
    baseline: Annotated[list[Path] | None, typer.Option(
        "-a", "--baseline", help="A baseline run; repeat for several runs (from several server starts).")] = None,
    candidate: Annotated[list[Path] | None, typer.Option(
        "-b", "--candidate", help="A candidate run; repeat for several runs.")] = None,
    threshold: ThresholdOpt = canary.DEFAULT_THRESHOLD,
    confidence: Annotated[float, typer.Option("--confidence", help="Interval confidence level.")] = 0.95,
    prior_noise: Annotated[float | None, typer.Option(
        "--prior-noise", help="Run-to-run noise of one run from a fresh start (0.05 = 5%), for every metric; "
                              "default: vLLM-CPU's measured figures per metric (see README).")] = None,
    gate: GateOpt = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the comparison as an HTML page.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Per metric: B's change against A with an interval over server starts and runs (and a request bootstrap),
    and ok / regressed / improved / inconclusive. Exits 1 when a gated metric regressed, else 0 (2: bad input)."""
    a, b = sides(paths or [], baseline or [], candidate or [])
    if html_out is not None and (html_out.is_dir() or not html_out.parent.is_dir()):
        raise CompareError(f"--html {html_out}: " + ("a directory" if html_out.is_dir() else
                                                    f"no folder {html_out.parent}"),
                           fix="Name a file in an existing folder, e.g. --html compare.html.")
    c = canary.compare([canary.load(p) for p in a], [canary.load(p) for p in b], threshold=threshold,
                       confidence=confidence, gate=gate_list(gate), prior_noise=prior_noise)
    if html_out is not None:
        try:
            html_out.write_text(comparison_page(c))
        except OSError as exc:
            raise CompareError(f"--html {html_out}: cannot write it ({exc.strerror or exc})",
                               fix="Name a file you can write, e.g. --html compare.html.") from None
    if json_out:
        print_json(c.to_json() | ({"html": str(html_out)} if html_out else {}))
    else:
        wide().print(comparison_table(c))
        for note in c.notes:
            console.print(f"[yellow]note[/]: {note}", highlight=False)
        if c.evidence:
            e = c.evidence
            console.print(f"evidence: A {e['runs_a']} run(s) from {e['starts_a']} start(s), B {e['runs_b']} run(s) "
                          f"from {e['starts_b']} start(s); unit: {e['unit']}", highlight=False)
        style = VERDICT_STYLE[c.verdict]
        worse = ", ".join(f"{m.metric}@{m.level}" for m in c.regressed) or ", ".join(
            f"{m.metric}@{m.level} ({m.note})" for m in c.metrics if m.gated and m.verdict == "inconclusive")
        console.print(f"[{style}]{c.verdict}[/]" + (f": {worse}" if worse else "") +
                      (f"; html: {html_out}" if html_out else ""), highlight=False)
    if c.verdict == "regressed":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
