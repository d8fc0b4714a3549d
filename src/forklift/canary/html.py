"""One self-contained HTML page for a comparison (and a canary's outcome): a table per load level with each
metric's values, change, interval drawn against zero and the threshold, and verdict."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from forklift.canary.compare import Comparison, MetricDelta

_COLOURS = {"ok": "#2e7d32", "regressed": "#c62828", "improved": "#1565c0", "broken": "#6a1b9a",
            "inconclusive": "#b26a00"}
_SPAN = 0.5
"""The interval bar shows -50% .. +50%; wider intervals are clipped at its ends."""
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;width:100%}
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:right;font-size:14px}
th:first-child,td:first-child,td.note{text-align:left}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600}
.bar{position:relative;width:240px;height:14px;background:#f4f4f4}
.bar span{position:absolute;top:0;height:14px}
.muted{color:#888}
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    return html.escape(str(v))


def _x(rel: float) -> float:
    return 100.0 * (min(max(rel, -_SPAN), _SPAN) + _SPAN) / (2 * _SPAN)


def _bar(m: MetricDelta, threshold: float) -> str:
    if m.low is None or m.high is None:
        return '<span class="muted">-</span>'
    lo, hi = _x(m.low), _x(m.high)
    colour = _COLOURS.get(m.verdict, "#555")
    marks = "".join(f'<span style="left:{_x(t):.1f}%;width:1px;background:#bbb"></span>'
                    for t in (-threshold, threshold))
    return (f'<div class="bar" title="{100 * m.low:+.1f}% .. {100 * m.high:+.1f}%">{marks}'
            f'<span style="left:50%;width:1px;background:#333"></span>'
            f'<span style="left:{lo:.1f}%;width:{max(hi - lo, 0.6):.1f}%;background:{colour};opacity:.75"></span>'
            f"</div>")


def _rows(metrics: Sequence[MetricDelta], threshold: float) -> str:
    out = []
    for m in metrics:
        change = "-" if m.change is None else f"{100 * m.change:+.1f}%"
        span = "" if m.low is None or m.high is None else f"{100 * m.low:+.1f} .. {100 * m.high:+.1f}%"
        gate = "" if m.gated else ' <span class="muted">(not gated)</span>'
        out.append(f"<tr><td>{html.escape(m.metric)}{gate}</td><td>{_fmt(m.a)}</td><td>{_fmt(m.b)}</td>"
                   f"<td>{change}</td><td>{span}</td><td>{_bar(m, threshold)}</td>"
                   f'<td><b style="color:{_COLOURS.get(m.verdict, "#555")}">{m.verdict}</b></td>'
                   f'<td class="note">{html.escape(m.note)}</td></tr>')
    return "\n".join(out)


def badge(verdict: str) -> str:
    return f'<span class="badge" style="background:{_COLOURS.get(verdict, "#555")}">{html.escape(verdict)}</span>'


def comparison_section(c: Comparison) -> str:
    """The comparison as an HTML fragment (tables and notes, no page around it)."""
    parts = [f"<p>A (baseline): <code>{html.escape(c.a)}</code><br>B (candidate): <code>{html.escape(c.b)}</code>"
             f"<br>Bootstrap intervals of B/A&minus;1 over requests at {100 * c.confidence:g}% (the gated metrics "
             f"share it: each interval wider); threshold {100 * c.threshold:g}%. Verdict {badge(c.verdict)}</p>"]
    parts += [f"<p><b>note:</b> {html.escape(n)}</p>" for n in c.notes]
    levels: list[str] = []
    for m in c.metrics:
        if m.level not in levels:
            levels.append(m.level)
    for level in levels:
        rows = _rows([m for m in c.metrics if m.level == level], c.threshold)
        parts.append(f"<h3>{html.escape(level)}</h3><table><tr><th>metric</th><th>A</th><th>B</th><th>change</th>"
                     f"<th>interval</th><th>-50% &middot; 0 &middot; +50%</th><th>verdict</th><th>note</th></tr>"
                     f"{rows}</table>")
    return "\n".join(parts)


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")


def comparison_page(c: Comparison) -> str:
    return page(f"forklift compare: {c.verdict}", comparison_section(c))
