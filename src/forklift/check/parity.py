"""``parity``: greedy outputs against a reference (a saved transcript or a second endpoint) on a fixed prompt
set; reports the first divergent token and which settings differ between the two sides."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.check.session import RequestFailed, Session
from forklift.endpoint.target import Target, base_version
from forklift.errors import CheckError, RunError
from forklift.results import CheckResult, Evidence, Status, worst

FORMAT = "forklift-transcript/1"
PROMPTS: tuple[str, ...] = ("What is 2+2?", "Name three colors.", "What is the capital of France?")
MAX_TOKENS = 64
LATE_DIVERGENCE = 32
"""Diverging after this many identical tokens is a warning (floating-point drift), earlier a failure."""


@dataclass
class Answer:
    prompt: str
    text: str
    tokens: list[str] | None
    finish_reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": self.prompt}], "max_tokens": MAX_TOKENS,
                "text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason}


@dataclass
class Transcript:
    """Greedy answers of one deployment, with what is known about its settings."""

    answers: list[Answer]
    target: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] | None = None
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "created_at": self.created_at, "target": self.target, "settings": self.settings,
                "prompts": [a.to_json() for a in self.answers]}

    def save(self, path: Path) -> None:
        try:
            path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        except OSError as exc:
            raise CheckError(f"cannot write {path}: {exc.strerror}", fix="Pick a writable path.") from exc

    @classmethod
    def load(cls, path: Path) -> Transcript:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckError(f"{path}: not a readable transcript ({exc})",
                             fix="Write one with `forklift check NAME --save-reference FILE`.") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("prompts"), list):
            raise CheckError(f"{path}: not a forklift transcript (format {FORMAT!r} expected)",
                             fix="Write one with `forklift check NAME --save-reference FILE`.")
        answers = []
        for i, p in enumerate(data["prompts"]):
            try:
                answers.append(Answer(str(p["messages"][-1]["content"]), str(p["text"]), p.get("tokens"),
                                      p.get("finish_reason")))
            except (KeyError, IndexError, TypeError) as exc:
                raise CheckError(f"{path}: prompts[{i}] is malformed ({exc})",
                                 fix="Write a fresh one with --save-reference.") from exc
        return cls(answers, data.get("target") or {}, data.get("settings"), float(data.get("created_at") or 0))


def greedy_answers(s: Session, prompts: tuple[str, ...] | list[str] = PROMPTS) -> tuple[list[Answer], list[Evidence]]:
    """The target's greedy answers with their tokens (from logprobs when the server gives them)."""
    answers: list[Answer] = []
    evidence: list[Evidence] = []
    for prompt in prompts:
        resp, ev = s.chat(prompt, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
                          temperature=0, logprobs=True)
        evidence.append(ev)
        choice = resp.choices[0]
        tokens = [t.token for t in choice.logprobs.content] if choice.logprobs and choice.logprobs.content else None
        answers.append(Answer(prompt, choice.message.content or "", tokens, choice.finish_reason))
    return answers, evidence


def record_transcript(s: Session) -> Transcript:
    """Greedy answers of this target, ready to save as a reference."""
    try:
        answers, _ = greedy_answers(s)
    except RequestFailed as exc:
        raise CheckError(f"cannot record a transcript: {exc.response}",
                         fix="Run `forklift check` to see what fails.") from exc
    return Transcript(answers, s.target.describe(), known_settings(s))


def known_settings(s: Session) -> dict[str, Any] | None:
    if s.target.settings is not None:
        return s.target.settings
    return {"vllm_version": base_version(s.discovery.version)} if s.discovery.version else None


@dataclass(frozen=True)
class Divergence:
    index: int
    ours: str
    theirs: str
    common: str
    unit: str


def first_divergence(ours: Answer, theirs: Answer) -> Divergence | None:
    """Where two greedy answers part, in tokens when both sides have them, else in characters (pure)."""
    if ours.tokens is not None and theirs.tokens is not None:
        a, b, unit = ours.tokens, theirs.tokens, "token"
    else:
        a, b, unit = list(ours.text), list(theirs.text), "character"
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return Divergence(i, x, y, "".join(a[:i]), unit)
    if len(a) != len(b):
        i = min(len(a), len(b))
        return Divergence(i, a[i] if i < len(a) else "<end>", b[i] if i < len(b) else "<end>", "".join(a[:i]), unit)
    return None


