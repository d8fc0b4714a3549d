"""The golden transcript: saved by a run's first healthy check, compared by every later one (exact on the same
build, a stated tolerance across builds), naming the prompts that drifted."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from forklift import check
from forklift.check import golden, parity
from forklift.check.context import Options
from forklift.endpoint import Target
from forklift.results import CheckResult
from tests.fake_openai import FakeOpenAI, Reply, last_user

ANSWERS = {
    "What is 2+2?": "The answer to this classic math problem is 4.",
    "Name three colors.": "Red, blue, and green.",
    "What is the capital of France?": "The capital of France is Paris. " + " ".join(f"fact{i}" for i in range(30)),
}
SETTINGS = {"serve.enforce_eager": True, "parallel.pp": 1, "vllm_version": "0.32.0"}


def answers(changed: dict[str, str] | None = None) -> Callable[[dict[str, Any]], Reply]:
    table = {**ANSWERS, **(changed or {})}

    def answer(body: dict[str, Any]) -> Reply:
        return Reply(table.get(last_user(body), "Hello."))
    return answer


def _golden(responder: Callable[[dict[str, Any]], Reply], settings: dict[str, Any] | None = None,
            only: tuple[str, ...] = ("golden",), **opts: Any) -> CheckResult:
    with FakeOpenAI(responder) as fake:
        target = Target(fake.url, run_name="demo", settings=settings or SETTINGS)
        report = check.run(target, "quick", Options(only=only, **opts))
    result = report.get("golden")
    assert result is not None
    return result


def test_the_first_healthy_check_saves_and_the_next_compares() -> None:
    first = _golden(answers())
    path = golden.path_for("demo")
    assert first.status == "ok" and f"saved 3 greedy answers as the run's golden transcript ({path})" in first.summary
    saved = parity.Transcript.load(path)
    assert [a.prompt for a in saved.answers] == list(golden.PROMPTS)
    assert saved.answers[0].tokens == ["The ", "answer ", "to ", "this ", "classic ", "math ", "problem ", "is ", "4."]
    assert saved.settings == SETTINGS
    again = _golden(answers())
    assert again.status == "ok"
    assert again.summary == ("3/3 greedy answers identical to the golden transcript (same vLLM build and settings: "
                             "exact)")
    assert json.loads(path.read_text())["created_at"] == saved.created_at  # not rewritten


def test_a_drifted_prompt_is_named_and_fails_on_the_same_build() -> None:
    _golden(answers())
    drifted = _golden(answers({"What is the capital of France?": "L'Étoile, la Marseillaise"}))
    assert drifted.status == "fail"
    assert "2/3 greedy answers identical" in drifted.summary
    assert "drifted: 'What is the capital of France?' at token 0 (\"L'Étoile, \" here vs 'The ')" in drifted.summary
    row = next(r for r in drifted.details["prompts"] if not r["identical"])
    assert row["golden_answer"] == ANSWERS["What is the capital of France?"] and drifted.fix is not None


def test_across_builds_a_late_drift_is_within_the_tolerance() -> None:
    _golden(answers())
    late = "The capital of France is Paris. " + " ".join(f"fact{i}" for i in range(24)) + " then something else"
    newer = {**SETTINGS, "vllm_version": "0.33.0"}
    result = _golden(answers({"What is the capital of France?": late}), newer)
    assert result.status == "ok", result.summary  # ok, not warn: canary counts ok -> warn as a regression
    assert "across builds: tolerance 16 tokens; settings that differ (here vs golden): vllm_version '0.33.0' vs " \
           "'0.32.0'" in result.summary
    assert "'What is the capital of France?' at token 30 ('then ' here vs 'fact24 ', within the tolerance)" in \
        result.summary
    assert "2/3 greedy answers identical" in result.summary
    early = _golden(answers({"Name three colors.": "Purple."}), newer)
    assert early.status == "fail" and "'Name three colors.' at token 0" in early.summary
    same_build_late = _golden(answers({"What is the capital of France?": late}))
    assert same_build_late.status == "fail"  # exact on the same build


def test_an_unhealthy_check_saves_nothing() -> None:
    wrong = answers({"What is 2+2?": "Five.", "Name three colors.": "Dogs.", "What is the capital of France?": "No."})
    result = _golden(wrong, only=("completion", "golden"))
    assert result.status == "skip" and "saved to" in result.summary and "when every check passes" in result.summary
    assert not golden.path_for("demo").exists()


def test_canary_compares_with_the_baselines_golden_and_saves_none() -> None:
    _golden(answers())
    base = golden.path_for("demo")
    with FakeOpenAI(answers({"Name three colors.": "Purple."})) as fake:
        target = Target(fake.url, run_name="demo-canary", settings=SETTINGS)
        report = check.run(target, "quick", Options(only=("golden",), golden=base, save_golden=False))
    result = report.get("golden")
    assert result is not None and result.status == "fail" and "'Name three colors.'" in result.summary
    assert result.details["golden"]["path"] == str(base)
    assert not golden.path_for("demo-canary").exists()


def test_new_golden_replaces_it_and_a_url_target_keeps_none() -> None:
    _golden(answers())
    fresh = _golden(answers({"Name three colors.": "Purple."}), new_golden=True)
    assert fresh.status == "ok" and "saved 3 greedy answers" in fresh.summary
    assert parity.Transcript.load(golden.path_for("demo")).answers[1].text == "Purple."
    with FakeOpenAI(answers()) as fake:
        report = check.run(Target(fake.url), "quick", Options(only=("golden",)))
    result = report.get("golden")
    assert result is not None and result.status == "skip" and "--url target" in result.summary


def test_an_unreadable_golden_fails_with_the_fix() -> None:
    path = golden.path_for("demo")
    path.parent.mkdir(parents=True)
    path.write_text("{")
    result = _golden(answers())
    assert result.status == "fail" and "the golden transcript of run 'demo' is unreadable" in result.summary
    assert result.fix is not None and str(path) in result.fix


def test_drift_and_same_build_are_pure() -> None:
    ref = parity.Transcript([parity.Answer("p", "a b", ["a", " b"], "stop")], settings=SETTINGS)
    assert golden.drift([parity.Answer("p", "a b", ["a", " b"], "stop")], ref, exact=True)[0] == "ok"
    assert golden.same_build(SETTINGS, dict(SETTINGS))
    assert not golden.same_build(SETTINGS, {**SETTINGS, "serve.enforce_eager": False})
    assert not golden.same_build(None, SETTINGS)
