"""Speculative decoding against a baseline without it: the same workload on two servers, side by side.

The speculative run's acceptance comes from its own /metrics deltas (mean acceptance length, per-position
acceptance, tokens per step, draft coverage); the speed-up is its decode rate over the baseline's at the same
concurrency. Both runs must have used the same prompts (same workload, seed and lengths): ``compare`` refuses
otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forklift.bench.result import BenchResult, RunResult
from forklift.errors import BenchError

_SAME = ("workload", "seed", "input_len", "output_len", "requests", "duration_s", "rate", "prompts_file",
         "ignore_eos", "concurrency")


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


@dataclass(frozen=True)
class LevelComparison:
    """One concurrency level of both runs."""

    concurrency: int | None
    spec: RunResult
    base: RunResult

    @property
    def stats(self) -> dict[str, Any]:
        counters = self.spec.counters
        return (counters.spec_decode if counters is not None else None) or {}

    def to_json(self) -> dict[str, Any]:
        s, b = self.spec, self.base
        st = self.stats
        return {
            "concurrency": self.concurrency,
            "decode_tok_s_per_stream": {"speculative": _r(s.decode_tok_s_per_stream),
                                        "baseline": _r(b.decode_tok_s_per_stream),
                                        "speedup": _ratio(s.decode_tok_s_per_stream, b.decode_tok_s_per_stream)},
            "output_tok_s": {"speculative": _r(s.output_tok_s), "baseline": _r(b.output_tok_s),
                             "speedup": _ratio(s.output_tok_s, b.output_tok_s)},
            "tpot_p50_ms": {"speculative": _r(s.tpot.p50 if s.tpot else None),
                            "baseline": _r(b.tpot.p50 if b.tpot else None)},
            "acceptance_length": _r(st.get("acceptance_length"), 3),
            "per_position_acceptance_rate": [_r(p, 3) for p in st.get("per_position_acceptance_rate") or []],
            "acceptance_rate": _r(st.get("acceptance_rate"), 3),
            "tokens_per_step": _r(st.get("tokens_per_step"), 3),
            "draft_coverage": _r(st.get("draft_coverage"), 3),
            "num_drafts": st.get("num_drafts"),
            "baseline_drafts": ((b.counters.spec_decode or {}).get("num_drafts") if b.counters else None),
            "suspect": st.get("suspect"),
        }


def _check_same(spec: BenchResult, base: BenchResult) -> None:
    differ = [k for k in _SAME if spec.settings.get(k) != base.settings.get(k)]
    if differ:
        raise BenchError(f"the speculative and baseline runs used different settings ({', '.join(differ)})",
                         fix="Run both with the same workload, seed, lengths and concurrency (--spec-baseline does).")


def compare(spec: BenchResult, base: BenchResult) -> dict[str, Any]:
    """The side-by-side record: per level, effective decode rate with and without drafts, and the acceptance
    that explains the difference."""
    _check_same(spec, base)
    base_by_level = {r.concurrency: r for r in base.runs}
    levels = [LevelComparison(r.concurrency, r, base_by_level[r.concurrency]) for r in spec.runs
              if r.concurrency in base_by_level]
    notes = []
    if any(lv.to_json()["baseline_drafts"] for lv in levels):
        notes.append("the baseline server proposed drafts: it is not a run without speculative decoding")
    if any(not lv.stats for lv in levels):
        notes.append("the speculative server exported no spec-decode counters for some level")
    notes += [f"c={lv.concurrency}: {lv.stats['suspect']}" for lv in levels if lv.stats.get("suspect")]
    return {
        "speculative": {"base_url": spec.target.get("base_url"), "run": spec.target.get("run"),
                        "model": spec.target.get("model")},
        "baseline": {"base_url": base.target.get("base_url"), "run": base.target.get("run"),
                     "model": base.target.get("model")},
        "workload": spec.settings.get("workload") or "random tokens",
        "levels": [lv.to_json() for lv in levels],
        "notes": notes,
    }


def write_comparison(comparison: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """``spec_comparison.json`` in ``out_dir``; returns the comparison."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "spec_comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
    return comparison
