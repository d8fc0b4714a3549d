"""What a benchmark runs: the one description of its settings, their flags, defaults and limits.

``forklift bench``'s options are built from this model (see :mod:`forklift.bench.options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.bench import options
from forklift.bench.options import flag
from forklift.bench.stats import Slo
from forklift.errors import BenchError
from forklift.speculative import workload as spec_workload


def _whole(part: str) -> int:
    try:
        return int(part)
    except ValueError:
        raise ValueError(f"{part!r} is not a whole number") from None


def parse_counts(text: str) -> tuple[int, ...]:
    """``0,4096,16384`` -> (0, 4096, 16384); ValueError names the bad part."""
    return tuple(_whole(p.strip()) for p in text.split(","))


def parse_levels(text: str) -> tuple[int | None, ...]:
    """``1,2,4`` -> (1, 2, 4); ``inf`` (or ``unbounded``) is a level without a cap."""
    parts = (p.strip() for p in text.split(","))
    return tuple(None if part in ("inf", "unbounded") else _whole(part) for part in parts)


@dataclass(frozen=True)
class BenchConfig:
    """What to run. ``concurrency`` entries of None mean unbounded (only sensible with ``rate``)."""

    concurrency: tuple[int | None, ...] = flag(
        (1,), "--concurrency", "Levels, e.g. 1,2,4,8 ('inf': no cap).", short="-c", parse=parse_levels,
        default_text="1, or no cap with --rate", example="1,2,4")
    input_len: int = flag(128, "--input-len", "Prompt tokens per request.")
    output_len: int = flag(64, "--output-len", "Output tokens per request (EOS ignored).", minimum=1)
    requests: int | None = flag(16, "--requests", "Requests per level.", short="-r", minimum=1,
                                default_text="16, or as many as fit --duration")
    rate: float | None = flag(None, "--rate", "Poisson arrivals, requests/s.", positive=True)
    duration_s: float | None = flag(None, "--duration", "Seconds per level.", positive=True)
    prompts_file: Path | None = flag(None, "--prompts", "JSONL file: {prompt, output_len}.")
    warmup: int = flag(1, "--warmup", "Warm-up requests before measuring.", minimum=0)
    slo: Slo = field(default_factory=Slo)
    seed: int = flag(0, "--seed", "Seed of the random prompts and arrival times.")
    workload: str | None = flag(None, "--workload", "A repetitive workload for speculative decoding instead of random "
                                "prompts: copy, edit or prose.")
    request_timeout_s: float = 600.0
    ignore_eos: bool = True

    @classmethod
    def from_flags(cls, values: Mapping[str, Any]) -> BenchConfig:
        """A config from flag values keyed by field path (``slo.ttft_ms``); None means not given. Two defaults
        follow other flags: --rate alone runs without a concurrency cap, --duration alone without a count."""
        kw = options.build(cls, values)
        if "concurrency" not in kw and "rate" in kw:
            kw["concurrency"] = (None,)
        if "requests" not in kw and "duration_s" in kw:
            kw["requests"] = None
        config = cls(**kw)
        config.validate()
        return config

    def validate(self) -> None:
        options.validate(self)
        if self.workload is not None and self.workload not in spec_workload.KINDS:
            raise BenchError(f"--workload {self.workload!r} is not a repetitive workload",
                             fix=f"Pass one of: {', '.join(spec_workload.KINDS)}.")
        if self.workload is not None and self.prompts_file is not None:
            raise BenchError("--workload and --prompts both choose the prompts", fix="Pass one of them.")
        if not self.concurrency:
            raise BenchError("no concurrency levels given", fix="Pass --concurrency 1,2,4.")
        for c in self.concurrency:
            if c is not None and c < 1:
                raise BenchError(f"--concurrency {c} is not a positive number of streams",
                                 fix="Pass levels of 1 or more, for example --concurrency 1,2,4.")
            if c is None and self.rate is None:
                raise BenchError("--concurrency inf (no cap) needs a request rate", fix="Pass --rate R.")
        if self.requests is None and self.duration_s is None:
            raise BenchError("neither a request count nor a duration", fix="Pass --requests N or --duration S.")
        if self.input_len < 1 and self.prompts_file is None:
            raise BenchError(f"--input-len {self.input_len} is below 1", fix="Pass --input-len 1 or more.")

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": list(self.concurrency), "input_len": self.input_len, "output_len": self.output_len,
                "requests": self.requests, "duration_s": self.duration_s, "rate": self.rate,
                "prompts_file": str(self.prompts_file) if self.prompts_file else None, "warmup": self.warmup,
                "slo": self.slo.to_json(), "seed": self.seed, "ignore_eos": self.ignore_eos, "workload": self.workload,
                "api": "/v1/completions (streamed, include_usage)"}
