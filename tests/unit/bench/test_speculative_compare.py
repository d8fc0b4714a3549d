"""Speculative run beside its no-speculation baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forklift.bench.result import BenchResult, RequestRecord, RunResult, single_stream
from forklift.bench.server_metrics import CounterCheck
from forklift.bench.speculative import compare, write_comparison
from forklift.bench.stats import Slo
from forklift.errors import BenchError

SETTINGS = {"workload": "copy", "seed": 0, "input_len": 128, "output_len": 101, "requests": 2, "duration_s": None,
            "rate": None, "prompts_file": None, "ignore_eos": True, "concurrency": [1]}


def _result(e2e: float, spec: dict[str, object] | None, **settings: object) -> BenchResult:
    # 101 tokens: TTFT 0.1 s, then 100 tokens in e2e - 0.1 s
    records = tuple(RequestRecord(start=i, prompt_tokens=128, output_tokens=101, chunks=60, ttft=0.1, e2e=e2e,
                                  itl=(0.01,)) for i in range(2))
    counters = CounterCheck(256, 202, 256.0, 202.0, spec_decode=spec)
    run = RunResult(concurrency=1, rate=None, duration_s=2 * e2e, records=records, slo=Slo(), counters=counters)
    return BenchResult(target={"base_url": "http://x", "model": "m", "run": None}, settings={**SETTINGS, **settings},
                       runs=(run,), single_stream=single_stream((run,), None, "none"), started_at=0.0)


STATS = {"acceptance_length": 3.0, "per_position_acceptance_rate": [0.9, 0.7, 0.4], "tokens_per_step": 2.5,
         "draft_coverage": 0.75, "acceptance_rate": 0.66, "num_drafts": 30.0}


def test_speedup_and_acceptance_side_by_side(tmp_path: Path) -> None:
    out = compare(_result(1.1, STATS), _result(2.1, None))
    level = out["levels"][0]
    # spec: 100 tokens in 1.0 s -> 100 tok/s per stream; baseline: 100 tokens in 2.0 s -> 50 tok/s
    assert level["decode_tok_s_per_stream"] == {"speculative": 100.0, "baseline": 50.0, "speedup": 2.0}
    assert level["acceptance_length"] == 3.0 and level["per_position_acceptance_rate"] == [0.9, 0.7, 0.4]
    assert level["tokens_per_step"] == 2.5 and out["workload"] == "copy" and out["notes"] == []
    write_comparison(out, tmp_path)
    assert json.loads((tmp_path / "spec_comparison.json").read_text())["levels"][0]["acceptance_length"] == 3.0


def test_a_baseline_that_drafts_is_called_out() -> None:
    out = compare(_result(1.1, STATS), _result(2.1, {"num_drafts": 5.0}))
    assert "baseline server proposed drafts" in out["notes"][0]


def test_different_workloads_are_refused() -> None:
    with pytest.raises(BenchError, match="workload"):
        compare(_result(1.1, STATS), _result(2.1, None, workload="prose"))


def test_acceptance_stuck_at_zero_is_named_in_the_comparison() -> None:
    from forklift.speculative.metrics import summarize

    stuck = summarize(400, 1600, 0, [0, 0, 0, 0], 800)
    out = compare(_result(2.1, stuck), _result(2.1, None))
    assert out["levels"][0]["suspect"] == stuck["suspect"]
    assert out["notes"] == [f"c=1: {stuck['suspect']}"] and "vllm-project/vllm#53030" in out["notes"][0]
