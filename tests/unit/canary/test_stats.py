from __future__ import annotations

import numpy as np
import pytest

from forklift.canary import stats


def test_ratio_of_sums_is_tokens_over_request_time() -> None:
    stat = stats.ratio_of_sums([10, 20, 30], [1.0, 2.0, 3.0])
    assert float(stat(np.arange(3))) == pytest.approx(60 / 6)
    batch = stat(np.array([[0, 0, 0], [2, 2, 1]]))  # resamples along the last axis
    assert batch.tolist() == pytest.approx([10.0, 80 / 8])


def test_pooled_percentile_with_each_request_once_is_the_inverted_cdf_of_all_values() -> None:
    rng = np.random.default_rng(3)
    groups = [list(rng.exponential(1.0, size=int(k))) for k in rng.integers(1, 30, size=12)]
    flat = np.concatenate(groups)
    for q in (1, 50, 90, 99):
        got = float(stats.pooled_percentile_of(groups, q)(np.arange(len(groups))))
        assert got == pytest.approx(float(np.percentile(flat, q, method="inverted_cdf")))


def test_pooled_percentile_weights_a_request_drawn_twice() -> None:
    stat = stats.pooled_percentile_of([[1.0, 1.0], [5.0, 5.0, 5.0, 5.0]], 50)
    assert float(stat(np.array([0, 0, 0, 1]))) == 1.0  # six 1s and four 5s: the median is 1
    assert float(stat(np.array([1, 1]))) == 5.0


def test_interval_covers_a_known_slowdown_and_excludes_zero() -> None:
    rng = np.random.default_rng(7)
    e2e_a = rng.gamma(20.0, 0.05, size=40)
    e2e_b = rng.gamma(20.0, 0.05, size=40) * 1.25  # 1 - 1/1.25: throughput 20% lower
    tokens = [64] * 40
    got = stats.relative_change(stats.ratio_of_sums(tokens, e2e_a), 40, stats.ratio_of_sums(tokens, e2e_b), 40,
                                seed=1)
    assert got is not None and not got.crosses_zero
    assert got.low < -0.2 + 0.06 and got.high > -0.2 - 0.06 and got.high < 0
    assert got.value == pytest.approx(e2e_a.sum() / e2e_b.sum() - 1)


def test_same_distribution_mostly_crosses_zero() -> None:
    rng = np.random.default_rng(11)
    crossing = 0
    for trial in range(20):
        a, b = rng.gamma(20.0, 0.05, size=30), rng.gamma(20.0, 0.05, size=30)
        got = stats.relative_change(stats.percentile_of(a, 50), 30, stats.percentile_of(b, 50), 30, seed=trial,
                                    resamples=500)
        assert got is not None
        crossing += got.crosses_zero
    assert crossing >= 16  # a 95% interval; 20 trials


def test_too_few_samples_or_a_zero_baseline_give_no_interval() -> None:
    one = stats.percentile_of([1.0], 50)
    assert stats.relative_change(one, 1, one, 1) is None
    zero = stats.percentile_of([0.0, 0.0, 0.0], 50)
    assert stats.relative_change(zero, 3, stats.percentile_of([1.0, 2.0, 3.0], 50), 3) is None
