"""What to send: prompts exact in the model's tokens, or a JSONL prompt file.

The tokenizer is ``forklift.endpoint``'s: the model's own when its files are here, else the server's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from forklift.endpoint import Tokenizer
from forklift.errors import BenchError

# Ordinary English, tokenized once: prompts are random sequences of its tokens, so no special or
# byte-fallback tokens end up in them.
_SEED_TEXT = (
    "The warehouse opened before dawn, and the first trucks backed into the loading bays while the night "
    "crew counted pallets. Every crate carried a label with its weight, its destination and the name of "
    "the person who packed it. A forklift driver learns the floor the way a sailor learns a harbour: where "
    "the concrete dips, which aisle is too narrow for a wide load, and when the afternoon sun blinds the "
    "north doors. Orders arrive in waves; some days bring machine parts, other days books, fruit, paint, "
    "glass, cables, furniture or medicine. The scheduler balances them against the number of drivers, the "
    "battery charge of each truck and the time the ships leave the quay. Numbers matter here: 14 docks, "
    "38 aisles, 2,500 pallet places, 7 shifts a week. When the system works, nobody notices it at all."
)


@dataclass(frozen=True)
class Prompt:
    """One request's input. ``prompt_tokens`` is the client's own count (None without a tokenizer)."""

    text: str
    output_len: int
    prompt_tokens: int | None
    source: str = ""


def exact_prompt(tok: Tokenizer, n: int, rng: random.Random, pool: Sequence[int]) -> str:
    """A text that the tokenizer encodes to exactly ``n`` tokens (without special tokens).

    Random tokens of ordinary text, decoded, re-encoded and trimmed or topped up until the round trip
    is stable (tokens can merge across boundaries when decoded and re-encoded).
    """
    if n < 1:
        raise BenchError(f"input length {n} is below 1", fix="Pass --input-len 1 or more.")
    ids = [rng.choice(pool) for _ in range(n)]
    for _ in range(20):
        text = tok.decode(ids)
        again = tok.encode(text, special=False)
        if len(again) == n:
            return text
        ids = again[:n] if len(again) > n else again + [rng.choice(pool) for _ in range(n - len(again))]
    raise BenchError(f"could not build a prompt of exactly {n} tokens with {getattr(tok, 'source', tok)}",
                     fix="Use --prompts FILE.jsonl instead.")


def fixed_length_prompts(tok: Tokenizer, count: int, input_len: int, output_len: int, seed: int = 0) -> list[Prompt]:
    """``count`` distinct prompts of exactly ``input_len`` tokens each (as the server will count them)."""
    rng = random.Random(seed)
    pool = tok.encode(_SEED_TEXT, special=False)
    special_extra = len(tok.encode("a", special=True)) - len(tok.encode("a", special=False))
    body_len = input_len - special_extra
    if body_len < 1:
        raise BenchError(f"input length {input_len} leaves no room after {special_extra} special token(s)",
                         fix=f"Pass --input-len {special_extra + 1} or more.")
    out = []
    for _ in range(count):
        text = exact_prompt(tok, body_len, rng, pool)
        out.append(Prompt(text=text, output_len=output_len, prompt_tokens=input_len, source="random"))
    return out


def load_prompt_file(path: Path, default_output_len: int, tok: Tokenizer | None) -> list[Prompt]:
    """Read a JSONL file of ``{"prompt": str, "output_len": int?}`` objects; errors name the line.

    ``max_tokens`` is accepted as a synonym of ``output_len``. Blank lines are skipped.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BenchError(f"{path}: cannot read the prompt file: {exc.strerror or exc}",
                         fix="Pass an existing JSONL file to --prompts.") from exc
    except UnicodeDecodeError as exc:
        raise BenchError(f"{path}: not UTF-8 text ({exc.reason})", fix="Save the prompt file as UTF-8 JSONL.") from exc
    fix = 'Each line must be a JSON object like {"prompt": "...", "output_len": 128}.'
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise BenchError(f"{where}: not valid JSON ({exc})", fix=fix) from exc
        if not isinstance(obj, dict):
            raise BenchError(f"{where}: expected a JSON object, got {type(obj).__name__}", fix=fix)
        text = obj.get("prompt")
        if not isinstance(text, str) or not text:
            raise BenchError(f"{where}: missing a non-empty string 'prompt'", fix=fix)
        out_len = obj.get("output_len", obj.get("max_tokens", default_output_len))
        if not isinstance(out_len, int) or isinstance(out_len, bool) or out_len < 1:
            raise BenchError(f"{where}: 'output_len' must be a positive integer, got {out_len!r}", fix=fix)
        count = len(tok.encode(text, special=True)) if tok is not None else None
        prompts.append(Prompt(text=text, output_len=out_len, prompt_tokens=count, source=where))
    if not prompts:
        raise BenchError(f"{path}: no prompts in the file", fix=fix)
    return prompts


def check_lengths(prompts: Sequence[Prompt], max_model_len: int | None) -> None:
    """Refuse prompts whose input plus output does not fit the server's context window."""
    if max_model_len is None:
        return
    for p in prompts:
        if p.prompt_tokens is None:
            if p.output_len >= max_model_len:
                raise BenchError(
                    f"output length {p.output_len} does not fit max_model_len {max_model_len}",
                    fix=f"Pass --output-len below {max_model_len}.")
            continue
        total = p.prompt_tokens + p.output_len
        if total > max_model_len:
            where = f"{p.source}: " if p.source and p.source != "random" else ""
            raise BenchError(
                f"{where}input {p.prompt_tokens} + output {p.output_len} = {total} tokens exceeds the server's "
                f"max_model_len {max_model_len}",
                fix=f"Lower --output-len or --input-len so that input + output <= {max_model_len}.")
