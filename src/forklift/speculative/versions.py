"""Which speculative methods and ``--speculative-config`` keys each vLLM release accepts (data: versions.yaml,
generated from vLLM's ``config/speculative.py`` by ``scripts/vllm/speculative_versions.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from forklift.yamlio import shipped

Section = Literal["methods", "aliases", "keys"]
_NUM = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def key(text: str) -> tuple[int, int, int]:
    """'0.26.0' -> (0, 26, 0); '0.30' -> (0, 30, 0)."""
    m = _NUM.match(text)
    if m is None:
        raise ValueError(f"not a vLLM version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@cache
def data() -> dict[str, Any]:
    loaded: dict[str, Any] = shipped("forklift.speculative", "versions.yaml")
    return loaded


@dataclass(frozen=True)
class Release:
    """The vLLM release the rules are checked against."""

    text: str
    """As given (``0.32.0+cpu``, ``0.1.dev16581+gdda4668b5``)."""
    key: tuple[int, int, int]
    """The release whose tables apply: the given one, or the newest read for an unknown or newer build."""
    known: bool
    """False for a build the tables cannot place (a source build's ``0.1.devN``, or a release newer than every
    release read): the newest tables are used and the plan says so."""

    @property
    def label(self) -> str:
        return ".".join(map(str, self.key))

    def at_least(self, version: str) -> bool:
        return self.key >= key(version)


def newest_read() -> tuple[int, int, int]:
    return max(key(v) for v in data()["read"])


def release(version: str | None, default: str) -> Release:
    """``version`` (or ``default`` when None) as a Release; dev builds and unparsable text map to the newest."""
    text = version or default
    try:
        parsed = key(text)
    except ValueError:
        return Release(text, newest_read(), known=False)
    oldest = min(key(v) for v in data()["read"])
    if parsed < oldest and "dev" in text:
        return Release(text, newest_read(), known=False)  # a source build without tags: 0.1.devN
    if parsed > newest_read():
        return Release(text, newest_read(), known=False)
    return Release(text, parsed, known=True)


def span(section: Section, name: str) -> tuple[str, str | None] | None:
    """(since, removed) of a method, alias or key; None when no release read has it."""
    entry = data()[section].get(name)
    if entry is None:
        return None
    return str(entry["since"]), (str(entry["removed"]) if entry.get("removed") else None)


def has(section: Section, name: str, rel: Release) -> bool:
    bounds = span(section, name)
    if bounds is None:
        return False
    since, removed = bounds
    return rel.key >= key(since) and (removed is None or rel.key < key(removed))


def why_missing(section: Section, name: str, rel: Release) -> str:
    """Why ``name`` is not in ``rel`` (for an error message)."""
    bounds = span(section, name)
    if bounds is None:
        return "no vLLM release from 0.11 to the newest read has it"
    since, removed = bounds
    if rel.key < key(since):
        return f"added in vLLM {since}"
    return f"removed in vLLM {removed}"
