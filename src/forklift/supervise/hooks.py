"""The ``on_event`` hook: a command (the event as JSON on stdin, its kind in ``$FORKLIFT_EVENT``) run through a
Runner, or an HTTP POST of the event as JSON. A hook that fails is reported back, never raised: an alert that
cannot be sent must not stop a recovery."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from forklift.errors import ForkliftError
from forklift.runner import LocalRunner, Runner

HOOK_TIMEOUT_S = 30.0


def call(hook: list[str] | str | None, event: Mapping[str, Any], *, runner: Runner | None = None,
         transport: httpx.BaseTransport | None = None) -> str | None:
    """Send ``event`` to the hook. Returns None when it was delivered (or there is no hook), else why not."""
    if hook is None:
        return None
    body = json.dumps(event, default=str)
    if isinstance(hook, str):
        try:
            with httpx.Client(transport=transport, timeout=HOOK_TIMEOUT_S) as client:
                resp = client.post(hook, content=body, headers={"Content-Type": "application/json"})
        except httpx.HTTPError as exc:
            return f"POST {hook} failed: {type(exc).__name__}: {exc}"
        return None if resp.is_success else f"POST {hook} answered HTTP {resp.status_code}"
    runner = runner or LocalRunner()
    env = {"FORKLIFT_EVENT": str(event.get("kind", "")), "FORKLIFT_RUN": str(event.get("name", ""))}
    try:
        res = runner.run(hook, timeout=HOOK_TIMEOUT_S, env=env, input=body)
    except ForkliftError as exc:
        return f"{hook[0]}: {exc.message}"
    if res.ok:
        return None
    tail = (res.stderr.strip().splitlines() or [""])[-1]
    return f"{hook[0]} exited {res.returncode}" + (f": {tail}" if tail else "")


__all__ = ["HOOK_TIMEOUT_S", "call"]
