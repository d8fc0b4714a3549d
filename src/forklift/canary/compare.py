"""``compare(a, b)``: per metric, B's change against A with a bootstrap interval and a verdict.

Bench metrics are compared per load level present in both (same concurrency and rate). For each metric the
change is ``B / A - 1`` (relative) with a two-sample bootstrap interval over requests (``canary.stats``):

- output tok/s: sum of output tokens / sum of request time (end-to-end) of the requests; at a fixed
  concurrency this moves exactly as the run's throughput does, and it can be resampled per request;
- goodput: the same with only the requests that met every SLO (when the run had SLOs);
- TTFT, TPOT percentiles: of one value per request; ITL percentiles: of the pooled gaps, requests resampled
  whole; failed requests: a count, no interval.

Verdict per metric (``judge``): the interval crossing zero is "no significant change" (ok); an interval that
excludes zero with the change itself worse than the threshold is "regressed" (better than it: "improved"); a
significant change within the threshold is ok, with a note. Only the gated metrics decide the overall verdict, and
their intervals share the confidence (Bonferroni: with three gated metrics at 95%, each interval is 98.3%), so two
identical configurations are flagged about as often as one metric alone would be.
Check reports compare verdict by verdict: a check that passed in A and fails in B regressed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from forklift.canary import stats
from forklift.canary.saved import Bench, Check, Level, Request, Saved
from forklift.errors import CompareError

Verdict = Literal["ok", "regressed", "improved"]
Better = Literal["higher", "lower"]

DEFAULT_THRESHOLD = 0.05
GATED: tuple[str, ...] = ("output_tok_s", "goodput_req_s", "ttft_p50_ms", "tpot_p50_ms", "failed_requests")
"""Metrics that decide the overall verdict unless the caller names others (ITL's median moves with TPOT's; tails
rest on a handful of requests)."""
PERCENTILES = (50, 90, 99)
SETTING_KEYS = ("concurrency", "input_len", "output_len", "requests", "duration_s", "rate", "prompts_file", "slo",
                "ignore_eos")


@dataclass(frozen=True)
class MetricDelta:
    level: str
    metric: str
    better: Better | None
    a: float | str | None
    b: float | str | None
    change: float | None
    """Relative change B / A - 1 (None for verdict-only metrics)."""
    low: float | None
    high: float | None
    verdict: Verdict
    note: str
    gated: bool
    confidence: float | None = None
    """Of this metric's interval: the family's confidence split over the gated metrics (Bonferroni), else the
    comparison's."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    kind: Literal["bench", "check"]
    threshold: float
    confidence: float
    metrics: list[MetricDelta]
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        gated = [m.verdict for m in self.metrics if m.gated]
        if "regressed" in gated:
            return "regressed"
        return "improved" if "improved" in gated else "ok"

    @property
    def regressed(self) -> list[MetricDelta]:
        return [m for m in self.metrics if m.gated and m.verdict == "regressed"]

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "kind": self.kind, "verdict": self.verdict, "threshold": self.threshold,
                "confidence": self.confidence, "notes": self.notes, "metrics": [m.to_json() for m in self.metrics]}


def judge(interval: stats.Interval, better: Better, threshold: float) -> tuple[Verdict, str]:
    """ok / regressed / improved for a relative change and its interval (see the module's doc)."""
    sign = 1.0 if better == "higher" else -1.0
    span = f"{100 * interval.low:+.1f}% .. {100 * interval.high:+.1f}%"
    if interval.crosses_zero:
        return "ok", f"no significant change ({span})"
    change = sign * interval.value  # positive: better
    if change < -threshold:
        return "regressed", f"significantly worse, by more than the {100 * threshold:g}% threshold ({span})"
    if change > threshold:
        return "improved", f"significantly better, by more than the {100 * threshold:g}% threshold ({span})"
    side = "worse" if change < 0 else "better"
    return "ok", f"significantly {side}, but within the {100 * threshold:g}% threshold ({span})"


@dataclass(frozen=True)
class _Opts:
    threshold: float
    thresholds: dict[str, float]
    confidence: float
    resamples: int
    seed: int
    gate: frozenset[str]


