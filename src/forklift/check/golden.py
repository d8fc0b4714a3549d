"""``golden``: a run's own greedy answers, kept beside its record, as the reference for every later check.

The first check of a run in which every check passes saves the greedy answers to a fixed prompt set as
``runs/NAME/golden.json`` (a parity transcript, with the run id and the settings that can change greedy output).
Later checks of the run, and canary's check of a candidate, ask the same prompts and compare:

- on the same vLLM build and settings the answers must be identical, token for token;
- across builds (or settings) each answer must keep its first ``CROSS_BUILD_TOKENS`` tokens: a later divergence
  is within the tolerance (floating-point drift: ok, and named), an earlier one a failure. The settings that
  differ are named. (Within the tolerance is ok, not a warning: canary counts ok -> warn as a regression.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from forklift.check import parity
from forklift.check.parity import Answer, Transcript, first_divergence, greedy_answers, known_settings, settings_diff
from forklift.check.session import RequestFailed, Session
from forklift.errors import CheckError
from forklift.record import run_dir
from forklift.results import CheckResult, Evidence, Status, worst

FILE = "golden.json"
PROMPTS: tuple[str, ...] = parity.PROMPTS
CROSS_BUILD_TOKENS = 16
"""Across vLLM builds or settings, an answer may part from the golden one only after this many tokens."""
TOLERANCE = (f"identical on the same vLLM build and settings; across builds each answer keeps its first "
             f"{CROSS_BUILD_TOKENS} tokens")


def path_for(run_name: str) -> Path:
    return run_dir(run_name) / FILE


def load(run_name: str) -> Transcript | None:
    """The run's golden transcript, None when it has none yet. Raises CheckError for an unreadable one."""
    path = path_for(run_name)
    if not path.is_file():
        return None
    try:
        return Transcript.load(path)
    except CheckError as exc:
        raise CheckError(f"the golden transcript of run '{run_name}' is unreadable: {exc.message}",
                         fix=f"Remove {path}; the next check in which every check passes saves a fresh one."
                         ) from exc


def save(run_name: str, transcript: Transcript) -> Path:
    path = path_for(run_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    transcript.save(path)
    return path


def same_build(ours: dict[str, Any] | None, golden: dict[str, Any] | None) -> bool:
    """Both sides' settings known and equal, the vLLM version included (pure)."""
    return bool(ours) and bool(golden) and not settings_diff(ours, golden) and \
        (ours or {}).get("vllm_version") == (golden or {}).get("vllm_version")


def drift(ours: list[Answer], golden: Transcript, *, exact: bool) -> tuple[Status, list[dict[str, Any]]]:
    """Each golden prompt's verdict: identical or drifted within the tolerance (ok), or beyond it (fail) (pure)."""
    by_prompt = {a.prompt: a for a in ours}
    rows: list[dict[str, Any]] = []
    statuses: list[Status] = []
    for ref in golden.answers:
        mine = by_prompt.get(ref.prompt)
        if mine is None:
            continue
        div = first_divergence(mine, ref)
        row: dict[str, Any] = {"prompt": ref.prompt, "identical": div is None}
        if div is None:
            statuses.append("ok")
        else:
            within = not exact and div.unit == "token" and div.index >= CROSS_BUILD_TOKENS
            statuses.append("ok" if within else "fail")
            row.update({"status": "within tolerance" if within else "fail", "unit": div.unit, "index": div.index,
                        "ours": div.ours, "golden": div.theirs, "common_prefix": div.common[-40:],
                        "answer": mine.text, "golden_answer": ref.text})
        rows.append(row)
    return worst(statuses), rows


def check_golden(s: Session, golden: Transcript | None, *, where: str | None) -> CheckResult:
    """Compare with ``golden``; without one, record the answers (``details["recorded"]``) for the runner to
    save once every check has passed. ``where`` names the golden file (None: no run to keep one with)."""
    t0 = time.monotonic()
    if golden is None and where is None:
        return CheckResult("golden", "skip", "no run record to keep a golden transcript with (a --url target)",
                           fix="Check a run by name (`forklift check NAME`): its first healthy check saves one.")
    prompts = [a.prompt for a in golden.answers] if golden is not None else list(PROMPTS)
    evidence: list[Evidence] = []
    try:
        ours, evidence = greedy_answers(s, prompts)
    except RequestFailed as exc:
        evidence.append(exc.evidence)
        return CheckResult("golden", "fail", f"request failed: {exc.response}", evidence=evidence,
                           seconds=time.monotonic() - t0)
    settings = known_settings(s)
    if golden is None:
        recorded = Transcript(ours, s.target.describe(), settings)
        return CheckResult("golden", "skip", f"no golden transcript yet: {len(ours)} greedy answers are saved to "
                           f"{where} when every check passes", evidence=evidence, seconds=time.monotonic() - t0,
                           details={"recorded": recorded.to_json(), "path": where})
    exact = same_build(settings, golden.settings)
    status, rows = drift(ours, golden, exact=exact)
    diff = settings_diff(settings, golden.settings)
    drifted = [r for r in rows if not r["identical"]]
    basis = "same vLLM build and settings: exact" if exact else (
        "across builds: tolerance " + f"{CROSS_BUILD_TOKENS} tokens" + (
            "; settings that differ (here vs golden): " + ", ".join(f"{k} {v[0]!r} vs {v[1]!r}"
                                                                    for k, v in diff.items()) if diff else
            "; settings of one side unknown"))
    summary = f"{len(rows) - len(drifted)}/{len(rows)} greedy answers identical to the golden transcript ({basis})"
    if drifted:
        summary += "; drifted: " + "; ".join(
            f"{r['prompt']!r} at {r['unit']} {r['index']} ({r['ours']!r} here vs {r['golden']!r}"
            + (", within the tolerance)" if r["status"] == "within tolerance" else ")") for r in drifted)
    details = {"prompts": rows, "exact": exact, "tolerance": TOLERANCE, "settings_differ": diff,
               "golden": {"path": where, "created_at": golden.created_at, "target": golden.target}}
    fix = None
    if status == "fail":
        fix = ("The deployment's greedy answers changed since its golden transcript. Same build and settings: "
               "suspect nondeterminism, a corrupted node or weights (see `forklift doctor`). After an intended "
               "change, start afresh with `forklift check NAME --new-golden`.")
    return CheckResult("golden", status, summary, evidence=evidence, fix=fix, details=details,
                       seconds=time.monotonic() - t0)


def transcript_of(result: CheckResult) -> Transcript | None:
    """The answers a ``golden`` check recorded for saving (None when it compared or did not run)."""
    data = result.details.get("recorded")
    if not isinstance(data, dict):
        return None
    answers = [Answer(str(p["messages"][-1]["content"]), str(p["text"]), p.get("tokens"), p.get("finish_reason"))
               for p in data.get("prompts", [])]
    return Transcript(answers, data.get("target") or {}, data.get("settings"), float(data.get("created_at") or 0))
