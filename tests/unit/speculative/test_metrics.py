"""Acceptance figures from vLLM's spec-decode counters."""

from __future__ import annotations

import pytest

from forklift.speculative import metrics

BEFORE = """\
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 7.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 38.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="other",position="1"} 60.0
"""


def test_vllm_24344_counters_give_the_figures_that_pr_printed() -> None:
    # vllm#24344 (ngram K=5 on code edits): G 5376, D 993, T 4960, A 3562 -> "mean acceptance length: 4.59",
    # "seq normalized acceptance length: 2.96", 821 steps without a draft (1814 steps, 993 drafted).
    s = metrics.summarize(993, 4960, 3562, [], 5376)
    assert s["acceptance_length"] == pytest.approx(4.59, abs=0.005)
    assert s["tokens_per_step"] == pytest.approx(2.96, abs=0.005)
    assert s["draft_coverage"] == pytest.approx(993 / 1814)
    assert s["acceptance_rate"] == pytest.approx(3562 / 4960)


def test_vllm_log_line_identity_mean_length_is_one_plus_the_per_position_sum() -> None:
    # vllm-project/vllm-ascend#13664's SpecDecoding line: per-position 0.739, 0.478, ... and "Mean acceptance
    # length: 2.91"; with A = sum(A_i) the two must agree.
    per_pos = [0.739, 0.478, 0.261, 0.174, 0.130, 0.087, 0.043]
    drafts = 1000.0
    s = metrics.summarize(drafts, 7 * drafts, sum(p * drafts for p in per_pos), [p * drafts for p in per_pos], None)
    assert s["acceptance_length"] == pytest.approx(2.91, abs=0.005)
    assert s["per_position_acceptance_rate"] == pytest.approx(per_pos)
    assert s["tokens_per_step"] is None and s["draft_coverage"] is None  # no generation counter


def test_parse_sums_engines_and_filters_by_model() -> None:
    c = metrics.parse(BEFORE, "m")
    assert c.present and c.drafts == 7 and c.accepted == 38 and c.generation == 100
    assert dict(c.per_pos) == {0: 7.0, 1: 6.0}


def test_a_server_without_speculation_has_no_counters() -> None:
    c = metrics.parse("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{model_name=\"m\"} 5\n")
    assert not c.present


def test_delta_over_a_window() -> None:
    after = BEFORE.replace(" 100.0", " 130.0").replace("drafts_total{engine=\"0\",model_name=\"m\"} 7.0",
                                                       "drafts_total{engine=\"0\",model_name=\"m\"} 17.0")
    after = after.replace("accepted_tokens_total{engine=\"0\",model_name=\"m\"} 38.0",
                          "accepted_tokens_total{engine=\"0\",model_name=\"m\"} 53.0")
    s = metrics.delta(metrics.parse(BEFORE, "m"), metrics.parse(after, "m"))
    assert s["num_drafts"] == 10 and s["num_accepted_tokens"] == 15
    assert s["acceptance_length"] == pytest.approx(2.5)
    assert s["tokens_per_step"] == pytest.approx(30 / 15)


def test_acceptance_of_exactly_zero_or_one_over_many_drafts_is_suspect() -> None:
    none = metrics.summarize(400, 1600, 0, [0, 0, 0, 0], 800)
    assert none["acceptance_length"] == 1.0 and none["acceptance_rate"] == 0.0
    assert "vllm-project/vllm#53030" in none["suspect"] and "rejects every draft" in none["suspect"]
    every = metrics.summarize(400, 1600, 1600, [400, 400, 400, 400], 2000)
    assert "every draft token was accepted over 400 drafts" in every["suspect"]
    assert metrics.summarize(400, 1600, 900, [300, 250, 200, 150], 1700)["suspect"] is None  # a real drafter
    assert metrics.summarize(20, 80, 0, [0, 0, 0, 0], 60)["suspect"] is None  # too few drafts to tell
    assert metrics.suspect(metrics.SUSPECT_MIN_DRAFTS, 4.0 * metrics.SUSPECT_MIN_DRAFTS, 0) is not None
