"""``reasoning``: for reasoning models, a small max_tokens is recognised as "raise max_tokens" (finish_reason
length, empty content, reasoning present) rather than "broken"; an adequate budget yields content; reasoning
text does not leak into content."""

from __future__ import annotations

import time
from dataclasses import dataclass

from openai.types.chat import ChatCompletion

from forklift.check.session import RequestFailed, Session, message_reasoning, reasoning_field
from forklift.results import CheckResult, Evidence, Status, worst

PROMPT = "What is 17 * 23? Answer with the number only."
SMALL_BUDGET = 16
PROBE_BUDGET = 128
ADEQUATE_BUDGET = 4096
THINK_MARKERS = ("<think>", "</think>", "<|think|>", "◁think▷")


@dataclass(frozen=True)
class Answer:
    content: str
    reasoning: str
    finish_reason: str | None
    field: str | None

    @classmethod
    def of(cls, resp: ChatCompletion) -> Answer:
        if not resp.choices:
            return cls("", "", None, None)
        msg = resp.choices[0].message
        return cls(msg.content or "", message_reasoning(resp), resp.choices[0].finish_reason, reasoning_field(msg))


def leaks(a: Answer) -> list[str]:
    return [m for m in THINK_MARKERS if m in a.content]


def score_small(a: Answer) -> tuple[Status, str]:
    """(status, what it means) for the answer under a too-small budget (pure)."""
    if leaks(a):
        return "fail", f"reasoning markers {leaks(a)} leaked into content"
    if a.finish_reason == "length" and not a.content.strip() and a.reasoning:
        return "ok", (f"{SMALL_BUDGET}-token budget: finish_reason length, content empty, reasoning present: "
                        "too small a max_tokens, recognised (raise max_tokens), not broken")
    if a.finish_reason == "length" and not a.reasoning and not a.content.strip():
        return "fail", f"{SMALL_BUDGET}-token budget: finish_reason length with neither reasoning nor content"
    return "ok", f"{SMALL_BUDGET}-token budget: finish_reason {a.finish_reason}, content {a.content[:40]!r}"


def score_adequate(a: Answer) -> tuple[Status, str]:
    """(status, what it means) for the answer under an adequate budget (pure)."""
    if leaks(a):
        return "fail", f"reasoning markers {leaks(a)} leaked into content: {a.content[:80]!r}"
    if not a.content.strip():
        if a.finish_reason == "length":
            return "warn", (f"still reasoning after {ADEQUATE_BUDGET} tokens (finish_reason length, no content): "
                            "raise max_tokens")
        return "fail", f"empty content with finish_reason {a.finish_reason!r}"
    if not a.reasoning:
        return "warn", "content but no reasoning field: is the reasoning parser configured?"
    if a.reasoning.strip() and a.reasoning.strip() in a.content:
        return "fail", "the reasoning text is repeated inside content"
    return "ok", f"{ADEQUATE_BUDGET}-token budget: reasoning in '{a.field}', content {a.content[:40]!r}"


def check_reasoning(s: Session) -> CheckResult:
    t0 = time.monotonic()
    msgs = [{"role": "user", "content": PROMPT}]
    evidence: list[Evidence] = []
    try:
        if not s.target.reasoning_parser:
            # No parser known: a short probe tells a reasoning model from a plain one without a long generation.
            probe, ev = s.chat(f"max_tokens {PROBE_BUDGET}", messages=msgs, max_tokens=PROBE_BUDGET, temperature=0)
            evidence.append(ev)
            first = Answer.of(probe)
            if not first.reasoning:
                if leaks(first):
                    return CheckResult("reasoning", "warn", f"no reasoning parser, and reasoning markers "
                                       f"{leaks(first)} appear in content", evidence=evidence,
                                       seconds=time.monotonic() - t0,
                                       fix="Serve with the model's reasoning parser (serve.reasoning_parser).")
                return CheckResult("reasoning", "skip", "no reasoning parser configured and the model returned no "
                                   "reasoning", evidence=evidence, seconds=time.monotonic() - t0)
        big, ev = s.chat(f"max_tokens {ADEQUATE_BUDGET}", messages=msgs, max_tokens=ADEQUATE_BUDGET, temperature=0)
        evidence.append(ev)
        small_resp, ev = s.chat(f"max_tokens {SMALL_BUDGET}", messages=msgs, max_tokens=SMALL_BUDGET, temperature=0)
        evidence.append(ev)
    except RequestFailed as exc:
        evidence.append(exc.evidence)
        return CheckResult("reasoning", "fail", f"request failed: {exc.response}", evidence=evidence,
                           seconds=time.monotonic() - t0)
    adequate = Answer.of(big)
    results = [score_adequate(adequate), score_small(Answer.of(small_resp))]
    status = worst([r[0] for r in results])
    fix = None
    if status != "ok":
        fix = ("Reasoning models need a generous max_tokens (512+); check serve.reasoning_parser matches the model "
               "so reasoning goes to the reasoning field, not content.")
    return CheckResult("reasoning", status, "; ".join(r[1] for r in results), evidence=evidence, fix=fix,
                       seconds=time.monotonic() - t0, details={"field": adequate.field})
