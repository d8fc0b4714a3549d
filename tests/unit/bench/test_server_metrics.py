"""Parsing vLLM's /metrics text and comparing counter deltas with the client's counts."""

from __future__ import annotations

import pytest

from forklift.bench import server_metrics as sm

BEFORE = """\
# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 20.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
# HELP vllm:generation_tokens Number of generation tokens processed.
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 50.0
vllm:generation_tokens_total{engine="0",model_name="other"} 999.0
"""

AFTER_SPEC = """\
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 164.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 20.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 82.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 15.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
"""


def test_parse_sums_engines_and_filters_the_model() -> None:
    snap = sm.parse(BEFORE, model="m")
    assert snap.get(sm.PROMPT) == 120.0  # both engines, _created ignored
    assert snap.get(sm.GENERATION) == 50.0  # the other model's samples are not ours
    assert sm.parse(BEFORE).get(sm.GENERATION) == 1049.0


def test_parse_without_type_lines() -> None:
    text = 'vllm:prompt_tokens_total{model_name="m"} 3.0\nvllm:generation_tokens_total{model_name="m"} 4.0\n'
    snap = sm.parse(text, "m")
    assert (snap.get(sm.PROMPT), snap.get(sm.GENERATION)) == (3.0, 4.0)


def test_compare_counts_and_spec_decode() -> None:
    before, after = sm.parse(BEFORE, "m"), sm.parse(AFTER_SPEC, "m")
    check = sm.compare(before, after, client_prompt=64, client_generation=32)
    assert check.match is True
    j = check.to_json()
    assert j["prompt_tokens"] == {"client": 64, "server": 64.0, "difference": 0.0}
    spec = j["spec_decode"]
    assert spec is not None
    # 15 accepted of 30 drafted; 10 drafts -> 1 + 15/10 = 2.5 tokens per step
    assert spec["acceptance_rate"] == pytest.approx(0.5)
    assert spec["acceptance_length"] == pytest.approx(2.5)
    assert spec["per_position_acceptance_rate"] == pytest.approx([0.8, 0.5, 0.2])


def test_a_difference_is_reported_not_hidden() -> None:
    check = sm.compare(sm.parse(BEFORE, "m"), sm.parse(AFTER_SPEC, "m"), client_prompt=60, client_generation=32)
    assert check.match is False
    assert check.to_json()["prompt_tokens"]["difference"] == 4.0
    assert check.spec_decode is not None


def test_no_counters_means_unknown_not_a_match() -> None:
    check = sm.compare(None, None, 10, 10, note="GET /metrics answered HTTP 404")
    assert check.match is None
    assert check.to_json()["note"] == "GET /metrics answered HTTP 404"
    no_spec = sm.compare(sm.parse(BEFORE, "m"), sm.parse(BEFORE, "m"), 0, 0)
    assert no_spec.spec_decode is None and no_spec.match is True
