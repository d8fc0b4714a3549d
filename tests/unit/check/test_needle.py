"""Needle prompts are exact in the model's tokens; recall is scored exactly (fake tokenizer, no server)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from forklift.check import needle
from forklift.endpoint.tokens import Messages
from forklift.errors import CheckError

TEMPLATE_OVERHEAD = 7


class WordTokenizer:
    """GPT-2-style pieces (a word with its leading space, punctuation, runs of whitespace) are tokens; a chat adds
    a fixed template overhead."""

    source = "fake"

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.inverse: dict[int, str] = {}

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        out = []
        for piece in re.findall(r" ?\w+| ?[^\w\s]|\s+", text):
            if piece not in self.vocab:
                self.vocab[piece] = len(self.vocab)
                self.inverse[self.vocab[piece]] = piece
            out.append(self.vocab[piece])
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.inverse[i] for i in ids)

    def count_chat(self, messages: Messages) -> int:
        return TEMPLATE_OVERHEAD + sum(len(self.encode(m["content"])) for m in messages)


@pytest.mark.parametrize("length", [128, 300, 1000])
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_prompt_is_exactly_the_asked_length(length: int, depth: float) -> None:
    tok = WordTokenizer()
    ids = needle.filler_ids(tok, length + 64)
    msgs, count = needle.build(tok, ids, length, depth, "48213")
    assert count == length == tok.count_chat(msgs)
    content = msgs[0]["content"]
    assert content.count("The secret code is 48213.") == 1
    assert content.endswith(needle.QUESTION)


def test_needle_sits_near_its_depth() -> None:
    tok = WordTokenizer()
    ids = needle.filler_ids(tok, 2000)
    shallow, _ = needle.build(tok, ids, 1000, 0.1, "11111")
    deep, _ = needle.build(tok, ids, 1000, 0.9, "22222")
    pos_shallow = shallow[0]["content"].index("11111") / len(shallow[0]["content"])
    pos_deep = deep[0]["content"].index("22222") / len(deep[0]["content"])
    assert pos_shallow < 0.2 < 0.8 < pos_deep


def test_recall_is_exact() -> None:
    assert needle.recalled("The secret code is 48213.", "48213")
    assert needle.recalled('The code is: "48213"', "48213")
    assert not needle.recalled("The secret code is 482130.", "48213")
    assert not needle.recalled('The secret code is "The Secret Code of the Golden Chalice"', "48213")


def test_lengths_above_the_context_are_refused_with_the_limit() -> None:
    with pytest.raises(CheckError) as err:
        needle.validate([1024, 5000], [0.5], 4096)
    assert "needle length 5000 does not fit: max_model_len is 4096" in err.value.message
    assert err.value.fix is not None and "4072" in err.value.fix
    with pytest.raises(CheckError):
        needle.validate([4073], [0.5], 4096)
    needle.validate([4072], [0.5], 4096)


def test_bad_depths_and_tiny_lengths_are_refused() -> None:
    with pytest.raises(CheckError, match="outside 0..1"):
        needle.validate([1024], [1.5], 4096)
    with pytest.raises(CheckError, match="too short"):
        needle.validate([10], [0.5], 4096)


def test_default_lengths_reach_the_context() -> None:
    assert needle.default_lengths(4096) == [1018, 4072]


def test_grid_verdict() -> None:
    cells = [needle.Cell(256, 0.1, 256, 256, "1", "1", True, 1.0),
             needle.Cell(256, 0.9, 256, 256, "2", "nope", False, 1.0)]
    result = needle.score(cells, [256], [0.1, 0.9], "fake", [], 2.0)
    assert result.status == "fail"
    assert result.details["grid"] == [[True, False]]
    assert result.summary.startswith("1/2 recalled; missed: 256 tok at depth 0.9")
    ok = needle.score(cells[:1], [256], [0.1], "fake", [], 1.0)
    assert ok.status == "ok"


def test_unreachable_length_gives_the_closest_below() -> None:
    class Pairs(WordTokenizer):
        def count_chat(self, messages: Messages) -> int:  # every count is even
            n = super().count_chat(messages)
            return n + n % 2

    tok = Pairs()
    msgs, count = needle.build(tok, needle.filler_ids(tok, 400), 301, 0.5, "48213")
    assert count == 300 == tok.count_chat(msgs)
