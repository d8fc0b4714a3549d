"""Pure metric arithmetic: percentiles, per-request latencies, goodput. No I/O.

Definitions follow vLLM's ``vllm bench serve`` (vllm/benchmarks/serve.py, 0.32/0.33):

- TTFT: send to the first streamed chunk that carries a choice.
- ITL: every gap between consecutive choice-carrying chunks, pooled over requests (per chunk, not per
  token: with speculative decoding one chunk can carry several tokens).
- E2E: send to the last choice-carrying chunk.
- TPOT: per request ``(e2e - ttft) / (output_tokens - 1)`` when ``output_tokens > 1``; averaged with equal
  weight per request.
- Goodput: requests meeting every SLO, divided by the run's duration (DistServe).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from forklift.bench.options import flag


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks.

    The same rule as ``numpy.percentile``'s default: position ``(n - 1) * q / 100`` in the sorted data.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} outside 0..100")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return data[lo]
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def pstdev(values: Sequence[float]) -> float:
    """Population standard deviation (divides by n, like ``numpy.std``'s default); 0 for one value."""
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / len(values))


@dataclass(frozen=True)
class Distribution:
    """Summary of one latency metric, in milliseconds."""

    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    count: int

    def to_json(self) -> dict[str, float | int]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99,
                "min": self.min, "max": self.max, "count": self.count}


def distribution_ms(seconds: Sequence[float]) -> Distribution | None:
    """Summarise durations given in seconds as milliseconds; None for no data."""
    if not seconds:
        return None
    ms = [s * 1000.0 for s in seconds]
    return Distribution(mean=mean(ms), p50=percentile(ms, 50), p90=percentile(ms, 90), p99=percentile(ms, 99),
                        min=min(ms), max=max(ms), count=len(ms))


def inter_token_latencies(chunk_times: Sequence[float]) -> list[float]:
    """Gaps between consecutive chunk arrival times (seconds). The first chunk's TTFT is not a gap."""
    return [b - a for a, b in zip(chunk_times, chunk_times[1:], strict=False)]


def time_per_output_token(e2e: float, ttft: float, output_tokens: int) -> float | None:
    """vLLM's TPOT: decode time over the tokens after the first; None for fewer than two tokens."""
    if output_tokens < 2:
        return None
    return (e2e - ttft) / (output_tokens - 1)


@dataclass(frozen=True)
class Slo:
    """Service-level objectives in milliseconds; None means no objective on that metric."""

    ttft_ms: float | None = flag(None, "--slo-ttft-ms", "Goodput SLO on TTFT.", positive=True)
    tpot_ms: float | None = flag(None, "--slo-tpot-ms", "Goodput SLO on TPOT.", positive=True)
    e2e_ms: float | None = flag(None, "--slo-e2e-ms", "Goodput SLO on E2E latency.", positive=True)

    @property
    def any(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None or self.e2e_ms is not None

    def met(self, ttft: float, tpot: float | None, e2e: float) -> bool:
        """Whether one request (times in seconds) meets every objective. TPOT of a 1-token answer counts as 0."""
        if self.ttft_ms is not None and ttft * 1000.0 > self.ttft_ms:
            return False
        if self.tpot_ms is not None and (tpot or 0.0) * 1000.0 > self.tpot_ms:
            return False
        return not (self.e2e_ms is not None and e2e * 1000.0 > self.e2e_ms)

    def to_json(self) -> dict[str, float | None]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}
