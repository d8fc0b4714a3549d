"""``integrity``: does the deployment answer sound text? Reference-free probes, each with a threshold and the
evidence it was judged on:

- ``utf8``: answers in Latin, CJK, Hangul and Cyrillic script, read as raw bytes: invalid UTF-8 on the wire,
  U+FFFD and lone surrogates in the text (threshold: none; one U+FFFD where max_tokens cut a character is not
  counted).
- ``repetition``: one long greedy generation; the share of its word 4-grams that repeat an earlier one.
- ``determinism``: two identical greedy requests give the same text.
- ``exact``: arithmetic, facts and a JSON-mode object with exact answers (the JSON object must parse whatever
  the model; its value must be right when the model is capable).
- ``tool_scenarios``: several tools, typed and enum arguments, a tool result read back (``full`` only).

``quick`` runs a fast part (short answers, no long generation, no tool scenarios); ``full`` runs them all. A
probe the recipe marks the model as too small for (``model.capabilities``) is skipped with that reason.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from forklift.check.session import RequestFailed, Session
from forklift.check.tools import Call, argument_problems, calls_of
from forklift.results import CheckResult, Evidence, Status, excerpt, worst

Depth = Literal["quick", "full"]
ProbeId = Literal["utf8", "repetition", "determinism", "exact", "tool_scenarios"]
PROBES: tuple[ProbeId, ...] = ("utf8", "repetition", "determinism", "exact", "tool_scenarios")
QUICK_PROBES: tuple[ProbeId, ...] = ("utf8", "determinism", "exact")


@dataclass(frozen=True)
class Budget:
    """Tokens per answer, by depth."""

    utf8: int
    repetition: int
    determinism: int


BUDGETS: dict[Depth, Budget] = {"quick": Budget(utf8=48, repetition=0, determinism=32),
                                "full": Budget(utf8=160, repetition=384, determinism=128)}

SCRIPTS: tuple[tuple[str, str, str], ...] = (
    # (script, prompt, a regex of its letters); asked in English, so that every letter of the script is the model's
    ("Latin", "Write two sentences in French about the sea.", r"[A-Za-zÀ-ÿ]"),
    ("CJK", "Write two sentences in Chinese about the sea.", r"[\u4e00-\u9fff]"),
    ("Hangul", "Write two sentences in Korean about the sea.", r"[\uac00-\ud7a3]"),
    ("Cyrillic", "Write two sentences in Russian about the sea.", r"[\u0400-\u04ff]"),
)
REPETITION_PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."
NGRAM = 4
REPETITION_MAX = 0.5
"""Fail when more than this share of the long generation's word 4-grams repeat an earlier one."""
DETERMINISM_PROMPT = "Describe how a bicycle works."


@dataclass(frozen=True)
class Exact:
    prompt: str
    answer: str
    """Right when the answer contains it as a whole word (case-insensitive)."""


EXACT: tuple[Exact, ...] = (
    Exact("What is 12 plus 30? Answer with the number only.", "42"),
    Exact("What is 9 times 7? Answer with the number only.", "63"),
    Exact("What is the capital of Japan? Answer with one word.", "Tokyo"),
    Exact("What is the chemical symbol for gold? Answer with the symbol only.", "Au"),
)
JSON_PROMPT = ('Reply with a JSON object with exactly one key, "answer", whose value is the number of days in a '
               'week.')
JSON_ANSWER = 7
EXACT_MAX_TOKENS = 16
JSON_MAX_TOKENS = 32
EXACT_WRONG_MAX = 1
"""At most this many exact answers may be wrong (one borderline answer is a warning)."""


@dataclass
class Probe:
    """One probe's verdict: what was measured against which threshold, and the requests behind it."""

    id: ProbeId
    status: Status
    summary: str
    measured: Any = None
    threshold: Any = None
    evidence: list[Evidence] = field(default_factory=list)
    limit: str = ""
    """What a passing probe left out because of ``model.capabilities`` (shown in the check's summary)."""

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.id, "status": self.status, "summary": self.summary, "measured": self.measured,
                "threshold": self.threshold, "limit": self.limit or None}


