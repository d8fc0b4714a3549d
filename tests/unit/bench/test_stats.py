"""Percentiles, ITL, TPOT and goodput on data small enough to work out by hand."""

from __future__ import annotations

import pytest

from forklift.bench import stats
from forklift.bench.result import RequestRecord, RunResult


def test_percentile_linear_interpolation_by_hand() -> None:
    data = [40.0, 10.0, 30.0, 20.0]  # sorted: 10 20 30 40; position = 3 * q / 100
    assert stats.percentile(data, 0) == 10.0
    assert stats.percentile(data, 100) == 40.0
    # p50: position 1.5 -> halfway between 20 and 30
    assert stats.percentile(data, 50) == pytest.approx(25.0)
    # p90: position 2.7 -> 30 + 0.7 * (40 - 30) = 37
    assert stats.percentile(data, 90) == pytest.approx(37.0)
    # p99: position 2.97 -> 30 + 0.97 * 10 = 39.7
    assert stats.percentile(data, 99) == pytest.approx(39.7)


def test_percentile_of_one_value_and_odd_count() -> None:
    assert stats.percentile([7.0], 99) == 7.0
    # 1..5: p50 is exactly the middle element; p90 at position 3.6 -> 4 + 0.6 = 4.6
    assert stats.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert stats.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 90) == pytest.approx(4.6)


def test_percentile_rejects_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_inter_token_latency_is_gaps_between_chunks() -> None:
    # chunks at 1.0 (first token), 1.25, 1.5, 2.0 -> gaps 0.25, 0.25, 0.5; TTFT is not a gap
    assert stats.inter_token_latencies([1.0, 1.25, 1.5, 2.0]) == pytest.approx([0.25, 0.25, 0.5])
    assert stats.inter_token_latencies([3.0]) == []
    assert stats.inter_token_latencies([]) == []


def test_tpot_excludes_the_first_token() -> None:
    # e2e 2.0 s, ttft 0.5 s, 4 tokens: the 3 tokens after the first took 1.5 s -> 0.5 s each
    assert stats.time_per_output_token(2.0, 0.5, 4) == pytest.approx(0.5)
    assert stats.time_per_output_token(2.0, 0.5, 1) is None


def test_distribution_in_milliseconds() -> None:
    d = stats.distribution_ms([0.1, 0.2, 0.3])
    assert d is not None
    assert (d.mean, d.p50, d.min, d.max, d.count) == pytest.approx((200.0, 200.0, 100.0, 300.0, 3))
    assert stats.distribution_ms([]) is None


def _rec(start: float, ttft: float, chunk_gaps: list[float], tokens: int, prompt: int = 10,
         error: str | None = None) -> RequestRecord:
    e2e = ttft + sum(chunk_gaps)
    return RequestRecord(start=start, prompt_tokens=prompt, output_tokens=tokens, chunks=len(chunk_gaps) + 1,
                         ttft=ttft, e2e=e2e, itl=tuple(chunk_gaps), error=error)


def test_run_metrics_on_known_requests() -> None:
    # A: ttft 0.1, gaps 0.1 0.1 0.1 -> e2e 0.4, 4 tokens, tpot 0.1
    # B: ttft 0.3, gaps 0.2 0.2 0.2 -> e2e 0.9, 4 tokens, tpot 0.2
    # C: failed, must not count anywhere but "failed"
    a = _rec(0.0, 0.1, [0.1, 0.1, 0.1], 4)
    b = _rec(0.0, 0.3, [0.2, 0.2, 0.2], 4)
    c = RequestRecord(start=0.5, prompt_tokens=10, output_tokens=0, chunks=0, ttft=None, e2e=None, itl=(),
                      error="HTTP 500")
    run = RunResult(concurrency=1, rate=None, duration_s=2.0, records=(a, b, c),
                    slo=stats.Slo(ttft_ms=200.0, tpot_ms=150.0))
    assert (run.completed, run.failed) == (2, 1)
    assert run.output_tokens == 8
    assert run.output_tok_s == pytest.approx(4.0)  # 8 tokens / 2 s
    ttft = run.ttft
    assert ttft is not None and ttft.p50 == pytest.approx(200.0)  # between 100 and 300 ms
    tpot = run.tpot
    assert tpot is not None and tpot.mean == pytest.approx(150.0)  # (100 + 200) / 2 ms
    itl = run.itl
    assert itl is not None and itl.count == 6 and itl.mean == pytest.approx(150.0)  # pooled: 3 x 100, 3 x 200
    # per-stream decode: 1/0.1 = 10 and 1/0.2 = 5 tok/s; median of two = 7.5
    assert run.decode_tok_s_per_stream == pytest.approx(7.5)
    # prefill at concurrency 1: 10/0.1 = 100 and 10/0.3 = 33.33; median = 66.67
    assert run.prefill_tok_s == pytest.approx((100.0 + 100.0 / 3) / 2)
    # only A meets ttft <= 200 ms and tpot <= 150 ms -> 1 good request in 2 s
    assert run.good_requests == 1
    assert run.goodput_req_s == pytest.approx(0.5)
    j = run.to_json()
    assert j["ttft_ms"]["p99"] == pytest.approx(100.0 + 0.99 * 200.0)
    assert j["errors"] == ["HTTP 500"]


def test_prefill_is_only_reported_at_concurrency_one() -> None:
    run = RunResult(concurrency=2, rate=None, duration_s=1.0, records=(_rec(0.0, 0.1, [0.1], 2),), slo=stats.Slo())
    assert run.prefill_tok_s is None
    assert run.goodput_req_s is None


def test_single_stream_against_the_roofline() -> None:
    from forklift.bench.result import SingleStream, single_stream

    assert SingleStream(20.0, 500.0, 80.0, "plan").pct_of_roofline == pytest.approx(25.0)
    assert SingleStream(20.0, None, None, "no run record").pct_of_roofline is None
    # one request at c=1: 3 tokens after the first in 0.3 s -> 10 tok/s
    run = RunResult(concurrency=1, rate=None, duration_s=1.0, records=(_rec(0.0, 0.1, [0.1, 0.1, 0.1], 4),),
                    slo=stats.Slo())
    ss = single_stream([run], 40.0, "run record plan")
    assert ss.decode_tok_s == pytest.approx(10.0) and ss.pct_of_roofline == pytest.approx(25.0)
    assert single_stream([], 40.0, "x").decode_tok_s is None


def test_population_std_divides_by_n() -> None:
    # 2 and 4: mean 3, squared deviations 1 and 1, over n = 2 -> 1 (the sample std would be sqrt(2))
    assert stats.pstdev([2.0, 4.0]) == pytest.approx(1.0)
    assert stats.pstdev([5.0]) == 0.0
