"""``streaming``: the streamed greedy answer equals the non-streamed one; usage counts agree."""

from __future__ import annotations

import time
from typing import Any

from openai.types.chat import ChatCompletion

from forklift.check.session import RequestFailed, Session, StreamedChat, message_reasoning
from forklift.results import CheckResult

PROMPT = "Name three colors."
MAX_TOKENS = 48


def compare(plain: ChatCompletion, streamed: StreamedChat) -> list[str]:
    """Differences between a non-streamed and a streamed answer to the same greedy request (pure)."""
    if not plain.choices:
        return ["non-streamed response has no choices"]
    choice = plain.choices[0]
    out = []
    content = choice.message.content or ""
    if streamed.content != content:
        out.append(f"content differs: streamed {streamed.content[:120]!r} vs {content[:120]!r}")
    reasoning = message_reasoning(plain)
    if streamed.reasoning != reasoning:
        out.append(f"reasoning differs: streamed {streamed.reasoning[:80]!r} vs {reasoning[:80]!r}")
    if len(streamed.finish_reasons) != 1:
        out.append(f"{len(streamed.finish_reasons)} chunks carried a finish_reason, expected exactly 1")
    elif streamed.finish_reasons[0] != choice.finish_reason:
        out.append(f"finish_reason differs: streamed {streamed.finish_reasons[0]!r} vs {choice.finish_reason!r}")
    if streamed.usage is None:
        out.append("no usage chunk although stream_options.include_usage was set")
    elif plain.usage is not None:
        for key in ("prompt_tokens", "completion_tokens"):
            a, b = streamed.usage.get(key), getattr(plain.usage, key)
            if a != b:
                out.append(f"usage {key} differs: streamed {a} vs {b}")
    if not content and not reasoning:
        out.append("both answers are empty")
    return out


def check_streaming(s: Session) -> CheckResult:
    t0 = time.monotonic()
    body: dict[str, Any] = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
                            "temperature": 0}
    try:
        plain, ev_plain = s.chat("non-streamed", **body)
        streamed, ev_stream = s.chat_stream("streamed", **body)
    except RequestFailed as exc:
        return CheckResult("streaming", "fail", f"request failed: {exc.response}", evidence=[exc.evidence],
                           seconds=time.monotonic() - t0)
    problems = compare(plain, streamed)
    evidence = [ev_plain, ev_stream]
    seconds = time.monotonic() - t0
    if problems:
        return CheckResult("streaming", "fail", "; ".join(problems), evidence=evidence, seconds=seconds,
                           fix="Streamed and plain greedy answers should be identical; look for a parser or "
                               "detokenizer problem in `forklift logs`.")
    u = streamed.usage or {}
    return CheckResult("streaming", "ok",
                       f"streamed == non-streamed over {streamed.chunks} chunks; usage agrees "
                       f"({u.get('prompt_tokens')} prompt, {u.get('completion_tokens')} completion tokens)",
                       evidence=evidence, seconds=seconds)