CAPABILITY: dict[ProbeId, tuple[str, str]] = {
    "repetition": ("long_generation", "to write a long text without looping"),
    "tool_scenarios": ("tools", "to call tools"),
}


def _capable(s: Session, name: str) -> bool:
    caps = s.target.capabilities
    return caps is None or bool(getattr(caps, name))


def _skip_reason(name: str, what: str) -> str:
    return f"skipped: the recipe marks this model as too small {what} (model.capabilities.{name}: false)"


# -- pure measures -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextFaults:
    invalid_bytes: int
    """Bytes of the response body that are not UTF-8."""
    replacement: int
    """U+FFFD in the answer, a trailing one cut by max_tokens excepted."""
    surrogates: int
    """Lone UTF-16 surrogates (``\\ud800`` escapes) in the answer."""
    cut: bool
    """A trailing U+FFFD where max_tokens cut a character was left out."""

    @property
    def total(self) -> int:
        return self.invalid_bytes + self.replacement + self.surrogates


def text_faults(raw: bytes) -> tuple[TextFaults, str, str | None]:
    """Count what is broken in a raw chat completion body: (faults, the answer's text, finish_reason) (pure).
    Raises ValueError when the body is not a chat completion."""
    invalid = sum(1 for ch in raw.decode("utf-8", "surrogateescape") if "\udc80" <= ch <= "\udcff")
    data = json.loads(raw.decode("utf-8", "replace"))
    choice = data["choices"][0]
    content = str(choice["message"].get("content") or "")
    finish = choice.get("finish_reason")
    body = content
    cut = finish == "length" and body.endswith("\ufffd")
    if cut:
        body = body.rstrip("\ufffd")
    surrogates = sum(1 for ch in body if "\ud800" <= ch <= "\udfff")
    return TextFaults(invalid, body.count("\ufffd"), surrogates, cut), content, finish


def repetition_ratio(text: str, n: int = NGRAM) -> tuple[float, str | None]:
    """The share of word n-grams that repeat an earlier one, and the most repeated n-gram (pure). Texts without
    spaces (CJK) are read character by character."""
    words = text.split()
    if len(words) < len(text) / 20:
        words = [ch for ch in text if not ch.isspace()]
    grams = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0, None
    counts: dict[str, int] = {}
    for g in grams:
        counts[g] = counts.get(g, 0) + 1
    top = max(counts, key=lambda g: counts[g])
    return (len(grams) - len(counts)) / len(grams), (top if counts[top] > 1 else None)


