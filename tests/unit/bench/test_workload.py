"""Workloads: exact-length prompts, prompt files (bad lines named), length and config validation."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from forklift.bench import BenchConfig
from forklift.bench.loadgen import _check_fixed_lengths
from forklift.bench.workload import Prompt, check_lengths, exact_prompt, fixed_length_prompts, load_prompt_file
from forklift.endpoint.tokens import Messages
from forklift.errors import BenchError


class CharTokenizer:
    """One token per character, with a BOS id 0 when special tokens are asked for; 'ab' merges into one."""

    source = "one token per character"

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        ids: list[int] = [0] if special else []
        i = 0
        while i < len(text):
            if text.startswith("ab", i):
                ids.append(1000)
                i += 2
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join("ab" if t == 1000 else chr(t) for t in ids if t != 0)

    def count_chat(self, messages: Messages) -> int:
        raise AssertionError("the prompt builders count plain prompts, not chats")


def test_exact_prompt_survives_merging_tokens() -> None:
    tok = CharTokenizer()
    pool = [ord("a"), ord("b"), ord("c")]
    for seed in range(20):
        text = exact_prompt(tok, 17, random.Random(seed), pool)
        assert len(tok.encode(text, special=False)) == 17


def test_fixed_length_prompts_count_the_special_tokens() -> None:
    prompts = fixed_length_prompts(CharTokenizer(), 5, input_len=12, output_len=3, seed=1)
    assert len(prompts) == 5
    for p in prompts:
        assert len(CharTokenizer().encode(p.text, special=True)) == 12 == p.prompt_tokens
        assert p.output_len == 3
    assert len({p.text for p in prompts}) == 5


def test_prompt_file_and_its_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "p.jsonl"
    good.write_text('{"prompt": "hi there"}\n\n{"prompt": "x", "output_len": 5}\n')
    prompts = load_prompt_file(good, 7, CharTokenizer())
    assert [(p.output_len, p.prompt_tokens) for p in prompts] == [(7, 9), (5, 2)]
    assert prompts[1].source.endswith("p.jsonl:3")

    cases = {
        '{"prompt": "ok"}\n{"prompt": "broken"\n': ":2: not valid JSON",
        '{"prompt": "ok"}\n{"prompt": "ok"}\n["a"]\n': ":3: expected a JSON object",
        '{"text": "no prompt key"}\n': ":1: missing a non-empty string 'prompt'",
        '{"prompt": "x", "output_len": 0}\n': ":1: 'output_len' must be a positive integer",
    }
    for content, expected in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(content)
        with pytest.raises(BenchError) as info:
            load_prompt_file(bad, 7, None)
        assert expected in info.value.message
        assert "bad.jsonl" in info.value.message


def test_missing_and_empty_prompt_files(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="cannot read"):
        load_prompt_file(tmp_path / "nope.jsonl", 7, None)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(BenchError, match="no prompts"):
        load_prompt_file(empty, 7, None)


def test_lengths_beyond_max_model_len_are_refused() -> None:
    with pytest.raises(BenchError, match="exceeds the server's max_model_len 4096"):
        _check_fixed_lengths(BenchConfig(input_len=128, output_len=5000), 4096)
    _check_fixed_lengths(BenchConfig(input_len=96, output_len=4000), 4096)  # exactly fits
    with pytest.raises(BenchError, match="p.jsonl:4"):
        check_lengths([Prompt("x", 100, 4000, source="p.jsonl:4")], 4096)


@pytest.mark.parametrize("kwargs, message", [
    ({"concurrency": (0,)}, "concurrency 0"),
    ({"concurrency": (1, -2)}, "concurrency -2"),
    ({"concurrency": ()}, "no concurrency"),
    ({"concurrency": (None,)}, "needs a request rate"),
    ({"requests": 0}, "--requests 0"),
    ({"requests": None}, "neither a request count nor a duration"),
    ({"rate": 0.0}, "--rate"),
    ({"output_len": 0}, "--output-len 0"),
])
def test_config_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        BenchConfig(**kwargs).validate()
