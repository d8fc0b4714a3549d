"""The SLO ``tune`` optimises under: ``ttft_p95=2s,tpot_p95=80ms`` (times in ms unless a unit is given).

Each item names a latency (``ttft``, ``tpot``, ``e2e``), a percentile (``pNN``) and a limit. A run meets the SLO
when every named percentile of its requests is within its limit. Goodput counts the requests that met every limit
themselves (DistServe's per-request goodput, as ``forklift bench --slo-*`` does), per second of the run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from forklift.bench.stats import Slo, percentile
from forklift.errors import TuneError

METRICS = ("ttft", "tpot", "e2e")
EXAMPLE = "--slo ttft_p95=2000,tpot_p95=80 (milliseconds; 2s and 80ms also work)"
_ITEM = re.compile(r"^(?P<metric>[a-z0-9]+)_p(?P<q>\d+(?:\.\d+)?)$")
_VALUE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?$")


@dataclass(frozen=True)
class Limit:
    metric: str
    """ttft, tpot or e2e."""
    q: float
    """The percentile (0..100) that must be within the limit."""
    ms: float

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.q:g}"


@dataclass(frozen=True)
class TuneSlo:
    limits: tuple[Limit, ...]

    def per_request(self) -> Slo:
        """The per-request limits (the strictest per metric) for goodput."""
        def lowest(metric: str) -> float | None:
            got = [x.ms for x in self.limits if x.metric == metric]
            return min(got) if got else None

        return Slo(ttft_ms=lowest("ttft"), tpot_ms=lowest("tpot"), e2e_ms=lowest("e2e"))

    def percentiles(self, values_ms: Mapping[str, Sequence[float]]) -> dict[str, float | None]:
        """Each limit's percentile of the given per-request values (ms), by the limit's key."""
        return {x.key: (percentile(list(values_ms[x.metric]), x.q) if values_ms.get(x.metric) else None)
                for x in self.limits}

    def met(self, values_ms: Mapping[str, Sequence[float]]) -> bool:
        """Whether every limit holds at its percentile; a metric without values does not meet it."""
        got = self.percentiles(values_ms)
        return all(got[x.key] is not None and float(got[x.key] or 0.0) <= x.ms for x in self.limits)

    def text(self) -> str:
        return ",".join(f"{x.key}={x.ms:g}ms" for x in self.limits)

    def to_json(self) -> dict[str, float]:
        return {x.key + "_ms": x.ms for x in self.limits}


def parse(text: str) -> TuneSlo:
    """``ttft_p95=2000,tpot_p95=80ms`` -> TuneSlo; TuneError names the bad item and the fix."""
    limits: list[Limit] = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        key, sep, value = raw.partition("=")
        m = _ITEM.match(key.strip().lower())
        if not sep or m is None or m.group("metric") not in METRICS:
            raise TuneError(f"--slo item {raw!r} is not METRIC_pNN=LIMIT (METRIC one of {', '.join(METRICS)})",
                            fix=f"Pass for example {EXAMPLE}.")
        q = float(m.group("q"))
        if not 0 < q <= 100:
            raise TuneError(f"--slo item {raw!r}: percentile p{m.group('q')} is outside 1..100",
                            fix=f"Pass for example {EXAMPLE}.")
        v = _VALUE.match(value.strip().lower())
        if v is None:
            raise TuneError(f"--slo item {raw!r}: {value!r} is not a positive time",
                            fix=f"Pass for example {EXAMPLE}.")
        ms = float(v.group("num")) * (1000.0 if v.group("unit") == "s" else 1.0)
        if ms <= 0 or not math.isfinite(ms):
            raise TuneError(f"--slo item {raw!r}: the limit must be above zero", fix=f"Pass for example {EXAMPLE}.")
        if any(x.metric == m.group("metric") and x.q == q for x in limits):
            raise TuneError(f"--slo names {key.strip()} twice", fix="Name each METRIC_pNN once.")
        limits.append(Limit(m.group("metric"), q, ms))
    if not limits:
        raise TuneError("--slo names no limit", fix=f"Pass for example {EXAMPLE}.")
    return TuneSlo(tuple(limits))
