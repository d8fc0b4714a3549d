"""Run the acceptance suite: discover the target, run each check of the tier in order, collect a Report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import httpx
import openai

from forklift.check import golden, needle, registry
from forklift.check.context import CheckContext, Golden, Options
from forklift.check.parity import Transcript
from forklift.check.registry import Tier
from forklift.check.result import Report
from forklift.check.session import DEFAULT_TIMEOUT_S, Session, open_session
from forklift.endpoint import Target
from forklift.errors import CheckError
from forklift.results import CheckResult

__all__ = ["Options", "plan", "run", "save_reference"]


def _golden_for(target: Target, opts: Options) -> Golden:
    path = opts.golden or (golden.path_for(target.run_name) if target.run_name else None)
    if path is None:
        return Golden()
    if opts.new_golden and opts.golden is None:
        return Golden(None, str(path))
    try:
        if opts.golden is not None:
            return Golden(Transcript.load(path), str(path))
        return Golden(golden.load(target.run_name) if target.run_name else None, str(path))
    except CheckError as exc:
        return Golden(None, str(path), exc)


def plan(target: Target, tier: Tier, only: Sequence[str] | None = None) -> list[str]:
    """The checks a tier runs, in the registry's order: ``only`` (every id must be registered), else every check
    for ``full``, else those registered for the quick tier whose condition holds (reasoning: a reasoning parser)."""
    specs = registry.specs()
    if only:
        for check_id in only:
            registry.get(check_id)
        return [s.id for s in specs if s.id in only]
    return [s.id for s in specs if tier == "full" or s.in_quick(target)]


def _guarded(check_id: str, ctx: CheckContext) -> CheckResult:
    """A check whose connection breaks mid-way fails with that error instead of aborting the suite."""
    t0 = time.monotonic()
    try:
        return registry.get(check_id).runner()(ctx)
    except (httpx.HTTPError, openai.OpenAIError) as exc:
        return CheckResult(check_id, "fail", f"request failed: {type(exc).__name__}: {exc}",
                           seconds=time.monotonic() - t0,
                           fix="The server stopped answering mid-check: see `forklift status` and `forklift logs`.")


def run(target: Target, tier: Tier = "quick", opts: Options | None = None,
        on_start: Callable[[str], None] | None = None,
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
        ctx = CheckContext(s, tier, opts, reference, _golden_for(target, opts) if "golden" in ids else Golden())
        results: list[CheckResult] = []
        served = any(m.get("id") == s.model for m in s.discovery.listing)
        for check_id in ids:
            if on_start:
                on_start(check_id)
            if check_id != "endpoint" and not served:
                result = CheckResult(check_id, "skip", f"skipped: model '{s.model}' is not served (see endpoint)")
            else:
                result = _guarded(check_id, ctx)
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
