"""``needle``: a random code planted at chosen depths of prompts of chosen lengths, exact in the model's
tokens (chat template included); scored by exact recall, as a depth x length grid."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from forklift.check.session import RequestFailed, Session
from forklift.endpoint.tokens import Messages, Tokenizer, tokenizer_for
from forklift.errors import CheckError
from forklift.results import CheckResult, Evidence

ANSWER_TOKENS = 24
MIN_LENGTH = 128
DEFAULT_DEPTHS: tuple[float, ...] = (0.1, 0.5, 0.9)
QUESTION = "What is the secret code mentioned in the text above? Answer with the code only."
FILLER_SENTENCES = (
    "The old harbour town wakes slowly, and the first boats leave before the bakeries open.",
    "Gardeners say that tomatoes grow best when the soil is warm and the watering is regular.",
    "A good map shows the rivers first, then the roads, and only then the names of the villages.",
    "The library keeps its atlases on the top shelf, where the afternoon light does not reach them.",
    "Most bridges in the valley were rebuilt in stone after the great flood of the last century.",
    "On quiet evenings the market square fills with people walking dogs and children on bicycles.",
    "Bread dough needs time to rest, and a cool kitchen makes the slow rise more even.",
    "The mountain path climbs through pine forest before it opens onto a wide and windy ridge.",
    "Every spring the school repaints the fence by the playground a slightly different shade of green.",
    "Trains to the coast run every hour, and the journey takes a little longer on Sundays.",
    "The museum's clock collection includes a brass timepiece that still chimes on the quarter hour.",
    "Fishermen mend their nets on the pier while gulls wait patiently for anything left behind.",
    "In the orchard the apple trees are pruned in winter, when the branches are bare and easy to read.",
    "The town council meets on the first Tuesday of the month in the hall above the post office.",
    "Rain in the hills reaches the river a day later, so the ferry timetable changes with the weather.",
)


@dataclass(frozen=True)
class Cell:
    """One needle request: where the code sat, what came back, whether it was recalled."""

    length: int
    depth: float
    prompt_tokens: int
    server_prompt_tokens: int | None
    code: str
    answer: str
    recalled: bool
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"length": self.length, "depth": self.depth, "prompt_tokens": self.prompt_tokens,
                "server_prompt_tokens": self.server_prompt_tokens, "exact": self.prompt_tokens == self.length,
                "code": self.code, "answer": self.answer, "recalled": self.recalled,
                "seconds": round(self.seconds, 3)}


def recalled(answer: str, code: str) -> bool:
    """Exact recall: the code appears as a whole number in the answer (pure)."""
    return re.search(rf"(?<!\d){re.escape(code)}(?!\d)", answer) is not None


def usable_length(max_model_len: int) -> int:
    return max_model_len - ANSWER_TOKENS


def default_lengths(max_model_len: int) -> list[int]:
    """A quarter of the context and (almost) all of it."""
    full = usable_length(max_model_len)
    return sorted({max(MIN_LENGTH, full // 4), full})


def validate(lengths: Sequence[int], depths: Sequence[float], max_model_len: int | None) -> None:
    """Raise :class:`CheckError` for a grid that cannot run (before any request is made)."""
    for d in depths:
        if not 0.0 <= d <= 1.0:
            raise CheckError(f"needle depth {d} is outside 0..1",
                             fix="Pass depths as fractions: --needle-depths 0.1,0.5,0.9")
    for n in lengths:
        if n < MIN_LENGTH:
            raise CheckError(f"needle length {n} is too short (minimum {MIN_LENGTH} tokens)",
                             fix=f"Pass lengths of at least {MIN_LENGTH}: --needle-lengths 1024,4000")
        if max_model_len is not None and n > usable_length(max_model_len):
            raise CheckError(
                f"needle length {n} does not fit: max_model_len is {max_model_len}, and {ANSWER_TOKENS} tokens are "
                f"kept for the answer (longest possible: {usable_length(max_model_len)})",
                fix=f"Pass --needle-lengths up to {usable_length(max_model_len)}, or serve a longer max_model_len.")


def filler_ids(tok: Tokenizer, at_least: int) -> list[int]:
    text = " ".join(FILLER_SENTENCES)
    ids = tok.encode(text)
    per_round = max(1, len(ids))
    rounds = at_least // per_round + 2
    return tok.encode(" ".join([text] * rounds))


def _messages(haystack_before: str, needle: str, haystack_after: str) -> Messages:
    return [{"role": "user", "content": f"{haystack_before}{needle}{haystack_after}\n\n{QUESTION}"}]


def _split_at_sentence(text: str, depth: float) -> int:
    """A character offset near ``depth`` of ``text`` that starts a sentence."""
    target = int(len(text) * depth)
    if target <= 0:
        return 0
    if target >= len(text):
        return len(text)
    cut = text.rfind(". ", 0, target)
    return cut + 2 if cut >= 0 else 0


def _attempt(tok: Tokenizer, ids: Sequence[int], n: int, depth: float, needle: str) -> tuple[Messages, int]:
    text = tok.decode(ids[:n]).rstrip()
    cut = _split_at_sentence(text, depth)
    before, after = text[:cut], text[cut:]
    msgs = _messages(before, needle if not before or before.endswith(" ") else " " + needle, after)
    return msgs, tok.count_chat(msgs)


def build(tok: Tokenizer, ids: Sequence[int], length: int, depth: float, code: str,
          tries: int = 8, window: int = 12) -> tuple[Messages, int]:
    """A chat prompt of exactly ``length`` tokens (template included) with the code at ``depth``.

    Steps the filler size towards the target (token merges at the seams can make a step overshoot), then scans
    nearby sizes. Returns the messages and their real token count: ``length``, unless no filler size gives it,
    in which case the closest count below it."""
    needle = f"The secret code is {code}. "
    best: tuple[Messages, int, int] | None = None
    n = length - tok.count_chat(_messages("", needle, ""))
    tried: set[int] = set()
    for _ in range(tries):
        n = max(0, min(n, len(ids)))
        if n in tried:
            break
        tried.add(n)
        msgs, count = _attempt(tok, ids, n, depth, needle)
        if count == length:
            return msgs, count
        if count < length and (best is None or count > best[1]):
            best = (msgs, count, n)
        n += length - count
    centre = best[2] if best is not None else n
    for m in sorted(range(max(0, centre - window), min(len(ids), centre + window) + 1), key=lambda x: abs(x - centre)):
        if m in tried:
            continue
        msgs, count = _attempt(tok, ids, m, depth, needle)
        if count == length:
            return msgs, count
        if count < length and (best is None or count > best[1]):
            best = (msgs, count, m)
    if best is None:
        raise CheckError(f"could not build a needle prompt of {length} tokens",
                         fix="Pass a longer --needle-lengths value.")
    return best[0], best[1]


def check_needle(s: Session, lengths: Sequence[int] | None = None, depths: Sequence[float] = DEFAULT_DEPTHS,
                 rng: random.Random | None = None) -> CheckResult:
    t0 = time.monotonic()
    max_len = s.target.max_model_len or s.discovery.max_model_len
    if lengths is None:
        if max_len is None:
            return CheckResult("needle", "skip", "max_model_len unknown, so no default lengths",
                               fix="Pass --needle-lengths.", seconds=time.monotonic() - t0)
        lengths = default_lengths(max_len)
    validate(lengths, depths, max_len)
    tok = tokenizer_for(s.endpoint, s.target, s.model)
    if tok is None:
        return CheckResult("needle", "skip", "cannot count the model's tokens exactly: no /tokenize on the server "
                           "and the model's tokenizer is not on this machine",
                           fix="Check a run record whose weights are on this machine, or a vLLM server.",
                           seconds=time.monotonic() - t0)
    rng = rng or random.Random()
    ids = filler_ids(tok, max(lengths) + 64)
    cells: list[Cell] = []
    evidence: list[Evidence] = []
    for length in lengths:
        for depth in depths:
            code = str(rng.randint(10000, 99999))
            msgs, count = build(tok, ids, length, depth, code)
            c0 = time.monotonic()
            label = f"{length} tokens, depth {depth}"
            try:
                resp, ev = s.chat(label, messages=msgs, max_tokens=ANSWER_TOKENS, temperature=0)
            except RequestFailed as exc:
                evidence.append(exc.evidence)
                cells.append(Cell(length, depth, count, None, code, exc.response, False,
                                  time.monotonic() - c0))
                continue
            answer = (resp.choices[0].message.content or "") if resp.choices else ""
            server_count = resp.usage.prompt_tokens if resp.usage else None
            ev.note = f"code {code}; {'recalled' if recalled(answer, code) else 'missed'}"
            evidence.append(ev)
            cells.append(Cell(length, depth, count, server_count, code, answer, recalled(answer, code),
                              time.monotonic() - c0))
    return score(cells, list(lengths), list(depths), tok.source, evidence, time.monotonic() - t0)


def score(cells: list[Cell], lengths: list[int], depths: list[float], token_source: str,
          evidence: list[Evidence], seconds: float) -> CheckResult:
    """The verdict over a grid: pass only when every cell was recalled (pure)."""
    hits = sum(c.recalled for c in cells)
    grid = [[next((c.recalled for c in cells if c.length == n and c.depth == d), False) for d in depths]
            for n in lengths]
    inexact = [c for c in cells if c.prompt_tokens != c.length
               or (c.server_prompt_tokens is not None and c.server_prompt_tokens != c.length)]
    details = {"lengths": lengths, "depths": depths, "grid": grid, "cells": [c.to_json() for c in cells],
               "tokens_counted_by": token_source}
    summary = f"{hits}/{len(cells)} recalled"
    missed = [c for c in cells if not c.recalled]
    if missed:
        summary += "; missed: " + ", ".join(f"{c.length} tok at depth {c.depth} (answered {c.answer[:40]!r})"
                                            for c in missed[:4])
        if len(missed) > 4:
            summary += f" and {len(missed) - 4} more"
    if inexact:
        summary += f"; {len(inexact)} prompt(s) not exactly the asked length"
    if missed:
        return CheckResult("needle", "fail", summary, evidence=evidence, seconds=seconds, details=details,
                           fix="Recall fails at these lengths and depths: check rope scaling / max_model_len, the KV "
                               "cache dtype, and compare with a reference deployment (--reference).")
    return CheckResult("needle", "ok", summary + f" (lengths {lengths}, depths {depths})", evidence=evidence,
                       seconds=seconds, details=details)
