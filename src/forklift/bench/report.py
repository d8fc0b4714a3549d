"""Write a benchmark's results: ``results.json``, PNG plots (matplotlib, Agg) and ``report.html``."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from forklift.bench.result import BenchResult, RunResult
from forklift.errors import BenchError


def _label(run: RunResult) -> str:
    c = "unbounded" if run.concurrency is None else str(run.concurrency)
    return f"c={c}" + (f", {run.rate:g} req/s" if run.rate else "")


def _save(plt: Any, fig: Any, out: Path, name: str) -> None:
    fig.tight_layout()
    fig.savefig(out / name, dpi=100)
    plt.close(fig)


def _latency_cdfs(plt: Any, runs: list[RunResult], out: Path) -> tuple[str, str]:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (name, attr) in zip(axes, (("TTFT", "ttft"), ("TPOT", "tpot"), ("E2E latency", "e2e")), strict=True):
        for run in runs:
            vals = sorted(v * 1000.0 for rec in run.ok_records if (v := getattr(rec, attr)) is not None)
            if vals:
                ys = [0.0] + [(i + 1) / len(vals) for i in range(len(vals))]
                ax.step([vals[0], *vals], ys, where="post", label=_label(run))
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{name} CDF")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    _save(plt, fig, out, "latency_cdf.png")
    return "latency_cdf.png", "Latency CDFs per run"


def _throughput(plt: Any, points: list[RunResult], out: Path) -> tuple[str, str]:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [r.concurrency if r.concurrency is not None else r.completed for r in points]
    ax1.plot(xs, [r.output_tok_s or 0.0 for r in points], marker="o", label="output tok/s")
    ax1.set_xlabel("concurrency")
    ax1.set_ylabel("output tokens / s")
    ax1.set_title("Throughput vs concurrency")
    ax1.grid(alpha=0.3)
    tpot_p50 = [r.tpot.p50 if r.tpot else 0.0 for r in points]
    ax2.plot([r.output_tok_s or 0.0 for r in points], tpot_p50, marker="o")
    for x, y, r in zip([r.output_tok_s or 0.0 for r in points], tpot_p50, points, strict=True):
        ax2.annotate(_label(r), (x, y), fontsize=8, textcoords="offset points", xytext=(4, 4))
    ax2.set_xlabel("output tokens / s")
    ax2.set_ylabel("TPOT p50 (ms)")
    ax2.set_title("Throughput vs latency")
    ax2.grid(alpha=0.3)
    _save(plt, fig, out, "throughput.png")
    return "throughput.png", "Throughput against concurrency and against latency"


def _ttft_vs_input(plt: Any, runs: list[RunResult], out: Path) -> tuple[str, str]:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for run in runs:
        pts = [(rec.prompt_tokens, rec.ttft * 1000.0) for rec in run.ok_records
               if rec.prompt_tokens is not None and rec.ttft is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, alpha=0.7, label=_label(run))
    ax.set_xlabel("input tokens")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT vs input length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(plt, fig, out, "ttft_vs_input.png")
    return "ttft_vs_input.png", "TTFT against input length"


def _plots(result: BenchResult, out: Path) -> list[tuple[str, str]]:
    """The report's figures, written beside it: (file name, caption) each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in result.runs if r.completed]
    if not runs:
        return []
    made = [_latency_cdfs(plt, runs, out)]
    points = [r for r in runs if r.output_tok_s is not None and r.tpot is not None]
    if points:
        made.append(_throughput(plt, points, out))
    made.append(_ttft_vs_input(plt, runs, out))
    return made


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return html.escape(str(value))


def _html(result: BenchResult, plots: list[tuple[str, str]]) -> str:
    data = result.to_json(per_request=False)
    rows = []
    for run in data["runs"]:
        def p(metric: str, q: str, run: dict[str, Any] = run) -> str:
            d = run.get(metric)
            return _fmt(d.get(q) if d else None)

        rows.append(
            "<tr>" + "".join(f"<td>{c}</td>" for c in (
                _fmt(run["concurrency"] if run["concurrency"] is not None else "unbounded"), _fmt(run["requests"]),
                _fmt(run["failed"]), p("ttft_ms", "p50"), p("ttft_ms", "p90"), p("ttft_ms", "p99"),
                p("tpot_ms", "p50"), p("tpot_ms", "p99"), p("itl_ms", "p50"), p("e2e_ms", "p50"),
                _fmt(run["output_tok_s"]), _fmt(run["decode_tok_s_per_stream"]), _fmt(run["prefill_tok_s"]),
                _fmt(run["goodput_req_s"], 2), _fmt(run["server_counts_match"]),
                "partial" if run["partial"] else "",
            )) + "</tr>")
    head = ("concurrency", "requests", "failed", "TTFT p50", "TTFT p90", "TTFT p99", "TPOT p50", "TPOT p99",
            "ITL p50", "E2E p50", "output tok/s", "decode tok/s/stream", "prefill tok/s", "goodput req/s",
            "server counts match", "")
    ss = data["single_stream"]
    status = "complete" if data["complete"] else f"INCOMPLETE: {html.escape(str(data['aborted']))}"
    imgs = "\n".join(f'<figure><img src="{name}" alt="{html.escape(caption)}"><figcaption>{html.escape(caption)}'
                     f"</figcaption></figure>" for name, caption in plots)
    target = data["target"]
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>forklift bench: {html.escape(str(target['model']))}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}img{{max-width:100%}}</style></head>
<body>
<h1>forklift bench: {html.escape(str(target['model']))} at {html.escape(str(target['base_url']))}</h1>
<p>Status: <b>{status}</b>. Times in milliseconds. Definitions follow <code>vllm bench serve</code>: TTFT to the first
streamed chunk, TPOT = (E2E - TTFT) / (output tokens - 1), ITL = gaps between chunks, goodput = requests meeting
every SLO per second.</p>
<p>Single stream: decode {_fmt(ss['decode_tok_s'])} tok/s, prefill {_fmt(ss['prefill_tok_s'])} tok/s;
planner roofline {_fmt(ss['roofline_decode_tok_s'])} tok/s ({html.escape(ss['roofline_source'])}):
<b>{_fmt(ss['pct_of_roofline'])}%</b> of roofline.</p>
<table><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>
{''.join(rows)}
</table>
{imgs}
<h2>Settings</h2><pre>{html.escape(json.dumps(data['settings'], indent=2))}</pre>
</body></html>
"""


def write(result: BenchResult, out_dir: Path) -> dict[str, Path]:
    """Write results.json, the PNGs and report.html under ``out_dir``; returns what was written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        results = out_dir / "results.json"
        results.write_text(json.dumps(result.to_json(), indent=2))
        plots = _plots(result, out_dir)
        report = out_dir / "report.html"
        report.write_text(_html(result, plots))
    except OSError as exc:
        raise BenchError(f"cannot write the report to {out_dir}: {exc.strerror or exc}",
                         fix="Pass --out DIR to a writable directory.") from exc
    written = {"results": results, "report": report}
    written.update({name.removesuffix(".png"): out_dir / name for name, _ in plots})
    return written
