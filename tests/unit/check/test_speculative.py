"""The speculative check: counters present, acceptance on a repetitive prompt above the threshold."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx

from forklift.check.speculative import check_speculative, judge
from forklift.endpoint import Endpoint

NO_SPEC = "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{model_name=\"m\"} 10.0\n"


def _page(gen: float, drafts: float, draft_tokens: float, accepted: float, per_pos: list[float]) -> str:
    lines = ["# TYPE vllm:generation_tokens counter", f'vllm:generation_tokens_total{{model_name="m"}} {gen}',
             "# TYPE vllm:spec_decode_num_drafts counter",
             f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}',
             "# TYPE vllm:spec_decode_num_draft_tokens counter",
             f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {draft_tokens}',
             "# TYPE vllm:spec_decode_num_accepted_tokens counter",
             f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}',
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{i}"}} {v}'
              for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def _server(pages: list[str]) -> tuple[Endpoint, list[dict[str, object]]]:
    it: Iterator[str] = iter(pages)
    sent: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=next(it))
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"text": "x"}], "usage": {"completion_tokens": 100}})

    return Endpoint("http://server", transport=httpx.MockTransport(handler)), sent


def test_high_acceptance_on_the_copy_prompt_passes() -> None:
    http, sent = _server([_page(0, 0, 0, 0, [0, 0, 0]), _page(100, 30, 90, 70, [28, 24, 18])])
    res = check_speculative(http, "m", configured={"method": "ngram"})
    assert res.status == "ok", res.summary
    assert res.details["acceptance_length"] == 1 + 70 / 30
    assert "per position: 0.93, 0.80, 0.60" in res.summary
    assert sent[0]["temperature"] == 0 and "copied exactly again" in str(sent[0]["prompt"])


def test_low_acceptance_fails_with_a_fix() -> None:
    http, _ = _server([_page(0, 0, 0, 0, [0]), _page(100, 80, 80, 8, [8])])
    res = check_speculative(http, "m", configured={"method": "mtp"})
    assert res.status == "fail" and "below 1.50" in res.summary and res.fix


def test_counters_that_do_not_move_fail() -> None:
    http, _ = _server([_page(5, 1, 3, 1, [1]), _page(105, 1, 3, 1, [1])])
    res = check_speculative(http, "m", configured=None)
    assert res.status == "fail" and "no draft" in res.summary


def test_no_counters_is_a_skip_unless_the_record_says_speculation_is_on() -> None:
    http, _ = _server([NO_SPEC])
    assert check_speculative(http, "m", configured=None).status == "skip"
    http, _ = _server([NO_SPEC])
    res = check_speculative(http, "m", configured={"method": "ngram"})
    assert res.status == "fail" and "configured" in res.summary


def test_judge_threshold_is_inclusive() -> None:
    assert judge({"num_drafts": 10, "acceptance_length": 1.5, "per_position_acceptance_rate": [0.5]})[0] == "ok"
    assert judge({"num_drafts": 10, "acceptance_length": 1.49, "per_position_acceptance_rate": [0.49]})[0] == "fail"
