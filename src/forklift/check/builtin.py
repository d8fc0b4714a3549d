"""The built-in checks as the registry calls them: each takes a CheckContext (forklift.check.registry.BUILTIN)."""

from __future__ import annotations

import random

from forklift.check.auth import check_auth
from forklift.check.completion import check_completion
from forklift.check.context import CheckContext
from forklift.check.endpoint import check_endpoint
from forklift.check.golden import check_golden
from forklift.check.integrity import check_integrity
from forklift.check.needle import check_needle
from forklift.check.parity import check_parity
from forklift.check.reasoning import check_reasoning
from forklift.check.session import Session
from forklift.check.speculative import check_speculative
from forklift.check.streaming import check_streaming
from forklift.check.tools import check_tools
from forklift.results import CheckResult

NEEDLE_TIMEOUT_S = 1800.0


def endpoint(ctx: CheckContext) -> CheckResult:
    return check_endpoint(ctx.session)


def completion(ctx: CheckContext) -> CheckResult:
    return check_completion(ctx.session)


def streaming(ctx: CheckContext) -> CheckResult:
    return check_streaming(ctx.session)


def reasoning(ctx: CheckContext) -> CheckResult:
    return check_reasoning(ctx.session)


def tools(ctx: CheckContext) -> CheckResult:
    return check_tools(ctx.session)


def integrity(ctx: CheckContext) -> CheckResult:
    return check_integrity(ctx.session, ctx.tier)


def golden(ctx: CheckContext) -> CheckResult:
    if ctx.golden.error is not None:
        return CheckResult("golden", "fail", ctx.golden.error.message, fix=ctx.golden.error.fix)
    return check_golden(ctx.session, ctx.golden.transcript, where=ctx.golden.where)


def needle(ctx: CheckContext) -> CheckResult:
    s = ctx.session
    slow = Session(s.target, s.discovery, timeout_s=NEEDLE_TIMEOUT_S)
    try:
        return check_needle(slow, ctx.options.needle_lengths, ctx.options.needle_depths,
                            random.Random(ctx.options.seed))
    finally:
        slow.close()


def parity(ctx: CheckContext) -> CheckResult:
    return check_parity(ctx.session, ctx.reference)


def speculative(ctx: CheckContext) -> CheckResult:
    s = ctx.session
    return check_speculative(s.endpoint, s.model, configured=(s.target.settings or {}).get("serve.speculative"),
                             max_model_len=s.target.max_model_len or s.discovery.max_model_len)


def auth(ctx: CheckContext) -> CheckResult:
    return check_auth(ctx.session)
