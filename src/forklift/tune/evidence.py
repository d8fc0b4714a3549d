"""``tune``'s statistics: ``compare``'s, with the run as the measurement and the server start as the unit.

One run of a workload against one server start gives one goodput (requests that met the SLO per second). A
candidate's runs are grouped by start; ``canary.stats.between_starts`` (runs of a start averaged on the log scale,
starts as the samples, their spread pooled with a stated prior noise per run) gives the interval of one
candidate's goodput relative to another's, as ``forklift compare`` does for goodput. The same pooled variance
gives each candidate's own interval (``level``). A run in which no request met the SLO is counted as half a good
request over its duration (the log scale needs a positive value; the note says so where it happens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as sps

from forklift.canary import stats
from forklift.canary.compare import PRIOR_NOISE

DEFAULT_PRIOR = PRIOR_NOISE["goodput_req_s"]
DEFAULT_CONFIDENCE = 0.90


@dataclass(frozen=True)
class Level:
    """A candidate's goodput: the geometric mean over starts and its interval."""

    value: float
    low: float
    high: float
    starts: int
    runs: int


def floor_goodput(goodput: float, duration_s: float) -> float:
    """Half a request over the run when none met the SLO (see the module's doc)."""
    return goodput if goodput > 0 else 0.5 / max(duration_s, 1e-9)


def run_noise(groups: Sequence[Sequence[float]]) -> float | None:
    """The run-to-run noise measured in this session: the pooled standard deviation of log values within a start
    (over every candidate's starts with two runs or more); None without such a start."""
    ss, df = 0.0, 0
    for g in groups:
        logs = [math.log(v) for v in g if v > 0]
        if len(logs) >= 2:
            m = sum(logs) / len(logs)
            ss += sum((x - m) ** 2 for x in logs)
            df += len(logs) - 1
    return math.sqrt(ss / df) if df else None


def noise_for(groups: Sequence[Sequence[float]], prior: float = DEFAULT_PRIOR) -> float:
    """The noise the intervals use: the stated prior, or the session's measured run-to-run noise when larger.
    Goodput near an SLO's edge moves far more than throughput (a request just over the limit counts zero), so
    the tok/s prior alone would understate it."""
    got = run_noise(groups)
    return prior if got is None else max(prior, got)


def level(groups: Sequence[Sequence[float]], *, prior_sd: float = DEFAULT_PRIOR,
          prior_df: float = stats.DEFAULT_PRIOR_DF, confidence: float = DEFAULT_CONFIDENCE) -> Level | None:
    """The runs' values grouped by start -> geometric mean with a t interval over starts, pooled with the prior."""
    logs = [[math.log(v) for v in g] for g in groups if g and all(v > 0 for v in g)]
    if not logs or len(logs) != len([g for g in groups if g]):
        return None
    means = [sum(g) / len(g) for g in logs]
    centre = sum(means) / len(means)
    ss = sum((m - centre) ** 2 for m in means)
    df = prior_df + len(means) - 1
    var = (prior_df * prior_sd ** 2 + ss) / df if df > 0 else prior_sd ** 2
    half = float(sps.t.ppf(0.5 + confidence / 2, max(df, 1.0))) * math.sqrt(var / len(means))
    return Level(math.exp(centre), math.exp(centre - half), math.exp(centre + half), len(means),
                 sum(len(g) for g in logs))


def relative(base: Sequence[Sequence[float]], cand: Sequence[Sequence[float]], *, prior_sd: float = DEFAULT_PRIOR,
             prior_df: float = stats.DEFAULT_PRIOR_DF,
             confidence: float = DEFAULT_CONFIDENCE) -> stats.Interval | None:
    """cand / base - 1 with compare's start-level interval (``canary.stats.between_starts``)."""
    return stats.between_starts(base, cand, prior_sd=prior_sd, prior_df=prior_df, confidence=confidence)


def verdict(iv: stats.Interval | None, threshold: float = 0.0) -> str:
    """better / worse / inconclusive: noise N% (half the interval's width) for a candidate against a reference."""
    if iv is None:
        return "not compared"
    if iv.low > threshold:
        return "better"
    if iv.high < -threshold:
        return "worse"
    return f"inconclusive: noise {100 * (iv.high - iv.low) / 2:.0f}% exceeds the difference"
