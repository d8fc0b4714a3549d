"""vLLM's ``/metrics`` page read into totals, and what two pages say about the time between them.

A :class:`Page` is one scrape, summed over engines and label sets (only ``model``'s samples when a model is
given): gauges, counters (named without ``_total``), histogram buckets (cumulative counts by upper bound) and
the per-position spec-decode acceptances. :func:`window` turns two pages into rates, percentiles from the
bucket deltas (as Prometheus's ``histogram_quantile`` interpolates them) and acceptance over the window.

Names are vLLM V1's (``v1/metrics/loggers.py`` in 0.10 to 0.33); TPOT is the per-request histogram
``vllm:request_time_per_output_token_seconds``, else the older ``vllm:time_per_output_token_seconds``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"
PROMPT = "vllm:prompt_tokens"
GENERATION = "vllm:generation_tokens"
PREEMPTIONS = "vllm:num_preemptions"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"
TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
TPOT_OLD = "vllm:time_per_output_token_seconds"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class Page:
    """One ``/metrics`` scrape at ``at`` (seconds, any monotonic clock)."""

    at: float
    gauges: Mapping[str, tuple[float, ...]]
    """Every sample of a gauge (one per engine and label set)."""
    counters: Mapping[str, float]
    buckets: Mapping[str, Mapping[float, float]]
    """Histogram name -> upper bound (``inf`` for +Inf) -> cumulative count."""
    accepted_per_pos: Mapping[int, float] = field(default_factory=dict)

    def gauge_sum(self, name: str) -> float | None:
        values = self.gauges.get(name)
        return sum(values) if values else None

    def gauge_max(self, name: str) -> float | None:
        values = self.gauges.get(name)
        return max(values) if values else None

    @property
    def is_vllm(self) -> bool:
        return PROMPT in self.counters or GENERATION in self.counters


def parse(text: str, *, at: float, model: str | None = None) -> Page:
    """A page of Prometheus text. Raises ``ValueError`` when it is not Prometheus text.

    prometheus_client's parser names a counter family without ``_total`` and its samples with it; the
    ``_created`` samples (start timestamps) are dropped.
    """
    gauges: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if model is not None and labels.get("model_name", model) != model:
                continue
            name = sample.name
            if family.type == "histogram":
                if name.endswith("_bucket") and "le" in labels:
                    le = float(labels["le"])
                    hist = buckets.setdefault(family.name, {})
                    hist[le] = hist.get(le, 0.0) + sample.value
            elif family.type == "gauge":
                gauges.setdefault(name, []).append(sample.value)
            elif name.endswith("_total"):
                base = name.removesuffix("_total")
                if base == SPEC_ACCEPTED_PER_POS:
                    pos = int(labels.get("position", "-1"))
                    per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                else:
                    counters[base] = counters.get(base, 0.0) + sample.value
    return Page(at=at, gauges={k: tuple(v) for k, v in gauges.items()}, counters=counters, buckets=buckets,
                accepted_per_pos=per_pos)


def quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a histogram given as cumulative counts by upper bound, interpolated linearly inside
    the bucket it falls in (Prometheus's ``histogram_quantile``: the first bucket starts at 0, a quantile in the
    +Inf bucket is the largest finite bound). None when the histogram counted nothing."""
    bounds = sorted(cumulative)
    if not bounds or not math.isinf(bounds[-1]):
        return None
    total = cumulative[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = cumulative[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


def bucket_delta(before: Mapping[float, float] | None, after: Mapping[float, float]) -> dict[float, float]:
    """Counts added per bound between two scrapes; a reset (a count that went down) reads as the later page."""
    if before is None or any(after.get(le, 0.0) < v for le, v in before.items()):
        return dict(after)
    return {le: v - before.get(le, 0.0) for le, v in after.items()}


@dataclass(frozen=True)
class Latency:
    """Percentiles in milliseconds over the requests one histogram counted."""

    p50_ms: float | None
    p95_ms: float | None
    requests: int

    def to_json(self) -> dict[str, Any]:
        return {"p50_ms": _r(self.p50_ms), "p95_ms": _r(self.p95_ms), "requests": self.requests}


def latency(cumulative: Mapping[float, float] | None) -> Latency | None:
    if not cumulative:
        return None
    p50, p95 = quantile(0.5, cumulative), quantile(0.95, cumulative)
    count = int(max(cumulative.values()))
    return Latency(None if p50 is None else p50 * 1000, None if p95 is None else p95 * 1000, count)


@dataclass(frozen=True)
class Speculative:
    """Acceptance over a window of counter deltas (``forklift.speculative.metrics`` defines the figures)."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_position: tuple[float | None, ...]

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def acceptance_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    def to_json(self) -> dict[str, Any]:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "acceptance_rate": _r(self.acceptance_rate, 3), "acceptance_length": _r(self.acceptance_length, 3),
                "per_position_acceptance_rate": [_r(p, 3) for p in self.per_position]}


@dataclass(frozen=True)
class Window:
    """What the server did between two scrapes (``seconds`` apart), and its state at the second."""

    seconds: float
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    """The fullest engine's share of KV blocks in use, 0..1."""
    generation_tok_s: float | None
    prompt_tok_s: float | None
    prefix_cache_hit_rate: float | None
    """Hit tokens over queried tokens in the window; None when nothing was queried."""
    prefix_cache_hit_rate_total: float | None
    preemptions: float | None
    """Since the server started."""
    preemptions_window: float | None
    ttft: Latency | None
    tpot: Latency | None
    ttft_total: Latency | None
    """Since the server started (what an idle window cannot show)."""
    tpot_total: Latency | None
    speculative: Speculative | None
    speculative_total: Speculative | None

    def to_json(self) -> dict[str, Any]:
        def j(x: Latency | Speculative | None) -> dict[str, Any] | None:
            return None if x is None else x.to_json()

        return {
            "window_s": _r(self.seconds, 3),
            "requests_running": self.running, "requests_waiting": self.waiting,
            "kv_cache_usage": _r(self.kv_cache_usage, 4),
            "generation_tok_s": _r(self.generation_tok_s), "prompt_tok_s": _r(self.prompt_tok_s),
            "prefix_cache_hit_rate": _r(self.prefix_cache_hit_rate, 4),
            "prefix_cache_hit_rate_total": _r(self.prefix_cache_hit_rate_total, 4),
            "preemptions_total": self.preemptions, "preemptions_window": self.preemptions_window,
            "ttft": j(self.ttft), "tpot": j(self.tpot), "ttft_total": j(self.ttft_total),
            "tpot_total": j(self.tpot_total),
            "speculative": j(self.speculative), "speculative_total": j(self.speculative_total),
        }


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def _counter_delta(before: Page, after: Page, name: str) -> float | None:
    a = after.counters.get(name)
    if a is None:
        return None
    b = before.counters.get(name, 0.0)
    return a if a < b else a - b  # a counter that went down: the server restarted between the scrapes


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _speculative(drafts: float | None, draft_tokens: float | None, accepted: float | None,
                 per_pos: Sequence[float]) -> Speculative | None:
    if drafts is None or draft_tokens is None or accepted is None:
        return None
    return Speculative(drafts, draft_tokens, accepted, tuple(p / drafts if drafts else None for p in per_pos))


def _histogram(page: Page, *names: str) -> Mapping[float, float] | None:
    return next((page.buckets[n] for n in names if n in page.buckets), None)


def window(before: Page, after: Page) -> Window:
    """Rates and percentiles over ``after.at - before.at``; gauges as ``after`` reads them."""
    seconds = max(after.at - before.at, 1e-9)

    def rate(name: str) -> float | None:
        d = _counter_delta(before, after, name)
        return None if d is None else d / seconds

    def hist(*names: str) -> tuple[Latency | None, Latency | None]:
        a = _histogram(after, *names)
        if a is None:
            return None, None
        return latency(bucket_delta(_histogram(before, *names), a)), latency(a)

    ttft, ttft_total = hist(TTFT)
    tpot, tpot_total = hist(TPOT, TPOT_OLD)
    positions = sorted(after.accepted_per_pos)
    spec = _speculative(_counter_delta(before, after, SPEC_DRAFTS), _counter_delta(before, after, SPEC_DRAFT_TOKENS),
                        _counter_delta(before, after, SPEC_ACCEPTED),
                        [after.accepted_per_pos[p] - before.accepted_per_pos.get(p, 0.0) for p in positions])
    spec_total = _speculative(after.counters.get(SPEC_DRAFTS), after.counters.get(SPEC_DRAFT_TOKENS),
                              after.counters.get(SPEC_ACCEPTED), [after.accepted_per_pos[p] for p in positions])
    kv = after.gauge_max(KV_USAGE)
    return Window(
        seconds=seconds,
        running=after.gauge_sum(RUNNING),
        waiting=after.gauge_sum(WAITING),
        kv_cache_usage=kv if kv is not None else after.gauge_max(KV_USAGE_OLD),
        generation_tok_s=rate(GENERATION),
        prompt_tok_s=rate(PROMPT),
        prefix_cache_hit_rate=_ratio(_counter_delta(before, after, PREFIX_HITS),
                                     _counter_delta(before, after, PREFIX_QUERIES)),
        prefix_cache_hit_rate_total=_ratio(after.counters.get(PREFIX_HITS), after.counters.get(PREFIX_QUERIES)),
        preemptions=after.counters.get(PREEMPTIONS),
        preemptions_window=_counter_delta(before, after, PREEMPTIONS),
        ttft=ttft, tpot=tpot, ttft_total=ttft_total, tpot_total=tpot_total,
        speculative=spec, speculative_total=spec_total,
    )
