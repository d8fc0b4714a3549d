"""compare's unit of evidence is the server start: rates on synthetic results with known truth and a
start-to-start and run-to-run noise of the size measured on vLLM-CPU (fixed seeds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from forklift import canary
from forklift.canary import stats
from tests.unit.canary.samples import bench_json, side_json

TRIALS = 20


def _side(seed: int, **kw: Any) -> list[canary.Saved]:
    return [canary.from_json(d, f"s{seed}-{k}") for k, d in enumerate(side_json(seed, **kw))]


def _verdicts(starts: int, dilation: float, runs: int = 1) -> list[str]:
    return [canary.compare(_side(1000 + t, starts=starts, runs=runs), _side(2000 + t, starts=starts, runs=runs,
                                                                             dilation=dilation), resamples=200).verdict
            for t in range(TRIALS)]


def test_five_starts_a_side_meet_the_bar_on_whole_runs() -> None:
    """Identical configurations flagged in at most 1 of 10, a 20% drop in at least 9 of 10."""
    same = _verdicts(5, 1.0)
    drop = _verdicts(5, 1.25)  # every time x1.25: throughput exactly 20% lower
    assert same.count("regressed") <= TRIALS // 10, same
    assert drop.count("regressed") >= 9 * TRIALS // 10, drop


def test_request_level_bootstrap_alone_flags_identical_configurations_from_separate_starts() -> None:
    """Why the start is the unit: pooling the requests of whole runs ignores the start-to-start noise."""
    flagged = [canary.compare(_side(3000 + t, starts=1), _side(4000 + t, starts=1), prior_noise=0.0,
                              resamples=200).verdict for t in range(TRIALS)]
    honest = [canary.compare(_side(3000 + t, starts=1), _side(4000 + t, starts=1), resamples=200).verdict
              for t in range(TRIALS)]
    assert flagged.count("regressed") > TRIALS // 10  # above the 1 in 10 bar
    assert honest.count("regressed") <= TRIALS // 10


def test_one_start_a_side_is_inconclusive_on_a_20pct_drop_not_regressed() -> None:
    drop = _verdicts(1, 1.25)
    assert drop.count("regressed") <= TRIALS // 10 < drop.count("inconclusive")


def test_runs_of_one_start_on_both_sides_are_the_units() -> None:
    rows = side_json(7, starts=1, runs=6)
    a = [canary.from_json(d, f"a{k}") for k, d in enumerate(rows[:3])]
    b = [canary.from_json(d, f"b{k}") for k, d in enumerate(rows[3:])]
    c = canary.compare(a, b, resamples=200)
    assert c.evidence == {"runs_a": 3, "runs_b": 3, "starts_a": 1, "starts_b": 1, "unit": "run"}
    assert not any("one server start per side" in n for n in c.notes)


def test_results_that_name_no_start_are_each_a_start_of_their_own() -> None:
    a = [canary.from_json(bench_json(k), f"a{k}") for k in range(3)]
    b = [canary.from_json(bench_json(10 + k), f"b{k}") for k in range(2)]
    c = canary.compare(a, b, resamples=200)
    assert c.evidence == {"runs_a": 3, "runs_b": 2, "starts_a": 3, "starts_b": 2, "unit": "start"}


def test_between_starts_interval_covers_the_truth_at_its_confidence() -> None:
    """Log-normal starts with a known ratio; the prior states the true noise. 95% intervals cover ~95%."""
    rng = np.random.default_rng(5)
    truth, sd, covered = 0.8, 0.08, 0
    for _ in range(400):
        a = [[float(np.exp(rng.normal(0.0, sd)))] for _ in range(4)]
        b = [[truth * float(np.exp(rng.normal(0.0, sd)))] for _ in range(4)]
        got = stats.between_starts(a, b, prior_sd=sd, confidence=0.95)
        assert got is not None
        covered += got.low <= truth - 1 <= got.high
    assert covered / 400 == pytest.approx(0.95, abs=0.03)


def test_between_starts_without_data_spread_rests_on_the_prior() -> None:
    wide = stats.between_starts([[1.0]], [[0.8]], prior_sd=0.10)
    narrow = stats.between_starts([[1.0]], [[0.8]], prior_sd=0.02)
    assert wide is not None and narrow is not None
    assert wide.value == pytest.approx(-0.2) and wide.crosses_zero and not narrow.crosses_zero
    assert stats.between_starts([[1.0]], [[-1.0]], prior_sd=0.1) is None
