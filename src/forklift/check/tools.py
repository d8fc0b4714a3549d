"""``tools``: named and ``required`` tool choice give schema-valid arguments; streamed deltas assemble to the
same call; ``tool_choice: auto`` is reported as a model capability, not a verdict.

A model the recipe marks as not tool-capable (``model.capabilities.tools: false``) still gets every request: a
request the server refuses fails the check as before, but calls that are not schema-valid are a warning that
names the recipe's field, not a failure."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import jsonschema
from openai.types.chat import ChatCompletion

from forklift.check.session import RequestFailed, Session
from forklift.results import CheckResult, Evidence

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name, for example Paris"}},
    "required": ["city"],
}
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city", "parameters": WEATHER_SCHEMA}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
MAX_TOKENS = 64
NAMED = {"type": "function", "function": {"name": "get_weather"}}
NOT_CAPABLE = "the recipe marks this model as not tool-capable (model.capabilities.tools: false)"


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str


def calls_of(resp: ChatCompletion) -> list[Call]:
    if not resp.choices:
        return []
    out = []
    for tc in resp.choices[0].message.tool_calls or []:
        fn = getattr(tc, "function", None)
        if fn is not None:
            out.append(Call(fn.name, fn.arguments))
    return out


def argument_problems(call: Call, name: str, schema: dict[str, Any]) -> list[str]:
    """Why a tool call is not a valid call of ``name`` under ``schema`` (pure)."""
    problems = []
    if call.name != name:
        problems.append(f"called {call.name!r}, expected {name!r}")
    try:
        args = json.loads(call.arguments)
    except json.JSONDecodeError as exc:
        return [*problems, f"arguments {call.arguments!r} are not JSON ({exc.msg})"]
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(args), key=lambda e: list(e.path))
    if errors:
        problems.append(f"arguments {call.arguments!r} do not validate against the tool's schema: "
                        + "; ".join(e.message for e in errors[:3]))
    return problems


def same_call(a: Call, b: Call) -> bool:
    if a.name != b.name:
        return False
    try:
        return bool(json.loads(a.arguments) == json.loads(b.arguments))
    except json.JSONDecodeError:
        return a.arguments == b.arguments


def _one_call(label: str, calls: list[Call]) -> tuple[Call | None, list[str]]:
    if not calls:
        return None, [f"{label}: no tool call in the response"]
    if len(calls) > 1:
        return calls[0], [f"{label}: {len(calls)} tool calls, expected 1"]
    return calls[0], []


def check_tools(s: Session) -> CheckResult:
    t0 = time.monotonic()
    evidence: list[Evidence] = []
    problems: list[str] = []
    refused: list[str] = []
    notes: list[str] = []
    base: dict[str, Any] = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": MAX_TOKENS, "temperature": 0}
    named_call: Call | None = None
    for label, choice in (("named", NAMED), ("required", "required")):
        try:
            resp, ev = s.chat(f"tool_choice {label}", tool_choice=choice, **base)
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            refused.append(f"{label}: request failed: {exc.response}")
            continue
        evidence.append(ev)
        call, found = _one_call(label, calls_of(resp))
        problems += found
        if call is not None:
            problems += [f"{label}: {p}" for p in argument_problems(call, "get_weather", WEATHER_SCHEMA)]
            if label == "named":
                named_call = call
    try:
        streamed, ev = s.chat_stream("tool_choice named, streamed", tool_choice=NAMED, **base)
        evidence.append(ev)
        scalls = [Call(c["name"], c["arguments"]) for _, c in sorted(streamed.tool_calls.items())]
        scall, found = _one_call("streamed", scalls)
        problems += found
        if scall is not None and named_call is not None and not same_call(scall, named_call):
            problems.append(f"streamed deltas assemble to {scall.name}({scall.arguments}), "
                            f"non-streamed gave {named_call.name}({named_call.arguments})")
    except RequestFailed as exc:
        evidence.append(exc.evidence)
        refused.append(f"streamed: request failed: {exc.response}")
    if s.target.enable_auto_tool_choice is False:
        notes.append("auto: not enabled on this deployment (serve.enable_auto_tool_choice)")
    else:
        try:
            resp, ev = s.chat("tool_choice auto", tool_choice="auto", **base)
            evidence.append(ev)
            calls = calls_of(resp)
            notes.append(f"auto: the model called {calls[0].name}" if calls
                         else "auto: the model answered in text without calling the tool (a model capability)")
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            notes.append(f"auto: refused ({exc.response[:80]})")
    seconds = time.monotonic() - t0
    capable = s.target.capabilities is None or s.target.capabilities.tools
    details = {"auto": notes[-1] if notes else None, "tool_call_parser": s.target.tool_call_parser,
               "tool_capable": capable}
    if refused or (problems and capable):
        return CheckResult("tools", "fail", "; ".join(refused + problems + notes), evidence=evidence,
                           seconds=seconds, details=details,
                           fix="The arguments must be a JSON object matching the tool's parameters schema. Check "
                               "that --tool-call-parser and the chat template suit this model; a small model may "
                               "simply not follow tool schemas (then say so in the recipe: "
                               "model.capabilities.tools: false).")
    if problems:
        return CheckResult("tools", "warn", f"{NOT_CAPABLE}; the server answered every tool request, the model's "
                           "calls are not valid: " + "; ".join(problems + notes), evidence=evidence,
                           seconds=seconds, details=details,
                           fix="Serve a tool-capable model for tool calls; the recipe already says this one is not.")
    summary = ("named and required tool choice give schema-valid arguments; streamed call matches; "
               + "; ".join(notes))
    if not capable:
        summary += f" (although {NOT_CAPABLE})"
    return CheckResult("tools", "ok", summary, evidence=evidence, seconds=seconds, details=details)
