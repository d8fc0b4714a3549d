"""The integrity probes against a real local HTTP server: they pass on sound answers and fail, with their
evidence, on a corrupted endpoint that injects U+FFFD or invalid UTF-8, loops, or answers at random."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from forklift.check import integrity
from forklift.check.integrity import check_integrity
from forklift.check.session import open_session
from forklift.endpoint import Target
from forklift.recipe.schema import Capabilities
from forklift.results import CheckResult
from tests.fake_openai import FakeOpenAI, Reply, last_user

_VOCAB = [f"{a}{b}" for a in ("sal", "mor", "ven", "tor", "lis", "qua", "bre", "nim") for b in
          ("a", "o", "en", "is", "ur", "ax", "el", "im", "on", "et")]
_RNG = random.Random(3)
STORY = " ".join(_RNG.choice(_VOCAB) for _ in range(300))
SCRIPT_TEXT = {
    "Latin": "La mer est calme ce matin; les vagues caressent la plage où les enfants jouent à l'été.",
    "CJK": "大海是蓝色的，海浪轻轻地拍打着沙滩，渔民在清晨出海捕鱼。",
    "Hangul": "바다는 넓고 푸릅니다. 파도가 모래사장에 부드럽게 밀려옵니다.",
    "Cyrillic": "Море сегодня спокойное, волны тихо набегают на песчаный берег.",
}
EXACT = {e.prompt: f"The answer is {e.answer}." for e in integrity.EXACT}


def healthy(body: dict[str, Any]) -> Reply:
    """Sound answers to every probe."""
    prompt = last_user(body)
    for script, p, _ in integrity.SCRIPTS:
        if prompt == p:
            return Reply(SCRIPT_TEXT[script], "length")
    if prompt == integrity.REPETITION_PROMPT:
        return Reply(STORY, "length")
    if prompt == integrity.DETERMINISM_PROMPT:
        return Reply("A bicycle turns the push of your legs into motion through pedals, a chain and gears.")
    if prompt in EXACT:
        return Reply(EXACT[prompt])
    if prompt == integrity.JSON_PROMPT:
        return Reply('{"answer": 7}')
    if "Convert 100 US dollars" in prompt:
        return Reply("", tool_calls=[("convert_currency",
                                      '{"amount": 100, "from_currency": "USD", "to_currency": "EUR"}')])
    if "Book a table" in prompt:
        return Reply("", tool_calls=[("book_table", '{"restaurant": "Chez Marie", "party_size": 4, "time": "19:30"}')])
    if "weather in Oslo" in prompt:
        return Reply("It is 17 degrees and sunny in Oslo.")
    return Reply("Hello.")


def fffd(body: dict[str, Any]) -> Reply:
    """A broken detokenizer: U+FFFD in the middle of non-Latin answers."""
    reply = healthy(body)
    if reply.content in (SCRIPT_TEXT["CJK"], SCRIPT_TEXT["Hangul"]):
        reply.content = reply.content[:5] + "\ufffd\ufffd" + reply.content[5:]
    return reply


def invalid_bytes(body: dict[str, Any]) -> Reply:
    """A proxy that cuts multi-byte characters: invalid UTF-8 on the wire."""
    reply = healthy(body)
    if reply.content == SCRIPT_TEXT["Cyrillic"]:
        reply.raw = "Море ".encode() + b"\xd0\xd0\xbe\xe4\xb8" + " волны".encode()
    return reply


def loops(body: dict[str, Any]) -> Reply:
    reply = healthy(body)
    if last_user(body) == integrity.REPETITION_PROMPT:
        reply.content = "The keeper found a bottle. " + "and the sea and the sea " * 60
    return reply


def random_answers(rng: random.Random) -> Callable[[dict[str, Any]], Reply]:
    def answer(body: dict[str, Any]) -> Reply:
        if body.get("tools") and body.get("tool_choice") != "auto":
            return Reply("", tool_calls=[(rng.choice(["get_weather", "book_table"]), '{"x": 1}')])
        return Reply(" ".join(rng.choice(_VOCAB) for _ in range(24)), "length")
    return answer


def _run(responder: Callable[[dict[str, Any]], Reply], depth: integrity.Depth = "full",
         capabilities: Capabilities | None = None) -> CheckResult:
    with FakeOpenAI(responder) as fake:
        s = open_session(Target(fake.url, capabilities=capabilities))
        try:
            return check_integrity(s, depth)
        finally:
            s.close()


def _probes(result: CheckResult) -> dict[str, dict[str, Any]]:
    return {p["probe"]: p for p in result.details["probes"]}


def test_every_probe_passes_on_sound_answers() -> None:
    result = _run(healthy)
    probes = _probes(result)
    assert result.status == "ok", result.summary
    assert set(probes) == set(integrity.PROBES) and all(p["status"] == "ok" for p in probes.values())
    assert all(p["threshold"] for p in probes.values())
    assert set(probes["utf8"]["measured"]["scripts"]) == {"Latin", "CJK", "Hangul", "Cyrillic"}
    assert probes["repetition"]["measured"]["ratio"] < integrity.REPETITION_MAX
    assert probes["exact"]["measured"]["right"] == len(integrity.EXACT) + 1
    assert probes["tool_scenarios"]["measured"] == {"right": 3, "of": 3}
    labels = [e.label for e in result.evidence]
    assert "utf8: utf8 CJK" in labels and "determinism: greedy, second call" in labels


def test_quick_part_is_short_and_leaves_out_the_long_probes() -> None:
    with FakeOpenAI(healthy) as fake:
        s = open_session(Target(fake.url))
        try:
            result = check_integrity(s, "quick")
        finally:
            s.close()
        budgets = {r["max_tokens"] for r in fake.requests}
    assert [p["probe"] for p in result.details["probes"]] == list(integrity.QUICK_PROBES)
    assert result.status == "ok" and "quick part" in result.summary
    assert max(budgets) <= 48


def test_injected_u_fffd_fails_utf8_naming_the_scripts_and_counts() -> None:
    result = _run(fffd, "quick")
    utf8 = _probes(result)["utf8"]
    assert result.status == "fail" and utf8["status"] == "fail"
    assert utf8["measured"]["scripts"]["CJK"]["u+fffd"] == 2 and utf8["measured"]["scripts"]["Hangul"]["u+fffd"] == 2
    assert utf8["measured"]["scripts"]["Latin"]["u+fffd"] == 0
    assert "CJK: 0 invalid UTF-8 bytes, 2 U+FFFD, 0 lone surrogates in" in result.summary
    cjk = next(e for e in result.evidence if e.label == "utf8: utf8 CJK")
    assert "\ufffd" in (cjk.response or "") and cjk.note.startswith("0 invalid UTF-8 bytes, 2 U+FFFD")
    assert result.fix is not None


def test_invalid_utf8_on_the_wire_is_counted() -> None:
    result = _run(invalid_bytes, "quick")
    row = _probes(result)["utf8"]["measured"]["scripts"]["Cyrillic"]
    assert result.status == "fail" and row["invalid_utf8_bytes"] == 3


def test_a_looping_generation_fails_repetition_with_the_ratio_and_the_loop() -> None:
    result = _run(loops)
    rep = _probes(result)["repetition"]
    assert result.status == "fail" and rep["status"] == "fail"
    assert rep["measured"]["ratio"] > 0.9
    assert rep["measured"]["most_repeated"] in ("and the sea and", "the sea and the", "sea and the sea")
    assert "the long greedy generation loops" in rep["summary"]
    assert {p: v["status"] for p, v in _probes(result).items() if p != "repetition"} == {
        "utf8": "ok", "determinism": "ok", "exact": "ok", "tool_scenarios": "ok"}


def test_random_answers_fail_determinism_exact_and_tools() -> None:
    result = _run(random_answers(random.Random(1)))
    probes = _probes(result)
    assert result.status == "fail"
    assert probes["determinism"]["status"] == "fail" and probes["determinism"]["measured"]["identical"] is False
    assert probes["exact"]["status"] == "fail" and probes["exact"]["measured"]["right"] == 0
    assert "JSON mode: the answer is not JSON" in probes["exact"]["summary"]
    assert probes["tool_scenarios"]["status"] == "fail"


def test_a_model_marked_too_small_skips_with_the_reason() -> None:
    caps = Capabilities(tools=False, long_generation=False, multilingual=False, exact_answers=False)
    result = _run(loops, capabilities=caps)
    probes = _probes(result)
    assert probes["repetition"]["status"] == "skip"
    assert probes["repetition"]["summary"] == ("skipped: the recipe marks this model as too small to write a long "
                                               "text without looping (model.capabilities.long_generation: false)")
    assert probes["tool_scenarios"]["status"] == "skip" and "model.capabilities.tools: false" in \
        probes["tool_scenarios"]["summary"]
    assert set(probes["utf8"]["measured"]["scripts"]) == {"Latin"}
    assert "model.capabilities.multilingual: false" in probes["utf8"]["summary"]
    assert probes["exact"]["status"] == "ok" and "model.capabilities.exact_answers: false" in \
        probes["exact"]["summary"]
    assert result.status == "ok"
    assert result.summary.startswith("utf8, determinism, exact ok; utf8: Latin only (model.capabilities.multilingual: "
                                     "false); exact: JSON mode parses; answers not judged")


def test_json_mode_must_parse_even_for_a_small_model() -> None:
    def truncated(body: dict[str, Any]) -> Reply:
        return Reply('{"answer": ', "length") if body.get("response_format") else healthy(body)

    result = _run(truncated, "quick", Capabilities(exact_answers=False))
    exact = _probes(result)["exact"]
    assert exact["status"] == "fail" and "JSON mode: the answer is not JSON" in exact["summary"]


def test_text_faults_on_raw_bodies() -> None:
    def body(content: bytes, finish: str = "stop") -> bytes:
        return (b'{"choices": [{"message": {"content": "' + content + b'"}, "finish_reason": "' + finish.encode()
                + b'"}]}')

    faults, text, finish = integrity.text_faults(body(b"ok"))
    assert faults.total == 0 and text == "ok" and finish == "stop"
    cut, _, _ = integrity.text_faults(body("海\ufffd".encode(), "length"))
    assert cut.total == 0 and cut.cut
    mid, _, _ = integrity.text_faults(body("海\ufffd海".encode(), "length"))
    assert mid.replacement == 1 and not mid.cut
    lone, _, _ = integrity.text_faults(body(b"a\\ud800b"))
    assert lone.surrogates == 1
    wire, _, _ = integrity.text_faults(body(b"a\xff\xfeb"))
    assert wire.invalid_bytes == 2
    with pytest.raises(ValueError):
        integrity.text_faults(b"<html>")


def test_repetition_ratio() -> None:
    assert integrity.repetition_ratio("one two three four five six")[0] == 0.0
    ratio, top = integrity.repetition_ratio("a b c d " * 20)
    assert ratio > 0.9 and top is not None
    assert integrity.repetition_ratio("海浪" * 30)[0] > 0.9  # no spaces: characters
    assert json.dumps(integrity.repetition_ratio(""))  == "[0.0, null]"


def test_the_cli_fails_a_corrupted_endpoint_with_the_evidence() -> None:
    from tests.unit.check.test_cli import _run

    with FakeOpenAI(fffd) as fake:
        rc, out, err = _run("check", "--url", fake.url, "--only", "integrity", "--quick", "--json")
    assert rc == 1, err
    [result] = json.loads(out)["checks"]
    assert result["id"] == "integrity" and result["status"] == "fail"
    assert any(e["label"] == "utf8: utf8 CJK" and "2 U+FFFD" in e["note"] for e in result["evidence"])


def test_a_lone_surrogate_is_counted_and_shown_escaped() -> None:
    def lone(body: dict[str, Any]) -> Reply:
        reply = healthy(body)
        if reply.content == SCRIPT_TEXT["Latin"]:
            reply.raw = b"La mer \\ud83c est calme."
        return reply

    result = _run(lone, "quick")
    assert _probes(result)["utf8"]["measured"]["scripts"]["Latin"]["lone_surrogates"] == 1
    latin = next(e for e in result.evidence if e.label == "utf8: utf8 Latin")
    assert "\\\\ud83c" in (latin.response or "")
    json.dumps(result.to_json(), ensure_ascii=False).encode()  # the report can be written as UTF-8
