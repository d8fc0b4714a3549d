"""What ``tune`` shows: a row per candidate and workload (goodput with its interval, throughput, the SLO's
percentiles, status), and a Pareto page (output tok/s against the SLO's latency percentile, with the goodput
interval as error bars; the frontier and the SLO line drawn) as a self-contained HTML file with an inline SVG."""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from typing import Any

from forklift.tune import evidence
from forklift.tune.search import Outcome, RunSample, Trial
from forklift.tune.slo import TuneSlo


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _latency_key(slo: TuneSlo) -> str:
    tpot = [x for x in slo.limits if x.metric == "tpot"]
    return (tpot or list(slo.limits))[0].key


def rows(outcome: Outcome, slo: TuneSlo, prior: float = evidence.DEFAULT_PRIOR,
         confidence: float = evidence.DEFAULT_CONFIDENCE) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for w in outcome.workloads:
        noise = evidence.noise_for([g for t in outcome.trials for g in t.groups(w)], prior)
        for t in outcome.trials:
            samples = [s for s in t.samples if s.workload == w]
            lv = evidence.level(t.groups(w), prior_sd=noise, confidence=confidence) if samples else None
            row: dict[str, Any] = {
                "workload": w, "candidate": t.candidate.name, "sets": list(t.candidate.sets), "status": t.status,
                "reason": t.reason, "starts": lv.starts if lv else 0, "runs": len(samples),
                "goodput_req_s": None if lv is None else round(lv.value, 4),
                "goodput_interval": None if lv is None else [round(lv.low, 4), round(lv.high, 4)],
                "output_tok_s": _round(_mean([s.output_tok_s for s in samples])),
                "met_slo_runs": sum(1 for s in samples if s.met_slo),
                "predicted_goodput_req_s": round(t.candidate.predicted, 4),
                "predicted_p95_ms": t.candidate.predicted_p95_ms,
                "winner": outcome.winner.get(w) == t.candidate.name,
            }
            for key in [x.key for x in slo.limits] + ["ttft_p50", "tpot_p50"]:
                vals = [float(v) for s in samples if (v := s.percentiles_ms.get(key)) is not None]
                row[f"{key}_ms"] = _round(_mean(vals))
            out.append(row)
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def markdown(outcome: Outcome, slo: TuneSlo, table: list[dict[str, Any]], title: str) -> str:
    keys = [x.key for x in slo.limits]
    lines = [f"# {title}", "", f"SLO: {slo.text()}; budget {outcome.budget_s:.0f} s, used {outcome.seconds:.0f} s.",
             "", "| workload | candidate | status | starts/runs | goodput req/s (interval) | tok/s | "
             + " | ".join(f"{k} ms" for k in keys) + " |", "|---|---|---|---|---|---|" + "---|" * len(keys)]
    for r in table:
        span = "-" if r["goodput_interval"] is None else \
            f"{r['goodput_req_s']:.3g} ({r['goodput_interval'][0]:.3g}..{r['goodput_interval'][1]:.3g})"
        name = f"**{r['candidate']}**" if r["winner"] else r["candidate"]
        lines.append(f"| {r['workload']} | {name} | {r['status']} | {r['starts']}/{r['runs']} | {span} | "
                     f"{r['output_tok_s'] if r['output_tok_s'] is not None else '-'} | "
                     + " | ".join(str(r.get(f"{k}_ms") if r.get(f"{k}_ms") is not None else "-") for k in keys)
                     + " |")
    lines.append("")
    for w, v in outcome.versus_baseline.items():
        if v.get("ratio") is not None:
            lines.append(f"- {w}: winner {v['winner']}, goodput {v['ratio']:.2f}x the baseline "
                         f"({100 * v['confidence']:.0f}% interval {v['interval'][0]:.2f}..{v['interval'][1]:.2f}x, "
                         f"{v['starts']['baseline']} vs {v['starts']['winner']} start(s)): {v['verdict']}")
        else:
            lines.append(f"- {w}: {v.get('verdict')}")
    lines += [f"- note: {n}" for n in outcome.notes]
    return "\n".join(lines) + "\n"


def _frontier(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points no other beats on both throughput (higher) and latency (lower), by latency."""
    keep = [p for p in points if not any(q[0] >= p[0] and q[1] <= p[1] and (q[0], q[1]) != (p[0], p[1])
                                          for q in points)]
    return sorted(keep, key=lambda p: p[1])


def pareto_svg(trials: Sequence[Trial], workload: str, slo: TuneSlo, winner: str | None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    key = _latency_key(slo)
    limit = next(x.ms for x in slo.limits if x.key == key)
    points: list[tuple[float, float, str]] = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in trials:
        samples: list[RunSample] = [s for s in t.samples if s.workload == workload]
        lat = [float(v) for s in samples if (v := s.percentiles_ms.get(key)) is not None]
        if not samples or not lat:
            continue
        tok = sum(s.output_tok_s for s in samples) / len(samples)
        x = sum(lat) / len(lat)
        points.append((tok, x, t.candidate.name))
        lo, hi = min(s.output_tok_s for s in samples), max(s.output_tok_s for s in samples)
        ax.errorbar([x], [tok], yerr=[[tok - lo], [hi - tok]], xerr=[[x - min(lat)], [max(lat) - x]], fmt="o",
                    color="tab:red" if t.candidate.name == winner else "tab:blue", capsize=3)
        ax.annotate(t.candidate.name, (x, tok), fontsize=7, xytext=(4, 4), textcoords="offset points")
    front = _frontier(points)
    if len(front) > 1:
        ax.plot([p[1] for p in front], [p[0] for p in front], "--", color="grey", label="Pareto frontier")
    ax.axvline(limit, color="tab:orange", label=f"SLO {key} {limit:g} ms")
    ax.set_xlabel(f"{key} (ms), lower is better; bars: run range")
    ax.set_ylabel("output tok/s, higher is better")
    ax.set_title(f"{workload}: throughput against latency per candidate")
    ax.legend(fontsize=8)
    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.find("<svg"):]


def page(outcome: Outcome, slo: TuneSlo, table: list[dict[str, Any]], title: str) -> str:
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:980px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style>",
             f"<h1>{html.escape(title)}</h1><p>SLO {html.escape(slo.text())}; goodput intervals are "
             "compare's (server starts as the unit, pooled with the prior run noise).</p>"]
    for w in outcome.workloads:
        parts.append(f"<h2>{html.escape(w)}</h2>")
        parts.append(pareto_svg(outcome.trials, w, slo, outcome.winner.get(w)))
        v = outcome.versus_baseline.get(w, {})
        parts.append(f"<p>{html.escape(str(v))}</p>")
    cols = ["workload", "candidate", "status", "starts", "runs", "goodput_req_s", "goodput_interval",
            "output_tok_s", *[f"{x.key}_ms" for x in slo.limits], "reason"]
    parts.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>")
    for r in table:
        parts.append("<tr>" + "".join(f"<td>{html.escape(str(r.get(c)))}</td>" for c in cols) + "</tr>")
    parts.append("</table>")
    return "\n".join(parts)
