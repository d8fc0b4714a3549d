"""``completion``: short known-answer chat prompts, greedy: non-empty, finish_reason stop, expected content."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from openai.types.chat import ChatCompletion

from forklift.check.session import RequestFailed, Session, message_reasoning
from forklift.results import CheckResult, Evidence


@dataclass(frozen=True)
class KnownAnswer:
    prompt: str
    any_of: tuple[str, ...]
    """The answer is right when it contains one of these (case-insensitive, whole words)."""


PROMPTS: tuple[KnownAnswer, ...] = (
    KnownAnswer("What is 2+2?", ("4", "four")),
    KnownAnswer("Name three colors.", ("red", "blue", "green", "yellow", "black", "white", "orange", "purple")),
    KnownAnswer("What is the capital of France?", ("paris",)),
)
MAX_TOKENS = 64
REASONING_MAX_TOKENS = 2048


def contains_answer(text: str, any_of: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", text, re.IGNORECASE) for a in any_of)


def usage_problems(prompt_tokens: int | None, completion_tokens: int | None, total_tokens: int | None) -> list[str]:
    if prompt_tokens is None or completion_tokens is None:
        return ["no usage in the response"]
    out = []
    if prompt_tokens <= 0 or completion_tokens <= 0:
        out.append(f"usage counts not positive ({prompt_tokens} prompt, {completion_tokens} completion)")
    if total_tokens is not None and total_tokens != prompt_tokens + completion_tokens:
        out.append(f"usage total {total_tokens} != {prompt_tokens} + {completion_tokens}")
    return out


def score(resp: ChatCompletion, known: KnownAnswer) -> tuple[list[str], bool]:
    """(hard problems, expected content present) for one answer (pure)."""
    if not resp.choices:
        return ["no choices in the response"], False
    choice = resp.choices[0]
    content = choice.message.content or ""
    hard = []
    if not content.strip():
        if message_reasoning(resp) and choice.finish_reason == "length":
            hard.append("content empty: the budget ran out while reasoning")
        else:
            hard.append("content empty")
    if choice.finish_reason != "stop":
        hard.append(f"finish_reason {choice.finish_reason!r}, expected 'stop'")
    u = resp.usage
    hard += usage_problems(u.prompt_tokens if u else None, u.completion_tokens if u else None,
                           u.total_tokens if u else None)
    return hard, contains_answer(content, known.any_of)


LENGTH = "finish_reason 'length', expected 'stop'"


@dataclass(frozen=True)
class Answered:
    """One prompt's outcome: its hard problems and whether the expected content was there."""

    prompt: str
    problems: tuple[str, ...]
    right: bool


def judge(answers: list[Answered], request_failures: list[str], evidence: list[Evidence],
          seconds: float) -> CheckResult:
    """The verdict over every prompt (pure). An answer that only ran to max_tokens, while most answers stopped on
    their own, is the model rambling on that prompt (the stop token works), so it counts as a wrong answer, not a
    serving failure; when most answers run to the limit, stopping itself is broken and that is a failure."""
    n = len(PROMPTS)
    ran_long = [a.prompt for a in answers if a.problems == (LENGTH,)]
    rambled = set(ran_long) if 2 * len(ran_long) < n else set()
    hard = list(request_failures) + [f"{a.prompt!r}: {p}" for a in answers if a.prompt not in rambled
                                     for p in a.problems]
    wrong = [a.prompt for a in answers if not a.right or a.prompt in rambled]
    if hard:
        fix = ("Raise max_tokens or check the reasoning parser." if any("reasoning" in h for h in hard)
               else "Look at the evidence; `forklift logs` shows the engine side.")
        return CheckResult("completion", "fail", "; ".join(hard), evidence=evidence, fix=fix, seconds=seconds)
    note = (f" ({', '.join(repr(p) for p in ran_long)} ran to max_tokens while the others stopped: the model "
            "rambled, the stop token works)" if rambled else "")
    if len(wrong) * 2 > n:
        return CheckResult("completion", "fail", f"{n - len(wrong)}/{n} known answers right; wrong: "
                           + ", ".join(repr(w) for w in wrong) + note, evidence=evidence,
                           fix="Check the chat template and the weights (a wrong template gives fluent nonsense).",
                           seconds=seconds)
    if wrong:
        return CheckResult("completion", "warn", f"{n - len(wrong)}/{n} known answers right; wrong: "
                           + ", ".join(repr(w) for w in wrong) + note, evidence=evidence, seconds=seconds)
    return CheckResult("completion", "ok", f"{n}/{n} known answers right, finish_reason stop, usage consistent",
                       evidence=evidence, seconds=seconds)


def check_completion(s: Session) -> CheckResult:
    t0 = time.monotonic()
    budget = REASONING_MAX_TOKENS if s.target.reasoning_parser else MAX_TOKENS
    evidence: list[Evidence] = []
    failures: list[str] = []
    answers: list[Answered] = []
    for known in PROMPTS:
        try:
            resp, ev = s.chat(known.prompt, messages=[{"role": "user", "content": known.prompt}],
                              max_tokens=budget, temperature=0)
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            failures.append(f"{known.prompt!r}: request failed: {exc.response}")
            continue
        evidence.append(ev)
        problems, right = score(resp, known)
        answers.append(Answered(known.prompt, tuple(problems), right))
    return judge(answers, failures, evidence, time.monotonic() - t0)
