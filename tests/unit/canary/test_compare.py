from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from forklift import canary
from forklift.canary.stats import Interval
from forklift.errors import CompareError
from tests.unit.canary.samples import bench_json, check_json


def _bench(seed: int, **kw: Any) -> canary.Bench:
    saved = canary.from_json(bench_json(seed, **kw), f"run{seed}")
    assert isinstance(saved, canary.Bench)
    return saved


@pytest.mark.parametrize(("low", "high", "better", "verdict", "words"), [
    (-0.03, 0.02, "higher", "ok", "no significant change"),
    (-0.30, -0.10, "higher", "regressed", "worse, by more than the 5% threshold"),
    (0.10, 0.30, "lower", "regressed", "worse, by more than"),
    (-0.30, -0.10, "lower", "improved", "better, by more than"),
    (-0.12, -0.02, "higher", "regressed", "worse, by more than"),  # -7%: significant and beyond 5%
    (-0.06, -0.01, "higher", "ok", "significantly worse, but within the 5% threshold"),
    (-0.20, 0.10, "higher", "inconclusive", "inconclusive: noise 15% exceeds the 5% threshold"),
    (-0.10, 0.20, "lower", "inconclusive", "noise 15% exceeds"),
    (-0.30, 0.04, "lower", "ok", "no significant change"),  # only better changes beyond the threshold are open
])
def test_judge(low: float, high: float, better: Literal["higher", "lower"], verdict: str, words: str) -> None:
    got, note = canary.judge(Interval((low + high) / 2, low, high, 0.95), better, 0.05)
    assert got == verdict and words in note


def test_a_quarter_slower_candidate_regresses_on_the_requests_alone_without_prior_noise() -> None:
    c = canary.compare(_bench(1), _bench(2, dilation=1.25), prior_noise=0.0)
    assert c.verdict == "regressed"
    by = {m.metric: m for m in c.metrics}
    tput = by["output_tok_s"]
    assert tput.verdict == "regressed" and tput.gated and tput.low is not None and tput.high is not None
    assert tput.low <= -0.2 <= tput.high + 0.03
    assert by["tpot_p50_ms"].verdict == "regressed" and by["itl_p50_ms"].verdict == "regressed"
    assert not by["ttft_p99_ms"].gated and not by["itl_p50_ms"].gated
    gated = [m for m in c.metrics if m.gated and m.change is not None]
    assert {m.metric for m in gated} == {"output_tok_s", "ttft_p50_ms", "tpot_p50_ms"}
    assert all(m.confidence == pytest.approx(1 - 0.05 / 3, abs=1e-4) for m in gated)  # shared by the three
    assert by["ttft_p99_ms"].confidence == pytest.approx(0.95)


def test_the_same_distribution_is_not_flagged() -> None:
    c = canary.compare(_bench(1), _bench(2), prior_noise=0.0)
    assert c.verdict != "regressed" and not c.regressed, [(m.metric, m.note) for m in c.metrics if m.verdict != "ok"]
    assert next(m for m in c.metrics if m.metric == "output_tok_s").verdict == "ok"


def test_one_run_each_decides_only_changes_beyond_the_prior_noise() -> None:
    quarter = canary.compare(_bench(1), _bench(2, dilation=1.25))
    assert quarter.verdict == "inconclusive" and any("one server start per side" in n for n in quarter.notes)
    tput = next(m for m in quarter.metrics if m.metric == "output_tok_s")
    assert tput.verdict == "inconclusive" and "exceeds the 5% threshold" in tput.note
    assert tput.low is not None and tput.low < -0.2 < 0.0 < (tput.high or 0)
    assert canary.compare(_bench(1), _bench(2)).verdict != "regressed"
    assert canary.compare(_bench(1), _bench(2, dilation=3.0)).verdict == "regressed"
    # a quieter machine states its own noise, and then a quarter is decided from one run each
    assert canary.compare(_bench(1), _bench(2, dilation=1.25), prior_noise=0.02).verdict == "regressed"


def test_failed_requests_regress_without_an_interval() -> None:
    c = canary.compare(_bench(1), _bench(1, failed=3))
    failed = next(m for m in c.metrics if m.metric == "failed_requests")
    assert (failed.a, failed.b, failed.verdict, failed.change) == (0, 3, "regressed", None)
    assert c.verdict == "regressed"


def test_gate_chooses_the_deciding_metrics() -> None:
    c = canary.compare(_bench(1), _bench(2, dilation=1.25), gate=["ttft_p99_ms"], prior_noise=0.0)
    assert [m.metric for m in c.metrics if m.gated] == ["ttft_p99_ms"]


def test_goodput_only_with_the_same_slo_on_both_sides() -> None:
    slo = {"ttft_ms": 400.0, "tpot_ms": None, "e2e_ms": None}
    with_slo = canary.compare(_bench(1, slo=slo), _bench(2, slo=slo, dilation=2.0), prior_noise=0.0)
    good = next(m for m in with_slo.metrics if m.metric == "goodput_req_s")
    assert good.verdict == "regressed"
    assert "goodput_req_s" not in {m.metric for m in canary.compare(_bench(1, slo=slo), _bench(2)).metrics}


def test_results_without_per_request_gaps_skip_itl_only() -> None:
    c = canary.compare(_bench(1, itl=False), _bench(2))
    itl = next(m for m in c.metrics if m.metric == "itl_p50_ms")
    assert itl.change is None and "not compared" in itl.note
    assert next(m for m in c.metrics if m.metric == "tpot_p50_ms").change is not None


def test_different_workloads_are_named_and_disjoint_levels_refused() -> None:
    c = canary.compare(_bench(1), _bench(2, tokens=16))
    assert any("output_len: 32 -> 16" in n for n in c.notes)
    with pytest.raises(CompareError, match="no load level in common"):
        canary.compare(_bench(1), _bench(2, concurrency=8))


def test_check_reports_compare_verdict_by_verdict() -> None:
    a = canary.from_json(check_json(endpoint="pass", completion="pass", tools="warn", auth="skip"), "a")
    b = canary.from_json(check_json(endpoint="ok", completion="fail", tools="pass", auth="pass"), "b")
    c = canary.compare(a, b)
    got = {m.metric: m.verdict for m in c.metrics}
    assert got == {"endpoint": "ok", "completion": "regressed", "tools": "improved", "auth": "ok"}
    assert c.verdict == "regressed" and "completion said fail" in c.regressed[0].note


def test_a_bench_result_against_a_check_report_is_refused() -> None:
    with pytest.raises(CompareError, match="cannot compare a bench result"):
        canary.compare(_bench(1), canary.from_json(check_json(endpoint="pass"), "c"))
    checks = [canary.from_json(check_json(endpoint="pass"), f"c{k}") for k in range(3)]
    with pytest.raises(CompareError, match="one against one"):
        canary.compare(checks[:2], checks[2])
    with pytest.raises(CompareError, match="no result on side A"):
        canary.compare([], _bench(1))


def test_load_reads_files_and_bench_folders(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(bench_json(1)))
    assert isinstance(canary.load(tmp_path / "b"), canary.Bench)
    (tmp_path / "summary.json").write_text(json.dumps({"runs": [{"concurrency": 1}]}))
    with pytest.raises(CompareError, match="without per-request samples"):
        canary.load(tmp_path / "summary.json")
    with pytest.raises(CompareError, match="no such file"):
        canary.load(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(CompareError, match="neither bench results"):
        canary.load(tmp_path / "x.json")


def test_the_public_names_are_sorted_and_exist() -> None:
    assert canary.__all__ == sorted(canary.__all__)
    for name in canary.__all__:
        assert hasattr(canary, name)
