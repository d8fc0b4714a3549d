"""Usage per key from the gateway's audit log (audit.jsonl and its rotated files)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from forklift.gateway.keys import gateway_dir


@dataclass
class KeyUsage:
    key: str
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    models: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def audit_entries() -> Iterator[dict[str, Any]]:
    """Oldest first: audit.jsonl.5 .. .1, then audit.jsonl. Files the gateway did not name (a logrotate
    ``audit.jsonl.1.gz``) and lines that are not a whole JSON object (one cut short by a kill mid-write) are
    skipped."""
    d = gateway_dir()
    files = sorted((p for p in d.glob("audit.jsonl.*") if p.suffix.lstrip(".").isdigit()),
                   key=lambda p: -int(p.suffix.lstrip(".")))
    for p in [*files, d / "audit.jsonl"]:
        if p.exists():
            for line in p.read_text(errors="replace").splitlines():
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    yield entry


def usage(since: float | None = None) -> dict[str, KeyUsage]:
    """Per key name (requests without a valid key count under '(no key)'): requests, errors (any status but
    200), prompt and completion tokens, requests per model."""
    out: dict[str, KeyUsage] = {}
    for e in audit_entries():
        if since is not None and float(e.get("ts", 0)) < since:
            continue
        name = e.get("key") or "(no key)"
        u = out.setdefault(name, KeyUsage(name, models={}))
        u.requests += 1
        u.errors += int(e.get("status") != 200)
        u.prompt_tokens += int(e.get("prompt_tokens") or 0)
        u.completion_tokens += int(e.get("completion_tokens") or 0)
        if e.get("model") and u.models is not None:
            u.models[str(e["model"])] = u.models.get(str(e["model"]), 0) + 1
    return out