def settings_diff(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> dict[str, list[Any]]:
    """Settings known on both sides that differ: {path: [ours, theirs]} (pure)."""
    if not ours or not theirs:
        return {}
    return {k: [ours[k], theirs[k]] for k in sorted(set(ours) & set(theirs)) if ours[k] != theirs[k]}


def compare(ours: list[Answer], reference: Transcript) -> tuple[Status, str, dict[str, Any]]:
    """Verdict of our answers against the reference's, prompt by prompt (pure)."""
    by_prompt = {a.prompt: a for a in ours}
    rows: list[dict[str, Any]] = []
    statuses: list[Status] = []
    parts: list[str] = []
    for ref in reference.answers:
        mine = by_prompt.get(ref.prompt)
        if mine is None:
            continue
        div = first_divergence(mine, ref)
        row: dict[str, Any] = {"prompt": ref.prompt, "identical": div is None, "ours": mine.text,
                               "reference": ref.text}
        if div is None:
            statuses.append("ok")
        else:
            late = div.unit == "token" and div.index >= LATE_DIVERGENCE
            statuses.append("warn" if late else "fail")
            row["first_divergence"] = {"index": div.index, "unit": div.unit, "ours": div.ours,
                                       "reference": div.theirs, "common_prefix": div.common}
            parts.append(f"{ref.prompt!r} diverges at {div.unit} {div.index}: {div.ours!r} here vs "
                         f"{div.theirs!r} in the reference, after {div.common[-40:]!r}")
        rows.append(row)
    st = worst(statuses)
    same = sum(1 for r in rows if r["identical"])
    summary = f"{same}/{len(rows)} greedy answers identical to the reference"
    if parts:
        summary += "; " + "; ".join(parts)
    return st, summary, {"prompts": rows}


def check_parity(s: Session, reference: Transcript | Session | None) -> CheckResult:
    t0 = time.monotonic()
    if reference is None:
        return CheckResult("parity", "skip", "no reference given", seconds=time.monotonic() - t0,
                           fix="Pass --reference FILE (written by --save-reference), a URL, or another run's name.")
    evidence: list[Evidence] = []
    try:
        if isinstance(reference, Session):
            ref_answers, ref_ev = greedy_answers(reference)
            for ev in ref_ev:
                ev.label = f"reference: {ev.label}"
            evidence += ref_ev
            transcript = Transcript(ref_answers, reference.target.describe(), known_settings(reference))
        else:
            transcript = reference
        ours, our_ev = greedy_answers(s, [a.prompt for a in transcript.answers])
        evidence += our_ev
    except RequestFailed as exc:
        evidence.append(exc.evidence)
        return CheckResult("parity", "fail", f"request failed: {exc.response}", evidence=evidence,
                           seconds=time.monotonic() - t0)
    status, summary, details = compare(ours, transcript)
    diff = settings_diff(known_settings(s), transcript.settings)
    details["settings_differ"] = diff
    details["reference"] = transcript.target
    fix = None
    if status != "ok":
        if diff:
            summary += "; settings that differ (here vs reference): " + ", ".join(
                f"{k} {v[0]!r} vs {v[1]!r}" for k, v in diff.items())
            fix = ("Align the differing settings to see which one changes the output (compiled vs eager numerics "
                   "alone can flip a borderline greedy token of a small model).")
        elif known_settings(s) is None or transcript.settings is None:
            summary += "; settings of one side unknown (check run records rather than URLs to compare them)"
            fix = "Compare two run records (forklift check NAME --reference OTHER_RUN) to see which settings differ."
        else:
            summary += "; no setting differs between the two sides"
            fix = "Same settings, different greedy output: suspect nondeterminism or a broken layer split; see doctor."
    return CheckResult("parity", status, summary, evidence=evidence, fix=fix, seconds=time.monotonic() - t0,
                       details=details)


def reference_from(value: str, *, api_key_env: str | None = None) -> Path | Target:
    """``--reference``: a transcript file, a URL, or the name of another run."""
    from forklift import record as records

    path = Path(value).expanduser()
    if path.is_file():
        return path
    if value.startswith(("http://", "https://")):
        return Target.from_url(value, api_key_env=api_key_env)
    try:
        rec = records.load(value)
    except RunError as exc:
        raise CheckError(f"--reference {value!r} is not a file, a URL, or a run name",
                         fix="Pass a transcript written by --save-reference, http://HOST:PORT, or a run from "
                             "`forklift status`.") from exc
    return Target.from_record(rec, api_key_env=api_key_env)
