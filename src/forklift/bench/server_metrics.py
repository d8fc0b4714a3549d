"""The server's side of the story: vLLM's Prometheus counters, scraped before and after a run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from forklift.endpoint import Endpoint
from forklift.speculative import metrics as spec_metrics

PROMPT = "vllm:prompt_tokens"
GENERATION = "vllm:generation_tokens"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_COUNTERS = (PROMPT, GENERATION, SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED)


@dataclass(frozen=True)
class Snapshot:
    """Counter totals (summed over engines and label sets) and per-position spec-decode acceptances."""

    counters: Mapping[str, float]
    accepted_per_pos: Mapping[int, float] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        return self.counters.get(name)


def parse(text: str, model: str | None = None) -> Snapshot:
    """Sum the counters forklift cross-checks; when ``model`` is given, only samples labelled with it.

    prometheus_client's parser names a counter family without ``_total`` and its samples with it.
    """
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # Match on the sample name: a family without a TYPE line is named after its samples.
            name = sample.name.removesuffix("_total")
            if name == sample.name or (name not in _COUNTERS and name != SPEC_ACCEPTED_PER_POS):
                continue  # _created timestamps and everything forklift does not cross-check
            labels = sample.labels
            if model is not None and "model_name" in labels and labels["model_name"] != model:
                continue
            if name == SPEC_ACCEPTED_PER_POS:
                pos = int(labels.get("position", "-1"))
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
            else:
                totals[name] = totals.get(name, 0.0) + sample.value
    return Snapshot(counters=totals, accepted_per_pos=per_pos)


def scrape(endpoint: Endpoint, model: str | None = None) -> tuple[Snapshot | None, str | None]:
    """GET ``/metrics``; returns (snapshot, None) or (None, why it is unavailable). Never raises."""
    text, why = endpoint.metrics()
    if text is None:
        return None, why
    try:
        snap = parse(text, model)
    except ValueError as exc:
        return None, f"/metrics is not Prometheus text: {exc}"
    if PROMPT not in snap.counters and GENERATION not in snap.counters:
        return None, "/metrics has no vllm:prompt_tokens or vllm:generation_tokens counters"
    return snap, None


@dataclass(frozen=True)
class CounterCheck:
    """Client totals against the server's counter deltas over the same window."""

    client_prompt_tokens: int
    client_generation_tokens: int
    server_prompt_tokens: float | None
    server_generation_tokens: float | None
    note: str | None = None
    spec_decode: dict[str, Any] | None = None

    @property
    def match(self) -> bool | None:
        """True when both counters equal the client's counts; None when the server gave no counters."""
        if self.server_prompt_tokens is None or self.server_generation_tokens is None:
            return None
        return (self.server_prompt_tokens == self.client_prompt_tokens
                and self.server_generation_tokens == self.client_generation_tokens)

    def to_json(self) -> dict[str, Any]:
        def diff(server: float | None, client: int) -> float | None:
            return None if server is None else server - client

        return {
            "match": self.match,
            "prompt_tokens": {"client": self.client_prompt_tokens, "server": self.server_prompt_tokens,
                              "difference": diff(self.server_prompt_tokens, self.client_prompt_tokens)},
            "generation_tokens": {"client": self.client_generation_tokens, "server": self.server_generation_tokens,
                                  "difference": diff(self.server_generation_tokens, self.client_generation_tokens)},
            "note": self.note,
            "spec_decode": self.spec_decode,
        }


def _delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    a, b = after.get(name), before.get(name)
    if a is None:
        return None
    return a - (b or 0.0)


def spec_decode_stats(before: Snapshot, after: Snapshot) -> dict[str, Any] | None:
    """Acceptance over the window, as ``vllm bench serve`` reports it, plus tokens per step and draft coverage
    (``forklift.speculative.metrics``); None without spec-decode counters."""
    drafts = _delta(before, after, SPEC_DRAFTS)
    draft_tokens = _delta(before, after, SPEC_DRAFT_TOKENS)
    accepted = _delta(before, after, SPEC_ACCEPTED)
    if drafts is None or draft_tokens is None or accepted is None:
        return None
    per_pos = [after.accepted_per_pos[pos] - before.accepted_per_pos.get(pos, 0.0)
               for pos in sorted(after.accepted_per_pos)]
    return spec_metrics.summarize(drafts, draft_tokens, accepted, per_pos, _delta(before, after, GENERATION))


def compare(before: Snapshot | None, after: Snapshot | None, client_prompt: int, client_generation: int,
            note: str | None = None) -> CounterCheck:
    if before is None or after is None:
        return CounterCheck(client_prompt, client_generation, None, None, note=note or "no server counters")
    return CounterCheck(
        client_prompt_tokens=client_prompt,
        client_generation_tokens=client_generation,
        server_prompt_tokens=_delta(before, after, PROMPT),
        server_generation_tokens=_delta(before, after, GENERATION),
        note=note,
        spec_decode=spec_decode_stats(before, after),
    )