def first_difference(a: str, b: str) -> int | None:
    """The first character index where two texts differ (None when equal) (pure)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def contains_word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", text, re.IGNORECASE) is not None


def json_answer(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON-mode answer as an object, or why it is not one (pure)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(value, dict):
        return None, f"JSON but not an object ({type(value).__name__})"
    return value, None


# -- probes ----------------------------------------------------------------------------------------------


def probe_utf8(s: Session, budget: Budget) -> Probe:
    scripts = [sc for sc in SCRIPTS if sc[0] == "Latin" or _capable(s, "multilingual")]
    evidence: list[Evidence] = []
    rows: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    chars = 0
    for script, prompt, letters in scripts:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": budget.utf8,
                                "temperature": 0}
        try:
            raw, ev = s.raw_chat(f"utf8 {script}", **body)
            faults, content, finish = text_faults(raw)
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            problems.append(f"{script}: request failed: {exc.response}")
            continue
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            evidence.append(Evidence(f"utf8 {script}", request=body, response=excerpt(raw.decode("utf-8", "replace"))))
            problems.append(f"{script}: not a chat completion ({type(exc).__name__}: {exc})")
            continue
        in_script = len(re.findall(letters, content))
        chars += len(content)
        rows[script] = {"chars": len(content), "script_chars": in_script, "invalid_utf8_bytes": faults.invalid_bytes,
                        "u+fffd": faults.replacement, "lone_surrogates": faults.surrogates,
                        "cut_at_max_tokens": faults.cut, "finish_reason": finish}
        shown = content.encode("utf-8", "backslashreplace").decode()  # a lone surrogate as its escape
        ev.response = excerpt(json.dumps({"content": shown, "finish_reason": finish}, ensure_ascii=False))
        ev.note = (f"{faults.invalid_bytes} invalid UTF-8 bytes, {faults.replacement} U+FFFD, "
                   f"{faults.surrogates} lone surrogates in {len(content)} chars ({in_script} {script})"
                   + ("; a trailing U+FFFD cut by max_tokens not counted" if faults.cut else ""))
        evidence.append(ev)
        if faults.total:
            problems.append(f"{script}: {ev.note}")
    skipped = [] if len(scripts) == len(SCRIPTS) else [
        "CJK, Hangul and Cyrillic skipped: the recipe marks this model as not multilingual "
        "(model.capabilities.multilingual: false)"]
    measured = {"scripts": rows, "chars": chars}
    threshold = "0 invalid UTF-8 bytes, U+FFFD or lone surrogates"
    if problems:
        return Probe("utf8", "fail", "; ".join(problems), measured, threshold, evidence)
    summary = f"{', '.join(rows)}: no invalid UTF-8, U+FFFD or lone surrogate in {chars} chars"
    return Probe("utf8", "ok", "; ".join([summary, *skipped]), measured, threshold, evidence,
                 limit="Latin only (model.capabilities.multilingual: false)" if skipped else "")


def probe_repetition(s: Session, budget: Budget) -> Probe:
    threshold = f"at most {REPETITION_MAX:.0%} of word {NGRAM}-grams repeated"
    body: dict[str, Any] = {"messages": [{"role": "user", "content": REPETITION_PROMPT}],
                            "max_tokens": budget.repetition, "temperature": 0}
    try:
        resp, ev = s.chat("long greedy generation", **body)
    except RequestFailed as exc:
        return Probe("repetition", "fail", f"request failed: {exc.response}", None, threshold, [exc.evidence])
    text = (resp.choices[0].message.content or "") if resp.choices else ""
    ratio, top = repetition_ratio(text)
    tokens = resp.usage.completion_tokens if resp.usage else None
    measured = {"ratio": round(ratio, 3), "most_repeated": top, "completion_tokens": tokens, "chars": len(text)}
    ev.note = f"{ratio:.0%} of word {NGRAM}-grams repeated" + (f"; most repeated: {top!r}" if top else "")
    summary = f"{ratio:.0%} of word {NGRAM}-grams repeated over {tokens} tokens (threshold {REPETITION_MAX:.0%})"
    if ratio > REPETITION_MAX:
        return Probe("repetition", "fail", f"the long greedy generation loops: {summary}; most repeated {top!r}",
                     measured, threshold, [ev])
    return Probe("repetition", "ok", summary, measured, threshold, [ev])


def probe_determinism(s: Session, budget: Budget) -> Probe:
    threshold = "identical text"
    body: dict[str, Any] = {"messages": [{"role": "user", "content": DETERMINISM_PROMPT}],
                            "max_tokens": budget.determinism, "temperature": 0, "seed": 0}
    texts: list[str] = []
    evidence: list[Evidence] = []
    for label in ("greedy, first call", "greedy, second call"):
        try:
            resp, ev = s.chat(label, **body)
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            return Probe("determinism", "fail", f"request failed: {exc.response}", None, threshold, evidence)
        evidence.append(ev)
        texts.append((resp.choices[0].message.content or "") if resp.choices else "")
    at = first_difference(texts[0], texts[1])
    if at is None:
        return Probe("determinism", "ok", f"two identical greedy calls gave the same {len(texts[0])} chars",
                     {"identical": True, "chars": len(texts[0])}, threshold, evidence)
    measured = {"identical": False, "first_difference": at, "first": texts[0][at:at + 40],
                "second": texts[1][at:at + 40]}
    return Probe("determinism", "fail", f"two identical greedy calls differ from char {at}: "
                 f"{texts[0][at:at + 40]!r} vs {texts[1][at:at + 40]!r} after {texts[0][max(0, at - 40):at]!r}",
                 measured, threshold, evidence)


def probe_exact(s: Session) -> Probe:
    capable = _capable(s, "exact_answers")
    threshold = (f"the JSON-mode answer is a JSON object; at most {EXACT_WRONG_MAX} of {len(EXACT) + 1} answers "
                 "wrong" if capable else "the JSON-mode answer is a JSON object")
    evidence: list[Evidence] = []
    wrong: list[str] = []
    hard: list[str] = []
    rows: list[dict[str, Any]] = []
    for known in EXACT:
        try:
            resp, ev = s.chat(known.prompt, messages=[{"role": "user", "content": known.prompt}],
                              max_tokens=EXACT_MAX_TOKENS, temperature=0)
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            hard.append(f"{known.prompt!r}: request failed: {exc.response}")
            continue
        evidence.append(ev)
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        right = contains_word(text, known.answer)
        rows.append({"prompt": known.prompt, "expected": known.answer, "answer": text, "right": right})
        if not right:
            wrong.append(f"{known.prompt!r} answered {text[:60]!r}, expected {known.answer!r}")
    try:
        resp, ev = s.chat("JSON mode", messages=[{"role": "user", "content": JSON_PROMPT}],
                          max_tokens=JSON_MAX_TOKENS, temperature=0, response_format={"type": "json_object"})
        evidence.append(ev)
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        obj, why = json_answer(text)
        right = obj is not None and obj.get("answer") == JSON_ANSWER
        rows.append({"prompt": JSON_PROMPT, "expected": {"answer": JSON_ANSWER}, "answer": text, "right": right})
        if why is not None:
            hard.append(f"JSON mode: the answer is {why}: {text[:80]!r}")
        elif not right:
            wrong.append(f"JSON mode answered {text[:60]!r}, expected {{\"answer\": {JSON_ANSWER}}}")
    except RequestFailed as exc:
        evidence.append(exc.evidence)
        hard.append(f"JSON mode: request failed: {exc.response}")
    n = len(EXACT) + 1
    measured = {"right": sum(1 for r in rows if r["right"]), "of": n, "answers": rows}
    if hard:
        return Probe("exact", "fail", "; ".join(hard + wrong), measured, threshold, evidence)
    if not capable:
        return Probe("exact", "ok", f"the JSON-mode answer is a JSON object; {measured['right']}/{n} exact answers "
                     "right, not judged: the recipe marks this model as too small for exact answers "
                     "(model.capabilities.exact_answers: false)", measured, threshold, evidence,
                     limit="JSON mode parses; answers not judged (model.capabilities.exact_answers: false)")
    summary = f"{measured['right']}/{n} exact answers right"
    if len(wrong) > EXACT_WRONG_MAX:
        return Probe("exact", "fail", f"{summary}; " + "; ".join(wrong), measured, threshold, evidence)
    if wrong:
        return Probe("exact", "warn", f"{summary}; " + "; ".join(wrong), measured, threshold, evidence)
    return Probe("exact", "ok", summary + ", the JSON-mode answer among them", measured, threshold, evidence)


@dataclass(frozen=True)
class Scenario:
    label: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any
    expect: str | None
    """The tool that must be called; None: a text answer that contains ``says``."""
    says: str = ""


def _tool(name: str, description: str, properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(required), "additionalProperties": False}}}


WEATHER = _tool("get_weather", "Get the current weather in a city", {"city": {"type": "string"}}, ["city"])
CURRENCY = _tool("convert_currency", "Convert an amount of money from one currency to another", {
    "amount": {"type": "number"}, "from_currency": {"type": "string", "enum": ["USD", "EUR", "JPY", "GBP"]},
    "to_currency": {"type": "string", "enum": ["USD", "EUR", "JPY", "GBP"]}}, ["amount", "from_currency",
                                                                              "to_currency"])
BOOKING = _tool("book_table", "Book a restaurant table", {
    "restaurant": {"type": "string"}, "party_size": {"type": "integer", "minimum": 1},
    "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}}, ["restaurant", "party_size", "time"])
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("required, three tools: currency", [{"role": "user", "content": "Convert 100 US dollars to euros."}],
             [WEATHER, CURRENCY, BOOKING], "required", "convert_currency"),
    Scenario("named: integer and pattern arguments",
             [{"role": "user", "content": "Book a table for 4 people at 19:30 at Chez Marie."}],
             [WEATHER, BOOKING], {"type": "function", "function": {"name": "book_table"}}, "book_table"),
    Scenario("a tool result read back", [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call-1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call-1", "content": '{"temperature_c": 17, "sky": "sunny"}'}],
        [WEATHER], "auto", None, "17"),
)
SCENARIO_MAX_TOKENS = 96


def probe_tools(s: Session) -> Probe:
    threshold = f"all {len(SCENARIOS)} scenarios right"
    evidence: list[Evidence] = []
    problems: list[str] = []
    for sc in SCENARIOS:
        try:
            resp, ev = s.chat(sc.label, messages=sc.messages, tools=sc.tools, tool_choice=sc.tool_choice,
                              max_tokens=SCENARIO_MAX_TOKENS, temperature=0)
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            problems.append(f"{sc.label}: request failed: {exc.response}")
            continue
        evidence.append(ev)
        calls = calls_of(resp)
        if sc.expect is None:
            text = (resp.choices[0].message.content or "") if resp.choices else ""
            if not contains_word(text, sc.says):
                problems.append(f"{sc.label}: the answer {text[:80]!r} does not use the tool's result {sc.says!r}")
            continue
        schema = next(t["function"]["parameters"] for t in sc.tools if t["function"]["name"] == sc.expect)
        if len(calls) != 1:
            problems.append(f"{sc.label}: {len(calls)} tool calls, expected 1 of {sc.expect}")
            continue
        problems += [f"{sc.label}: {p}" for p in argument_problems(Call(calls[0].name, calls[0].arguments),
                                                                     sc.expect, schema)]
    right = len(SCENARIOS) - len({p.split(":")[0] for p in problems})
    measured = {"right": right, "of": len(SCENARIOS)}
    if problems:
        return Probe("tool_scenarios", "fail", "; ".join(problems), measured, threshold, evidence)
    return Probe("tool_scenarios", "ok", f"{right}/{len(SCENARIOS)} tool scenarios right", measured, threshold,
                 evidence)


def _run_probe(probe: ProbeId, s: Session, budget: Budget) -> Probe:
    gate = CAPABILITY.get(probe)
    if gate is not None and not _capable(s, gate[0]):
        return Probe(probe, "skip", _skip_reason(*gate))
    runners: dict[ProbeId, Callable[[], Probe]] = {
        "utf8": lambda: probe_utf8(s, budget), "repetition": lambda: probe_repetition(s, budget),
        "determinism": lambda: probe_determinism(s, budget), "exact": lambda: probe_exact(s),
        "tool_scenarios": lambda: probe_tools(s)}
    return runners[probe]()


def check_integrity(s: Session, depth: Depth = "quick") -> CheckResult:
    t0 = time.monotonic()
    chosen = QUICK_PROBES if depth == "quick" else PROBES
    probes = [_run_probe(p, s, BUDGETS[depth]) for p in chosen]
    evidence = [ev for p in probes for ev in p.evidence]
    for p in probes:
        for ev in p.evidence:
            ev.label = f"{p.id}: {ev.label}"
    status = worst(p.status for p in probes)
    parts = [f"{p.id} {p.status}: {p.summary}" for p in probes if p.status != "ok"]
    passed = [p.id for p in probes if p.status == "ok"]
    limits = [f"{p.id}: {p.limit}" for p in probes if p.status == "ok" and p.limit]
    summary = "; ".join(([f"{', '.join(passed)} ok"] if passed else []) + limits + parts)
    if depth == "quick":
        summary += " (quick part; --full adds the long generation and tool scenarios)"
    details = {"depth": depth, "probes": [p.to_json() for p in probes]}
    fix = None
    if status == "fail":
        fix = ("Garbled or looping text from a healthy-looking server points at the weights, the quantization, the "
               "chat template or the engine build: compare against a known-good deployment with "
               "`forklift check NAME --reference OTHER`, and see `forklift doctor NAME`.")
    return CheckResult("integrity", status, summary, details=details, fix=fix, evidence=evidence,
                       seconds=time.monotonic() - t0)
