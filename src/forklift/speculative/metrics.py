"""vLLM's speculative-decoding counters and what forklift reports from them.

Counters (the same names in every release read, 0.10.2 to 0.33: ``v1/spec_decode/metrics.py:SpecDecodingProm``):
drafts (verification steps that carried a draft), draft tokens, accepted tokens, and accepted tokens per position.
Over a window with deltas D, T, A, A_i and G generated tokens:

* mean acceptance length AL = 1 + A / D (vLLM's figure: counts only steps that had a draft)
* draft acceptance rate = A / T; per-position acceptance p_i = A_i / D
* tokens per step = G / (G - A) (every step yields one token that was not a draft: the real speed-up ceiling)
* draft coverage = D / (G - A) (the share of steps with a draft; below 1 for ngram and suffix)

An acceptance rate of exactly 0 or 1 over many drafts is not a drafter's quality but a fault (``suspect``): no
draft accepted (mean acceptance length exactly 1.00) is the known CUDA-graph bug, vllm-project/vllm#53030
(PIECEWISE CUDA graphs with speculative decoding reject every draft silently); every draft accepted means the
drafter is the target model itself or the accepted counter is broken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION = "vllm:generation_tokens"
_NAMES = (DRAFTS, DRAFT_TOKENS, ACCEPTED, GENERATION)
SUSPECT_MIN_DRAFTS = 100
"""Drafts below which an acceptance of exactly 0 or 1 may be chance (a short or highly repetitive run)."""
NONE_ACCEPTED = ("no draft token was accepted over {drafts:.0f} drafts (mean acceptance length exactly 1.00): "
                 "the known CUDA-graph bug that rejects every draft silently (vllm-project/vllm#53030, PIECEWISE "
                 "CUDA graphs with speculative decoding); try serve.enforce_eager: true or another vLLM build")
ALL_ACCEPTED = ("every draft token was accepted over {drafts:.0f} drafts (acceptance exactly 1.00): the drafter "
                "is the target model itself, or vLLM's accepted counter is broken; the speed-up is not real")


@dataclass(frozen=True)
class Counters:
    """Totals summed over engines; ``present`` is False when the server exports no spec-decode counters."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    generation: float | None = None
    per_pos: Mapping[int, float] = field(default_factory=dict)
    present: bool = False


def parse(text: str, model: str | None = None) -> Counters:
    """The spec-decode counters of a ``/metrics`` page (only ``model``'s samples when given)."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name == sample.name or (name not in _NAMES and name != ACCEPTED_PER_POS):
                continue
            if model is not None and sample.labels.get("model_name", model) != model:
                continue
            if name == ACCEPTED_PER_POS:
                pos = int(sample.labels.get("position", "-1"))
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
            else:
                totals[name] = totals.get(name, 0.0) + sample.value
    return Counters(drafts=totals.get(DRAFTS, 0.0), draft_tokens=totals.get(DRAFT_TOKENS, 0.0),
                    accepted=totals.get(ACCEPTED, 0.0), generation=totals.get(GENERATION), per_pos=per_pos,
                    present=DRAFTS in totals)


def suspect(drafts: float, draft_tokens: float, accepted: float, *,
            min_drafts: float = SUSPECT_MIN_DRAFTS) -> str | None:
    """Why an acceptance of exactly 0 or 1 over at least ``min_drafts`` drafts is not to be trusted; None when it
    is neither (or there were too few drafts to tell)."""
    if drafts < min_drafts or draft_tokens <= 0:
        return None
    if accepted == 0:
        return NONE_ACCEPTED.format(drafts=drafts)
    if accepted >= draft_tokens:
        return ALL_ACCEPTED.format(drafts=drafts)
    return None


def summarize(drafts: float, draft_tokens: float, accepted: float, per_pos: Sequence[float],
              generation: float | None) -> dict[str, Any]:
    """The figures over one window of counter deltas (None where a denominator is zero or unknown), and
    ``suspect``: why the acceptance is not to be trusted, or None."""
    steps = generation - accepted if generation is not None else None
    return {
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "per_position_acceptance_rate": [v / drafts if drafts else None for v in per_pos],
        "tokens_per_step": generation / steps if steps and generation is not None and steps > 0 else None,
        "draft_coverage": drafts / steps if steps and steps > 0 else None,
        "suspect": suspect(drafts, draft_tokens, accepted),
    }


def delta(before: Counters, after: Counters) -> dict[str, Any]:
    """``summarize`` over ``after - before``."""
    positions = sorted(after.per_pos)
    gen = None if after.generation is None else after.generation - (before.generation or 0.0)
    return summarize(after.drafts - before.drafts, after.draft_tokens - before.draft_tokens,
                     after.accepted - before.accepted,
                     [after.per_pos[p] - before.per_pos.get(p, 0.0) for p in positions], gen)
