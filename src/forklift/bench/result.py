"""Benchmark results: per request, per run (one concurrency level), and the whole benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from forklift.bench import stats
from forklift.bench.server_metrics import CounterCheck


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client measured it. Times in seconds; ``start`` relative to the run's start."""

    start: float
    prompt_tokens: int | None
    output_tokens: int
    chunks: int
    ttft: float | None
    e2e: float | None
    itl: tuple[float, ...]
    error: str | None = None
    server_prompt_tokens: int | None = None
    server_output_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft is not None

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.e2e is None or self.ttft is None:
            return None
        return stats.time_per_output_token(self.e2e, self.ttft, self.output_tokens)

    def to_json(self) -> dict[str, Any]:
        def ms(v: float | None) -> float | None:
            return None if v is None else v * 1000.0

        return {"start_s": self.start, "input_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "chunks": self.chunks, "ttft_ms": ms(self.ttft), "tpot_ms": ms(self.tpot), "e2e_ms": ms(self.e2e),
                "server_input_tokens": self.server_prompt_tokens, "server_output_tokens": self.server_output_tokens,
                "itl_ms": [gap * 1000.0 for gap in self.itl], "error": self.error}


@dataclass(frozen=True)
class RunResult:
    """One load level: a fixed concurrency (``None``: unbounded) and optionally a Poisson rate."""

    concurrency: int | None
    rate: float | None
    duration_s: float
    records: tuple[RequestRecord, ...]
    slo: stats.Slo
    counters: CounterCheck | None = None
    partial: bool = False
    stop_reason: str | None = None

    @property
    def ok_records(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def completed(self) -> int:
        return len(self.ok_records)

    @property
    def failed(self) -> int:
        return len(self.records) - self.completed

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.ok_records)

    @property
    def input_tokens(self) -> int:
        return sum(r.prompt_tokens or 0 for r in self.ok_records)

    def _per_second(self, amount: float) -> float | None:
        return amount / self.duration_s if self.duration_s > 0 else None

    @property
    def output_tok_s(self) -> float | None:
        return self._per_second(self.output_tokens)

    @property
    def ttft(self) -> stats.Distribution | None:
        return stats.distribution_ms([r.ttft for r in self.ok_records if r.ttft is not None])

    @property
    def tpot(self) -> stats.Distribution | None:
        return stats.distribution_ms([t for r in self.ok_records if (t := r.tpot) is not None])

    @property
    def itl(self) -> stats.Distribution | None:
        return stats.distribution_ms([gap for r in self.ok_records for gap in r.itl])

    @property
    def e2e(self) -> stats.Distribution | None:
        return stats.distribution_ms([r.e2e for r in self.ok_records if r.e2e is not None])

    @property
    def decode_tok_s_per_stream(self) -> float | None:
        """Median over requests of one stream's decode rate, ``1 / TPOT``."""
        rates = [1.0 / t for r in self.ok_records if (t := r.tpot) is not None and t > 0]
        return stats.percentile(rates, 50) if rates else None

    @property
    def prefill_tok_s(self) -> float | None:
        """Median of input tokens / TTFT; only meaningful (and only reported) at concurrency 1."""
        if self.concurrency != 1:
            return None
        rates = [r.prompt_tokens / r.ttft for r in self.ok_records if r.prompt_tokens and r.ttft]
        return stats.percentile(rates, 50) if rates else None

    @property
    def good_requests(self) -> int | None:
        if not self.slo.any:
            return None
        return sum(1 for r in self.ok_records
                   if r.ttft is not None and r.e2e is not None and self.slo.met(r.ttft, r.tpot, r.e2e))

    @property
    def goodput_req_s(self) -> float | None:
        good = self.good_requests
        return None if good is None else self._per_second(good)

    def errors(self, limit: int = 5) -> list[str]:
        seen: list[str] = []
        for r in self.records:
            if r.error and r.error not in seen:
                seen.append(r.error)
        return seen[:limit]

    def to_json(self, *, per_request: bool = True) -> dict[str, Any]:
        def dist(d: stats.Distribution | None) -> dict[str, float | int] | None:
            return None if d is None else d.to_json()

        out: dict[str, Any] = {
            "concurrency": self.concurrency,
            "rate": self.rate,
            "requests": len(self.records),
            "completed": self.completed,
            "failed": self.failed,
            "partial": self.partial,
            "stop_reason": self.stop_reason,
            "duration_s": self.duration_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "ttft_ms": dist(self.ttft),
            "tpot_ms": dist(self.tpot),
            "itl_ms": dist(self.itl),
            "e2e_ms": dist(self.e2e),
            "output_tok_s": self.output_tok_s,
            "total_tok_s": self._per_second(self.output_tokens + self.input_tokens),
            "request_s": self._per_second(self.completed),
            "decode_tok_s_per_stream": self.decode_tok_s_per_stream,
            "prefill_tok_s": self.prefill_tok_s,
            "slo": self.slo.to_json() if self.slo.any else None,
            "good_requests": self.good_requests,
            "goodput_req_s": self.goodput_req_s,
            "server_counts_match": self.counters.match if self.counters else None,
            "server_counts": self.counters.to_json() if self.counters else None,
            "errors": self.errors(),
        }
        if per_request:
            out["per_request"] = [r.to_json() for r in self.records]
        return out


