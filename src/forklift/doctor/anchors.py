"""Literal anchors of regular expressions: lower-case ASCII strings, one of which every match must contain.

Reading a regular expression's parse tree: a literal run (``ActorHandle``) is required as is; a sequence
needs whichever of its required parts is most selective; an alternation needs one of its branches'
anchors; optional parts need nothing. Lines are screened with these (plain substring tests on the
lower-cased line, C speed) before any regular expression runs, which keeps doctor linear and fast.
A pattern without an anchor of at least ``MIN_ANCHOR`` characters cannot be screened;
``tests/unit/doctor/test_scan.py`` makes sure no rule has one.
"""

from __future__ import annotations

import re._constants as sre_c  # type: ignore[import-not-found]  # the parser behind re (Python >= 3.11)
import re._parser as sre_p  # type: ignore[import-not-found]
from collections.abc import Iterable, Sequence
from typing import Any

MIN_ANCHOR = 3
_ZERO_WIDTH = {sre_c.AT}
# Lines a healthy server writes thousands of times (vLLM 0.32's access log, throughput and request lines, from
# tests/data/doctor/excerpts/calib-cpu-single-healthy.log and vLLM's loggers.py / serving formats). An anchor
# found in them would keep every line of a busy log, so a requirement without one is preferred.
PROBE = "\n".join([
    'INFO:     127.0.0.1:40908 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid=17978) INFO 11-30 04:11:45 [loggers.py:335] Engine 000: Avg prompt throughput: 7.9 tokens/s, "
    "Avg generation throughput: 5.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, "
    "Prefix cache hit rate: 0.0%",
    "(APIServer pid=17978) INFO 11-30 04:11:45 [logger.py:41] Received request chatcmpl-1: prompt: 'hi', params: "
    "SamplingParams(n=1, temperature=0.0, max_tokens=16), prompt_token_ids: [1], lora_request: None.",
    "(APIServer pid=17978) INFO 11-30 04:11:45 [async_llm.py:270] Added request chatcmpl-1.",
    "(APIServer pid=17978) INFO 11-30 04:11:46 [async_llm.py:431] Finished request chatcmpl-1.",
]).lower()


def quiet(anchor: str) -> bool:
    """Whether the screen can find this anchor without keeping busy healthy lines: two adjacent three-byte
    grams of it (``screen.py`` looks for such a pair) that no ``PROBE`` line holds."""
    return any(anchor[i:i + 3] not in PROBE and anchor[i + 1:i + 4] not in PROBE for i in range(len(anchor) - 3))


def _common(candidate: frozenset[str]) -> bool:
    return not all(quiet(a) for a in candidate)


def _best(candidates: list[frozenset[str]]) -> frozenset[str] | None:
    """The most selective requirement: one no busy healthy line holds, then the longest shortest anchor."""
    usable = [c for c in candidates if c and min(len(a) for a in c) >= MIN_ANCHOR]
    if not usable:
        return None
    return max(usable, key=lambda c: (not _common(c), min(len(a) for a in c), -len(c)))


def _sequence(items: Sequence[tuple[Any, Any]]) -> frozenset[str] | None:
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) >= MIN_ANCHOR:
            candidates.append(frozenset(["".join(run).lower()]))
        run.clear()

    for op, av in items:
        # ASCII, or a caseless character (CJK): bytes.lower and str.lower agree on both, so the screen finds it
        if op is sre_c.LITERAL and (av < 128 or chr(av).lower() == chr(av).upper()):
            run.append(chr(av))
        elif op in _ZERO_WIDTH:
            continue
        elif op is sre_c.SUBPATTERN:
            flush()
            sub = _sequence(av[-1])
            if sub:
                candidates.append(sub)
        elif op is sre_c.BRANCH:
            flush()
            branches = [_sequence(b) for b in av[1]]
            if all(b is not None for b in branches):
                candidates.append(frozenset().union(*[b for b in branches if b is not None]))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            flush()
            low, _high, sub_items = av
            if low >= 1:
                sub = _sequence(sub_items)
                if sub:
                    candidates.append(sub)
        else:
            flush()
    flush()
    return _best(candidates)


def anchors(pattern: str) -> frozenset[str] | None:
    """Lower-case strings one of which every match of ``pattern`` contains, or None when there are none."""
    return _sequence(list(sre_p.parse(pattern)))


def cover(anchor_sets: Iterable[frozenset[str]], triggers: Sequence[str]) -> list[str]:
    """``triggers`` plus every anchor none of them is a substring of: a set that every match contains one of."""
    out = list(dict.fromkeys(t.lower() for t in triggers))
    for group in anchor_sets:
        for a in sorted(group):
            if not any(t in a for t in out):
                out.append(a)
    return out
