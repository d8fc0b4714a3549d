"""``auth``: when the deployment has an API key, unauthenticated and wrong-key requests are refused and the
right key works. Without a key, a server reachable beyond loopback is a warning."""

from __future__ import annotations

import secrets
import time
from typing import Any

import openai
from openai import Omit

from forklift.check.session import RequestFailed, Session
from forklift.results import CheckResult, Evidence

MESSAGES = [{"role": "user", "content": "Say hello."}]


def refused(ev: Evidence) -> bool:
    """Whether a failed request was an authentication refusal (401/403)."""
    return (ev.response or "").startswith(("HTTP 401", "HTTP 403"))


def check_auth(s: Session) -> CheckResult:
    t0 = time.monotonic()
    if not s.target.api_key:
        if s.target.exposed:
            host = s.target.bind_host or s.target.base_url
            return CheckResult("auth", "warn", f"no API key, and the server is reachable beyond loopback ({host})",
                               seconds=time.monotonic() - t0,
                               fix="Set serve.api_key_env in the recipe (and export that variable) to require a key.")
        return CheckResult("auth", "skip", "no API key configured; the server listens on loopback only",
                           seconds=time.monotonic() - t0)
    evidence: list[Evidence] = []
    problems: list[str] = []
    body: dict[str, Any] = {"messages": MESSAGES, "max_tokens": 4, "temperature": 0}
    attempts: tuple[tuple[str, openai.OpenAI, dict[str, Any]], ...] = (
        ("no Authorization header", s.client, {"extra_headers": {"Authorization": Omit()}}),
        ("wrong key", s.openai_client("wrong-" + secrets.token_hex(8)), {}),
    )
    for label, client, extra in attempts:
        try:
            _, ev = s.chat(label, client=client, **body, **extra)
            evidence.append(ev)
            problems.append(f"{label}: answered, expected HTTP 401")
        except RequestFailed as exc:
            evidence.append(exc.evidence)
            if not refused(exc.evidence):
                problems.append(f"{label}: failed but not with 401/403: {exc.response[:80]}")
    try:
        _, ev = s.chat(f"key from ${s.target.api_key_env}", **body)
        evidence.append(ev)
    except RequestFailed as exc:
        evidence.append(exc.evidence)
        problems.append(f"with the key: {exc.response[:80]}")
    seconds = time.monotonic() - t0
    if problems:
        return CheckResult("auth", "fail", "; ".join(problems), evidence=evidence, seconds=seconds,
                           fix="Start the server with the key (serve.api_key_env) and pass the same variable here.")
    return CheckResult("auth", "ok", "unauthenticated and wrong-key requests refused with 401; the key works",
                       evidence=evidence, seconds=seconds)
