"""Run the acceptance suite: discover the target, run each check of the tier in order, collect a Report."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import openai

from forklift.check import golden, needle
from forklift.check.auth import check_auth
from forklift.check.completion import check_completion
from forklift.check.endpoint import check_endpoint
from forklift.check.golden import check_golden
from forklift.check.integrity import check_integrity
from forklift.check.needle import check_needle
from forklift.check.parity import Transcript, check_parity
from forklift.check.reasoning import check_reasoning
from forklift.check.result import CHECK_IDS, CheckId, Report, Tier
from forklift.check.session import DEFAULT_TIMEOUT_S, Session, open_session
from forklift.check.speculative import check_speculative
from forklift.check.streaming import check_streaming
from forklift.check.tools import check_tools
from forklift.endpoint import Target
from forklift.errors import CheckError
from forklift.results import CheckResult

QUICK: tuple[CheckId, ...] = ("endpoint", "completion", "streaming", "tools", "integrity", "golden", "auth")
NEEDLE_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Options:
    """What the user chose beyond the tier."""

    needle_lengths: tuple[int, ...] | None = None
    needle_depths: tuple[float, ...] = needle.DEFAULT_DEPTHS
    reference: Transcript | Target | None = None
    only: tuple[CheckId, ...] | None = None
    seed: int | None = None
    golden: Path | None = None
    """Compare against this golden transcript instead of the run's own (canary: the baseline's)."""
    save_golden: bool = True
    """Save the run's golden transcript after a healthy check when it has none (canary's candidate: no)."""
    new_golden: bool = False
    """Record afresh and replace the run's golden transcript when every check passes."""


@dataclass(frozen=True)
class _Golden:
    """What the golden check compares against: the transcript (None: record one), where it lives, or why it
    cannot be read."""

    transcript: Transcript | None
    where: str | None
    error: CheckError | None = None


def _golden_for(target: Target, opts: Options) -> _Golden:
    path = opts.golden or (golden.path_for(target.run_name) if target.run_name else None)
    if path is None:
        return _Golden(None, None)
    if opts.new_golden and opts.golden is None:
        return _Golden(None, str(path))
    try:
        if opts.golden is not None:
            return _Golden(Transcript.load(path), str(path))
        return _Golden(golden.load(target.run_name) if target.run_name else None, str(path))
    except CheckError as exc:
        return _Golden(None, str(path), exc)


def plan(target: Target, tier: Tier, only: Sequence[CheckId] | None = None) -> list[CheckId]:
    """The checks a tier runs, in order. ``quick`` adds ``reasoning`` when a reasoning parser is configured."""
    if only:
        return [c for c in CHECK_IDS if c in only]
    if tier == "full":
        return list(CHECK_IDS)
    chosen = set(QUICK) | ({"reasoning"} if target.reasoning_parser else set())
    return [c for c in CHECK_IDS if c in chosen]


def _run_one(check_id: CheckId, s: Session, opts: Options, reference: Transcript | Session | None,
             gold: _Golden, tier: Tier) -> CheckResult:
    if check_id == "endpoint":
        return check_endpoint(s)
    if check_id == "completion":
        return check_completion(s)
    if check_id == "streaming":
        return check_streaming(s)
    if check_id == "reasoning":
        return check_reasoning(s)
    if check_id == "tools":
        return check_tools(s)
    if check_id == "integrity":
        return check_integrity(s, tier)
    if check_id == "golden":
        if gold.error is not None:
            return CheckResult("golden", "fail", gold.error.message, fix=gold.error.fix)
        return check_golden(s, gold.transcript, where=gold.where)
    if check_id == "needle":
        slow = Session(s.target, s.discovery, timeout_s=NEEDLE_TIMEOUT_S)
        try:
            return check_needle(slow, opts.needle_lengths, opts.needle_depths, random.Random(opts.seed))
        finally:
            slow.close()
    if check_id == "parity":
        return check_parity(s, reference)
    if check_id == "speculative":
        return check_speculative(s.endpoint, s.model, configured=(s.target.settings or {}).get("serve.speculative"),
                                 max_model_len=s.target.max_model_len or s.discovery.max_model_len)
    return check_auth(s)


def _guarded(check_id: CheckId, s: Session, opts: Options, reference: Transcript | Session | None,
             gold: _Golden | None = None, tier: Tier = "quick") -> CheckResult:
    """A check whose connection breaks mid-way fails with that error instead of aborting the suite."""
    t0 = time.monotonic()
    try:
        return _run_one(check_id, s, opts, reference, gold or _Golden(None, None), tier)
    except (httpx.HTTPError, openai.OpenAIError) as exc:
        return CheckResult(check_id, "fail", f"request failed: {type(exc).__name__}: {exc}",
                           seconds=time.monotonic() - t0,
                           fix="The server stopped answering mid-check: see `forklift status` and `forklift logs`.")


def run(target: Target, tier: Tier = "quick", opts: Options | None = None,
        on_start: Callable[[CheckId], None] | None = None,
        on_result: Callable[[CheckResult], None] | None = None) -> Report:
    """Run the tier's checks against the target. Raises CheckError or EndpointError when the target cannot be
    checked at all (unreachable, not OpenAI-compatible, key refused, bad arguments); a check that runs and fails
    is a verdict, not an error."""
    opts = opts or Options()
    t0 = time.monotonic()
    ids = plan(target, tier, opts.only)
    s = open_session(target)
    reference: Transcript | Session | None = None
    try:
        if "needle" in ids and opts.needle_lengths is not None:
            needle.validate(opts.needle_lengths, opts.needle_depths,
                            s.target.max_model_len or s.discovery.max_model_len)
        if "parity" in ids and isinstance(opts.reference, Target):
            reference = open_session(opts.reference)
        elif isinstance(opts.reference, Transcript):
            reference = opts.reference
        gold = _golden_for(target, opts) if "golden" in ids else _Golden(None, None)
        results: list[CheckResult] = []
        served = any(m.get("id") == s.model for m in s.discovery.listing)
        for check_id in ids:
            if on_start:
                on_start(check_id)
            if check_id != "endpoint" and not served:
                result = CheckResult(check_id, "skip", f"skipped: model '{s.model}' is not served (see endpoint)")
            else:
                result = _guarded(check_id, s, opts, reference, gold, tier)
            results.append(result)
            if on_result:
                on_result(result)
        if not any(r.failed for r in results):
            results = [_keep_golden(r, target, opts) if r.id == "golden" else r for r in results]
        return Report(s.target.describe(), tier, results, time.monotonic() - t0)
    finally:
        s.close()
        if isinstance(reference, Session):
            reference.close()


def _keep_golden(result: CheckResult, target: Target, opts: Options) -> CheckResult:
    """The golden check recorded the run's first answers and every check passed: save them."""
    recorded = golden.transcript_of(result)
    if recorded is None or not opts.save_golden or target.run_name is None:
        return result
    if target.record is not None:
        recorded.target["run_id"] = target.record.run_id
    path = golden.save(target.run_name, recorded)
    return replace(result, status="ok", summary=f"saved {len(recorded.answers)} greedy answers as the run's golden "
                   f"transcript ({path}); later checks compare against it ({golden.TOLERANCE})")


def save_reference(target: Target) -> Transcript:
    """Record the target's greedy answers on the parity prompt set (for a later ``--reference``)."""
    from forklift.check.parity import record_transcript

    s = open_session(target, timeout_s=DEFAULT_TIMEOUT_S)
    try:
        return record_transcript(s)
    finally:
        s.close()
