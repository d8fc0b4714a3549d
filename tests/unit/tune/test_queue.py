"""``space.latency`` and ``space.predict``: the queue a ``max_num_seqs`` cap creates, worked out by hand.

The plan is the real planner's for the bundled default with round roofline figures put in: one decode step 50 ms
whatever the batch (single-stream 20 tok/s, roofline concurrency 1), prefill 1,300 tok/s, so a 1,000-word prompt
(1,300 tokens at 1.3 a word, one 2,048-token chunk) takes 1.0 s. The workload: 4 users, every prompt 1,000 words,
outputs alternating 50 and 150 tokens (mean 100), so a stall of one prefill costs 1.0 s / 100 = 10 ms a token.
"""

from __future__ import annotations

import pytest

from forklift.plan import Plan, for_launch
from forklift.recipe.deployment import Deployment, resolve
from forklift.tune import space
from forklift.tune.slo import parse
from forklift.tune.workloads import Request, Workload, synthetic

PROMPT = " ".join(["word"] * 1000)
WORKLOAD = Workload("t", 4, (Request(PROMPT, 50), Request(PROMPT, 150)))


def plan(max_num_seqs: int) -> Plan:
    p = for_launch(resolve("default", [f"serve.max_num_seqs={max_num_seqs}"]))
    assert isinstance(p, Plan) and p.max_num_batched_tokens >= 1300
    roof = p.roofline.model_copy(update={"decode_tok_s_single": 20.0, "concurrency": 1, "prefill_tok_s": 1300.0})
    return p.model_copy(update={"roofline": roof})


def test_one_slot_queues_three_requests_and_its_tail_is_the_spread_of_their_service() -> None:
    """max_num_seqs=1, 4 users in a closed loop: 3 requests always wait, so a new one waits for 3 services.
    TPOT = the step, 50 ms (no other stream). Service = 1 s + 50 or 150 tokens x 50 ms = 3.5 or 8.5 s: mean 6,
    spread 2.5. Wait = 3 x 6 = 18 s, spread 2.5 x sqrt(3) = 4.330 s. TTFT = 1 + 18 = 19 s (what the old mean
    model gave), p95 = 19 + 1.645 x 4.330 = 26.12 s. Rate 1/6 req/s."""
    lat = space.latency(plan(1), WORKLOAD)
    assert lat.tpot == pytest.approx(0.050) and lat.tpot_sd == pytest.approx(0.0)
    assert lat.ttft == pytest.approx(19.0)
    assert lat.ttft_sd == pytest.approx(4.3301, rel=1e-4)
    assert lat.ttft_p95 == pytest.approx(26.123, rel=1e-4)
    assert lat.rate == pytest.approx(1 / 6)
    assert lat.e2e == pytest.approx(24.0)  # the wait plus a mean service


def test_two_slots_halve_the_wait_and_add_one_stream_of_stalls() -> None:
    """max_num_seqs=2: one other stream, its prefill stalls once on average (Poisson: spread 1 stall), so TPOT =
    50 + 10 = 60 ms, spread 10 ms, p95 60 + 16.45 = 76.45 ms. Service = 1 + 50 or 150 x 60 ms = 4 or 10 s: mean 7,
    spread 3. 2 requests wait; a new one waits for 2 releases of 2 slots: 2 x 7 / 2 = 7 s, spread 3 x sqrt(2) / 2
    = 2.121 s. TTFT = 8 s, p95 8 + 1.645 x 2.121 = 11.49 s. Rate 2/7 req/s."""
    lat = space.latency(plan(2), WORKLOAD)
    assert lat.tpot == pytest.approx(0.060) and lat.tpot_p95 == pytest.approx(0.07645)
    assert lat.ttft == pytest.approx(8.0) and lat.ttft_p95 == pytest.approx(11.490, rel=1e-4)
    assert lat.rate == pytest.approx(2 / 7)


