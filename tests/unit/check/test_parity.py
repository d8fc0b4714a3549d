"""Parity: first divergent token, settings that differ, transcripts on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.check import parity
from forklift.errors import CheckError

PROMPT = "What is the capital of France?"
COMPILED = parity.Answer(PROMPT, "The capital of France is Paris.",
                         ["The", " capital", " of", " France", " is", " Paris", "."], "stop")
EAGER = parity.Answer(PROMPT, "L'Étoile, la Marseillaise", ["L", "'", "É", "to", "ile"], "length")


def test_first_divergent_token() -> None:
    div = parity.first_divergence(EAGER, COMPILED)
    assert div == parity.Divergence(0, "L", "The", "", "token")
    longer = parity.Answer(PROMPT, COMPILED.text + " Yes.", [*(COMPILED.tokens or []), " Yes", "."], "stop")
    div = parity.first_divergence(longer, COMPILED)
    assert div is not None and (div.index, div.ours, div.theirs) == (7, " Yes", "<end>")
    assert parity.first_divergence(COMPILED, COMPILED) is None


def test_character_fallback_without_tokens() -> None:
    a = parity.Answer(PROMPT, "abcX", None, "stop")
    b = parity.Answer(PROMPT, "abcY", ["abcY"], "stop")
    div = parity.first_divergence(a, b)
    assert div is not None and (div.unit, div.index, div.common) == ("character", 3, "abc")


def test_compare_names_the_prompt_and_token() -> None:
    ref = parity.Transcript([COMPILED])
    status, summary, details = parity.compare([EAGER], ref)
    assert status == "fail"
    assert "'What is the capital of France?' diverges at token 0: 'L' here vs 'The' in the reference" in summary
    assert details["prompts"][0]["first_divergence"]["index"] == 0
    assert parity.compare([COMPILED], ref)[0] == "ok"


def test_late_divergence_is_a_warning() -> None:
    toks = [f"t{i}" for i in range(40)]
    ours = parity.Answer("p", "".join(toks), toks, "length")
    theirs = parity.Answer("p", "", [*toks[:35], "x"], "length")
    assert parity.compare([ours], parity.Transcript([theirs]))[0] == "warn"


def test_settings_diff() -> None:
    ours = {"serve.enforce_eager": True, "parallel.pp": 1, "vllm_version": "0.32.0+cpu"}
    theirs = {"serve.enforce_eager": False, "parallel.pp": 2, "vllm_version": "0.32.0+cpu"}
    assert parity.settings_diff(ours, theirs) == {"parallel.pp": [1, 2], "serve.enforce_eager": [True, False]}
    assert parity.settings_diff(ours, None) == {}


def test_transcript_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ref.json"
    parity.Transcript([COMPILED], {"model": "smollm2"}, {"parallel.pp": 1}).save(path)
    back = parity.Transcript.load(path)
    assert back.answers == [COMPILED]
    assert back.settings == {"parallel.pp": 1}


def test_not_a_transcript(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(CheckError, match="not a forklift transcript"):
        parity.Transcript.load(path)
    path.write_text("<html>")
    with pytest.raises(CheckError, match="not a readable transcript"):
        parity.Transcript.load(path)