@dataclass(frozen=True)
class SingleStream:
    """Concurrency-1 figures and how they compare to the planner's roofline."""

    decode_tok_s: float | None
    prefill_tok_s: float | None
    roofline_decode_tok_s: float | None
    roofline_source: str

    @property
    def pct_of_roofline(self) -> float | None:
        if self.decode_tok_s is None or not self.roofline_decode_tok_s:
            return None
        return 100.0 * self.decode_tok_s / self.roofline_decode_tok_s

    def to_json(self) -> dict[str, Any]:
        return {"decode_tok_s": self.decode_tok_s, "prefill_tok_s": self.prefill_tok_s,
                "roofline_decode_tok_s": self.roofline_decode_tok_s, "roofline_source": self.roofline_source,
                "pct_of_roofline": self.pct_of_roofline}


@dataclass(frozen=True)
class BenchResult:
    target: dict[str, Any]
    settings: dict[str, Any]
    runs: tuple[RunResult, ...]
    single_stream: SingleStream
    started_at: float
    aborted: str | None = None
    skipped_levels: tuple[int | None, ...] = field(default_factory=tuple)

    @property
    def complete(self) -> bool:
        return self.aborted is None and not any(r.partial for r in self.runs)

    @property
    def counts_match(self) -> bool | None:
        """All runs' counters agree (True), any disagrees (False), or the server gave none (None)."""
        matches = [r.counters.match for r in self.runs if r.counters is not None]
        if any(m is False for m in matches):
            return False
        if matches and all(m is True for m in matches):
            return True
        return None

    def to_json(self, *, per_request: bool = True) -> dict[str, Any]:
        return {
            "target": self.target,
            "settings": self.settings,
            "started_at": self.started_at,
            "complete": self.complete,
            "aborted": self.aborted,
            "skipped_concurrency": list(self.skipped_levels),
            "server_counts_match": self.counts_match,
            "single_stream": self.single_stream.to_json(),
            "runs": [r.to_json(per_request=per_request) for r in self.runs],
        }


def single_stream(runs: Sequence[RunResult], roofline: float | None, source: str) -> SingleStream:
    one = next((r for r in runs if r.concurrency == 1 and r.completed), None)
    return SingleStream(
        decode_tok_s=one.decode_tok_s_per_stream if one else None,
        prefill_tok_s=one.prefill_tok_s if one else None,
        roofline_decode_tok_s=roofline,
        roofline_source=source if one else f"{source}; no concurrency-1 run",
    )