def test_a_queue_whose_mean_fits_but_whose_tail_does_not_ranks_below_the_steadier_stream() -> None:
    """SLO ttft 20 s, tpot 62 ms. One slot: TTFT mean 19 s fits, but (20 - 19) / 4.330 = 0.231 sd: 59.13% of its
    requests are within; its TPOT, 50 ms with no spread, gets the model's floor (a tenth of the mean, 5 ms):
    (62 - 50) / 5 = 2.4 sd, 99.18% within -> 1/6 x 0.5913 x 0.9918 = 0.0978 req/s (the old model, by the mean,
    counted all of them: 0.1667).
    Two slots: TTFT 8 s (5.7 sd below 20: all within), TPOT (62 - 60) / 10 = 0.2 sd: 57.93% within -> 2/7 x
    0.5793 = 0.1655 req/s. The old model ranked one slot first (its TPOT penalty on 76.45 ms, (62/76.45)^4,
    took two slots to 0.124)."""
    slo = parse("ttft_p95=20000,tpot_p95=62")
    one, two = space.predict(plan(1), WORKLOAD, slo), space.predict(plan(2), WORKLOAD, slo)
    assert one == pytest.approx(0.09775, rel=2e-3)
    assert two == pytest.approx(0.16550, rel=2e-3)
    assert two > one


def test_the_cpu_grid_runs_calibration_now_picks_two_slots_not_one() -> None:
    """The vLLM-CPU grid run of 2026-12-02 (benchmarks/data/tune/cpu-grid.json): the baseline's first start
    measured summarize TTFT p50 4,586 ms and TPOT p50 177.5 ms at 4 users; re-ranked from those, the old model put
    max_num_seqs=1 first, whose 3-deep queue then measured TTFT p95 26-36 s against the 15 s limit. With the
    queue's tail, max_num_seqs=2 (measured 2.69x the defaults in cpu.json) comes first and max_num_seqs=1
    falls below the baseline's grid."""
    w = synthetic("summarize", count=64)
    w = Workload(w.name, 4, w.requests, w.description, w.shared_prefix, w.source, w.meta)
    slo = parse("ttft_p95=15000,tpot_p95=80")
    sp = space.build(resolve("default"), w, slo, max_candidates=2)
    m = space.calibrate(sp.plans["baseline"], w, ttft_p50_ms=4586.0, tpot_p50_ms=177.5)
    assert m is not None
    again = space.rerank(sp, w, slo, m)
    assert again[0].sets == ("serve.max_num_seqs=2",)
    one = space.latency(sp.plans["max_num_seqs=1"], w, m)
    assert one.ttft < 15.0 * 1.5 and one.ttft_p95 > 15.0  # its queue's tail, not only its mean, is past the limit
    base = space.predict(sp.plans["baseline"], w, slo, m)
    assert space.predict(sp.plans["max_num_seqs=1"], w, slo, m) < base < again[0].predicted


def test_candidates_carry_the_predicted_p95s_the_dry_run_shows() -> None:
    """The grid's max_num_seqs=2 on the plan above: TTFT p95 11.49 s, TPOT p95 76.45 ms (worked out in
    test_two_slots_halve_the_wait_and_add_one_stream_of_stalls)."""
    def patched(dep: Deployment) -> Plan:
        p = for_launch(dep)
        assert isinstance(p, Plan)
        roof = p.roofline.model_copy(update={"decode_tok_s_single": 20.0, "concurrency": 1, "prefill_tok_s": 1300.0})
        return p.model_copy(update={"roofline": roof})

    sp = space.build(resolve("default"), WORKLOAD, parse("ttft_p95=20000,tpot_p95=62"), plan_fn=patched,
                     max_candidates=50)
    two = next(c for c in sp.candidates if c.sets == ("serve.max_num_seqs=2",))
    assert two.predicted_p95_ms["ttft_p95"] == pytest.approx(11489.6, abs=0.2)
    assert two.predicted_p95_ms["tpot_p95"] == pytest.approx(76.45, abs=0.01)
    assert two.to_json()["predicted_p95_ms"] == two.predicted_p95_ms