StatFor = Callable[[Level], tuple[stats.Statistic, int] | None]
"""A level -> (its statistic over resampling units, how many units), or None when it cannot be computed."""



@dataclass(frozen=True)
class _Spec:
    metric: str
    better: Better
    stat: StatFor
    shown: Callable[[Level], float | None]


def _col(reqs: Sequence[Request], attr: str) -> list[float] | None:
    vals = [getattr(r, attr) for r in reqs]
    return None if any(v is None for v in vals) else [float(v) for v in vals]


def _good(level: Level, r: Request) -> float:
    slo = level.slo or {}

    def over(limit: Any, value: float | None) -> bool:
        return limit is not None and (value or 0.0) * 1000.0 > float(limit)

    bad = over(slo.get("ttft_ms"), r.ttft) or over(slo.get("tpot_ms"), r.tpot) or over(slo.get("e2e_ms"), r.e2e)
    return 0.0 if bad else 1.0


def _per_request(level: Level, stat: stats.Statistic | None) -> tuple[stats.Statistic, int] | None:
    return None if stat is None else (stat, len(level.requests))


def _throughput(level: Level) -> tuple[stats.Statistic, int] | None:
    """Output tokens over request time, per request: at a fixed concurrency it moves as the run's tok/s does."""
    e2e = _col(level.requests, "e2e")
    return _per_request(level, None if e2e is None else
                        stats.ratio_of_sums([r.output_tokens for r in level.requests], e2e))


def _goodput(level: Level) -> tuple[stats.Statistic, int] | None:
    e2e = _col(level.requests, "e2e")
    return _per_request(level, None if e2e is None else
                        stats.ratio_of_sums([_good(level, r) for r in level.requests], e2e))


def _percentile(attr: str, q: int) -> StatFor:
    def make(level: Level) -> tuple[stats.Statistic, int] | None:
        if attr == "itl":
            groups = [r.itl for r in level.requests]
            if any(g is None for g in groups) or not any(groups):
                return None
            return _per_request(level, stats.pooled_percentile_of([list(g or ()) for g in groups], q))
        vals = _col(level.requests, attr)
        return _per_request(level, None if vals is None else stats.percentile_of(vals, q))

    return make


def _shown_percentile(attr: str, q: int) -> Callable[[Level], float | None]:
    def shown(level: Level) -> float | None:
        made = _percentile(attr, q)(level)
        if made is None or not level.requests:
            return None
        return round(float(made[0](np.arange(made[1]))) * 1000.0, 3)

    return shown


def _specs(a: Level, b: Level) -> list[_Spec]:
    out = [_Spec("output_tok_s", "higher", _throughput, lambda lv: lv.output_tok_s)]
    if a.slo and b.slo and a.slo == b.slo:
        out.append(_Spec("goodput_req_s", "higher", _goodput, lambda lv: lv.goodput_req_s))
    for attr in ("ttft", "tpot", "itl"):
        out += [_Spec(f"{attr}_p{q}_ms", "lower", _percentile(attr, q), _shown_percentile(attr, q))
                for q in PERCENTILES]
    return out


def _one(level: str, spec: _Spec, a: Level, b: Level, opts: _Opts, family: int) -> MetricDelta:
    gated = spec.metric in opts.gate
    confidence = 1.0 - (1.0 - opts.confidence) / family if gated and family > 1 else opts.confidence
    shown_a, shown_b = spec.shown(a), spec.shown(b)
    sa, sb = spec.stat(a), spec.stat(b)
    interval = None
    if sa is not None and sb is not None:
        interval = stats.relative_change(sa[0], sa[1], sb[0], sb[1], confidence=confidence,
                                         resamples=opts.resamples, seed=opts.seed)
    if interval is None:
        return MetricDelta(level, spec.metric, spec.better, shown_a, shown_b, None, None, None, "ok",
                           "not compared: too few samples on one side", gated)
    threshold = opts.thresholds.get(spec.metric, opts.threshold)
    verdict, note = judge(interval, spec.better, threshold)
    return MetricDelta(level, spec.metric, spec.better, shown_a, shown_b, round(interval.value, 5),
                       round(interval.low, 5), round(interval.high, 5), verdict, note, gated, round(confidence, 5))


