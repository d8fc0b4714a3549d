"""Confidence intervals for the relative change of a metric between two sides (A, the baseline; B, the candidate).

Two kinds, combined by ``canary.compare``:

- ``between_starts``: the unit of evidence is the server start. Each run gives one value of the metric; the runs
  of one start are averaged (on the log scale), and the starts of each side are the samples. Their spread,
  pooled over both sides, is mixed with a stated prior noise (``prior_sd`` per run from a fresh start, worth
  ``prior_df`` degrees of freedom), and the interval is Student's t on the difference of the sides' log means.
  With one start per side nothing in the data measures start-to-start noise: the interval is then the prior's
  alone (t with ``prior_df`` degrees of freedom), so only a change beyond the prior noise can be decided.
- ``relative_change``: the request-level bootstrap below, the within-run sampling noise. It is a floor: a
  run-level interval is never reported narrower than it.

Every request-level interval is a two-sample bootstrap (``scipy.stats.bootstrap``, requests of A and of B resampled
independently, percentile method) of ``statistic(B) / statistic(A) - 1``. The resampling unit is the request:
the data handed to scipy are request indices, and each statistic gathers what it needs from them, so the
inter-token gaps of one request always travel together (a cluster bootstrap: gaps inside a request are not
independent). Statistics are vectorized over scipy's resample batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps

Floats = NDArray[np.float64]
Statistic = Callable[[NDArray[np.intp]], Floats]
"""Maps index arrays of shape (..., n) to one value per row (shape (...))."""

DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """``value`` = statistic(B) / statistic(A) - 1 on the samples themselves; ``low``..``high`` its interval."""

    value: float
    low: float
    high: float
    confidence: float

    @property
    def crosses_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


def ratio_of_sums(numerator: Sequence[float] | Floats, denominator: Sequence[float] | Floats) -> Statistic:
    """sum(numerator) / sum(denominator) over the chosen requests (tokens per second of request time)."""
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)

    def stat(idx: NDArray[np.intp]) -> Floats:
        total = den[idx].sum(axis=-1)
        return np.asarray(np.where(total > 0, num[idx].sum(axis=-1) / np.where(total > 0, total, 1.0), np.nan))

    return stat


def percentile_of(values: Sequence[float] | Floats, q: float) -> Statistic:
    """The q-th percentile (linear interpolation, as ``numpy.percentile``) of one value per request."""
    data = np.asarray(values, dtype=float)

    def stat(idx: NDArray[np.intp]) -> Floats:
        return np.asarray(np.percentile(data[idx], q, axis=-1))

    return stat


def pooled_percentile_of(groups: Sequence[Sequence[float]], q: float) -> Statistic:
    """The q-th percentile of every value of the chosen requests pooled (inter-token gaps), by the inverted CDF
    of the pooled values weighted by how often each request was drawn."""
    n = len(groups)
    owners = np.concatenate([np.full(len(g), i, dtype=np.intp) for i, g in enumerate(groups)] or [np.empty(0, np.intp)])
    flat = np.concatenate([np.asarray(g, dtype=float) for g in groups] or [np.empty(0)])
    order = np.argsort(flat, kind="stable")
    sorted_values = flat[order]
    # below[j, k]: how many of request j's values are among the k+1 smallest; cumulative weight = counts @ below.
    below = np.cumsum(np.eye(n)[:, owners[order]], axis=1) if n else np.zeros((0, 0))

    def stat(idx: NDArray[np.intp]) -> Floats:
        batch = idx.reshape(-1, idx.shape[-1])
        rows = batch.shape[0]
        offsets = (np.arange(rows)[:, None] * n + batch).ravel()
        counts = np.bincount(offsets, minlength=rows * n).reshape(rows, n).astype(float)
        cum = counts @ below
        total = cum[:, -1:] if cum.shape[1] else np.zeros((rows, 1))
        pos = np.argmax(cum >= np.maximum(q / 100.0 * total, 1e-12), axis=1)
        out = np.where(total[:, 0] > 0, sorted_values[pos] if len(sorted_values) else np.nan, np.nan)
        return np.asarray(out.reshape(idx.shape[:-1]))

    return stat


def relative_change(stat_a: Statistic, n_a: int, stat_b: Statistic, n_b: int, *,
                    confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                    seed: int = 0) -> Interval | None:
    """statistic_b / statistic_a - 1 with its bootstrap interval; None without two samples on each side or when
    the baseline's statistic is zero."""
    if n_a < 2 or n_b < 2:
        return None
    all_a, all_b = np.arange(n_a), np.arange(n_b)
    base = float(stat_a(all_a))
    if not np.isfinite(base) or base == 0.0:
        return None
    value = float(stat_b(all_b)) / base - 1.0

    def change(ia: Floats, ib: Floats, axis: int = -1) -> Floats:
        a = stat_a(np.moveaxis(ia, axis, -1).astype(np.intp))
        b = stat_b(np.moveaxis(ib, axis, -1).astype(np.intp))
        return np.asarray(np.where(a != 0, b / np.where(a != 0, a, 1.0) - 1.0, np.nan))

    res = sps.bootstrap((all_a.astype(float), all_b.astype(float)), change, paired=False, vectorized=True,
                        n_resamples=resamples, confidence_level=confidence, method="percentile",
                        rng=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    return Interval(value, low, high, confidence)


DEFAULT_PRIOR_DF = 6.0
"""How many degrees of freedom the prior noise is worth: as much evidence of the noise as seven starts per side
would give. The data's own spread outweighs it from four starts per side on."""


def between_starts(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], *, prior_sd: float,
                   prior_df: float = DEFAULT_PRIOR_DF, confidence: float = DEFAULT_CONFIDENCE) -> Interval | None:
    """mean(B) / mean(A) - 1 (geometric means over starts of the per-start geometric mean of runs) with a t
    interval whose variance pools the starts' spread on both sides with the prior (see the module's doc).
    ``a`` and ``b`` hold, per start, the metric's value of each run. None when a side has no positive value."""
    with np.errstate(divide="ignore", invalid="ignore"):  # a value <= 0 gives -inf / nan: refused just below
        logs_a = [np.log(np.asarray(s, dtype=float)) for s in a if len(s)]
        logs_b = [np.log(np.asarray(s, dtype=float)) for s in b if len(s)]
    if not logs_a or not logs_b or not all(np.isfinite(x).all() for x in (*logs_a, *logs_b)):
        return None
    starts_a = np.array([x.mean() for x in logs_a])
    starts_b = np.array([x.mean() for x in logs_b])
    diff = float(starts_b.mean() - starts_a.mean())
    ss = float(((starts_a - starts_a.mean()) ** 2).sum() + ((starts_b - starts_b.mean()) ** 2).sum())
    df = prior_df + len(starts_a) - 1 + len(starts_b) - 1
    if df <= 0:
        return None
    var = (prior_df * prior_sd ** 2 + ss) / df
    half = float(sps.t.ppf(0.5 + confidence / 2, df)) * float(np.sqrt(var * (1 / len(starts_a) + 1 / len(starts_b))))
    return Interval(float(np.expm1(diff)), float(np.expm1(diff - half)), float(np.expm1(diff + half)), confidence)


def widest(*intervals: Interval | None) -> Interval | None:
    """The first interval's value with the union of all their spans (None entries skipped; None if all are)."""
    got = [i for i in intervals if i is not None]
    if not got:
        return None
    return Interval(got[0].value, min(i.low for i in got), max(i.high for i in got), got[0].confidence)