def _failed(level: str, a: Level, b: Level, opts: _Opts) -> MetricDelta:
    worse = b.failed > a.failed
    note = f"{b.failed} failed request(s) against {a.failed}" if worse or b.failed else "none failed"
    return MetricDelta(level, "failed_requests", "lower", a.failed, b.failed, None, None, None,
                       "regressed" if worse else ("improved" if b.failed < a.failed else "ok"), note,
                       "failed_requests" in opts.gate)


def _setting_notes(a: Bench, b: Bench) -> list[str]:
    differ = [k for k in SETTING_KEYS if a.settings.get(k) != b.settings.get(k)]
    if not differ:
        return []
    return ["workloads differ (" + "; ".join(f"{k}: {a.settings.get(k)!r} -> {b.settings.get(k)!r}"
                                             for k in differ) + "): the comparison may not mean what it says"]


def _bench(a: Bench, b: Bench, opts: _Opts) -> tuple[list[MetricDelta], list[str]]:
    notes = _setting_notes(a, b)
    out: list[MetricDelta] = []
    for la in a.levels:
        lb = b.level(la.key)
        if lb is None:
            notes.append(f"{la.key}: only in A")
            continue
        specs = _specs(la, lb)
        family = sum(1 for spec in specs if spec.metric in opts.gate) or 1
        out += [_one(la.key, spec, la, lb, opts, family) for spec in specs]
        out.append(_failed(la.key, la, lb, opts))
    notes += [f"{lb.key}: only in B" for lb in b.levels if a.level(lb.key) is None]
    if not out:
        raise CompareError(f"no load level in common: A has {', '.join(x.key for x in a.levels) or 'none'}, "
                           f"B has {', '.join(x.key for x in b.levels) or 'none'}",
                           fix="Compare runs of the same workload (same --concurrency and --rate).")
    return out, notes


_CHECK_RANK = {"skip": 0, "ok": 1, "warn": 2, "fail": 3}


def _checks(a: Check, b: Check) -> tuple[list[MetricDelta], list[str]]:
    out: list[MetricDelta] = []
    for cid in [*a.statuses, *[c for c in b.statuses if c not in a.statuses]]:
        sa, sb = a.statuses.get(cid), b.statuses.get(cid)
        verdict: Verdict = "ok"
        if sa is not None and sb is not None and "skip" not in (sa, sb) and sa != sb:
            verdict = "regressed" if _CHECK_RANK.get(sb, 0) > _CHECK_RANK.get(sa, 0) else "improved"
        elif sb == "fail" and sa is None:
            verdict = "regressed"
        note = b.summaries.get(cid, "") if sb in ("fail", "warn") else ""
        out.append(MetricDelta("checks", cid, None, sa, sb, None, None, None, verdict, note, True))
    notes = [] if a.tier == b.tier else [f"tiers differ: {a.tier} -> {b.tier}"]
    return out, notes


def compare(a: Saved, b: Saved, *, threshold: float = DEFAULT_THRESHOLD, thresholds: dict[str, float] | None = None,
            confidence: float = stats.DEFAULT_CONFIDENCE, resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0,
            gate: Sequence[str] | None = None) -> Comparison:
    """B against A (A is the baseline). Raises CompareError for a bench result against a check report."""
    if a.kind != b.kind:
        raise CompareError(f"cannot compare a {a.kind} result ({a.path}) with a {b.kind} result ({b.path})",
                           fix="Compare two bench results.json files, or two check reports.")
    if not 0 <= threshold < 1 or not 0.5 <= confidence < 1:
        raise CompareError(f"threshold {threshold} / confidence {confidence} out of range",
                           fix="Pass a threshold between 0 and 1 (0.05 = 5%) and a confidence like 0.95.")
    opts = _Opts(threshold, dict(thresholds or {}), confidence, resamples, seed, frozenset(gate or GATED))
    if isinstance(a, Bench) and isinstance(b, Bench):
        metrics, notes = _bench(a, b, opts)
    else:
        assert isinstance(a, Check) and isinstance(b, Check)
        metrics, notes = _checks(a, b)
    return Comparison(a.path, b.path, a.kind, threshold, confidence, metrics, notes)
