"""Which checks exist: each registers an id, a one-line summary, its tier and what it needs, and the suite, the
CLI's help and the result ids all read this table. No check module is imported to list them (``forklift check
--help`` stays fast); a check's function is loaded when it runs.

Third-party checks come from the ``forklift.checks`` entry point group, the way simonw/llm loads plugins: an entry
point names a :class:`CheckSpec` or a callable returning several, for example in a plugin's ``pyproject.toml``::

    [project.entry-points."forklift.checks"]
    latency_budget = "my_checks:LATENCY_BUDGET"     # a CheckSpec whose run(ctx) returns a CheckResult
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal

from forklift.errors import CheckError

if TYPE_CHECKING:
    from forklift.check.context import CheckContext
    from forklift.endpoint import Target
    from forklift.results import CheckResult

Tier = Literal["quick", "full"]
GROUP = "forklift.checks"
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(frozen=True)
class CheckSpec:
    """One check. ``run`` is a callable taking a :class:`forklift.check.context.CheckContext`, or its
    ``"module:function"`` path (loaded on first use)."""

    id: str
    summary: str
    run: str | Callable[[CheckContext], CheckResult]
    quick: bool = False
    """In the quick tier (every check is in the full tier)."""
    quick_when: str | None = None
    """In the quick tier only when the target has this setting (``reasoning_parser``)."""
    source: str = field(default="forklift", compare=False)
    """Who registered it: forklift, or the entry point that did."""

    def runner(self) -> Callable[[CheckContext], CheckResult]:
        if callable(self.run):
            return self.run
        module, _, name = self.run.partition(":")
        fn: Callable[[CheckContext], CheckResult] = getattr(importlib.import_module(module), name)
        return fn

    def in_quick(self, target: Target) -> bool:
        return self.quick and (self.quick_when is None or bool(getattr(target, self.quick_when, None)))


BUILTIN: tuple[CheckSpec, ...] = tuple(CheckSpec(i, s, f"forklift.check.builtin:{i}", quick=q, quick_when=w)
                                       for i, s, q, w in (
    ("endpoint", "the model is listed, with the context length the recipe asked for", True, None),
    ("completion", "known prompts answered (exact answers where the model can give them)", True, None),
    ("streaming", "a streamed greedy answer equals the plain one", True, None),
    ("reasoning", "the reasoning parser splits thinking from the answer", True, "reasoning_parser"),
    ("tools", "a forced tool call returns schema-valid arguments", True, None),
    ("integrity", "output integrity probes (quick: utf8, determinism, exact; full: all)", True, None),
    ("needle", "long-context recall at several lengths and depths", False, None),
    ("parity", "greedy answers equal a reference transcript or endpoint", False, None),
    ("golden", "greedy answers equal the run's own golden transcript", True, None),
    ("speculative", "speculative decoding accepts drafts and keeps greedy output", False, None),
    ("auth", "requests without the key are refused, with it accepted", True, None),
))

_loaded: list[CheckSpec] = []


def _plugin_specs() -> list[CheckSpec]:
    out: list[CheckSpec] = []
    for ep in entry_points(group=GROUP):
        try:
            obj: Any = ep.load()
            found = obj() if callable(obj) and not isinstance(obj, CheckSpec) else obj
            specs = [found] if isinstance(found, CheckSpec) else list(found)
        except Exception as exc:  # a broken plugin is named, never a traceback
            raise CheckError(f"the check plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}",
                             fix=f"Fix or uninstall the package that provides {ep.value}.") from exc
        for spec in specs:
            if not isinstance(spec, CheckSpec):
                raise CheckError(f"the check plugin {ep.name!r} gave {type(spec).__name__}, not a CheckSpec",
                                 fix=f"Make {ep.value} a forklift.check.registry.CheckSpec (or a list of them).")
            out.append(CheckSpec(spec.id, spec.summary, spec.run, spec.quick, spec.quick_when, source=ep.value))
    return out


def validate(specs: Iterable[CheckSpec]) -> list[CheckSpec]:
    """The specs in order, refusing a malformed or repeated id (a plugin may not replace a built-in check)."""
    seen: dict[str, CheckSpec] = {}
    for spec in specs:
        if not spec.id or set(spec.id) - _ID_CHARS:
            raise CheckError(f"check id {spec.id!r} ({spec.source}) must be lower-case letters, digits, - or _",
                             fix="Rename the check.")
        if spec.id in seen:
            raise CheckError(f"check id {spec.id!r} is registered twice ({seen[spec.id].source} and {spec.source})",
                             fix="Rename one of the checks.")
        seen[spec.id] = spec
    return list(seen.values())


def specs() -> list[CheckSpec]:
    """Every registered check, built-in first, then plugins in entry point order."""
    if not _loaded:
        _loaded.extend(validate([*BUILTIN, *_plugin_specs()]))
    return list(_loaded)


def ids() -> tuple[str, ...]:
    return tuple(s.id for s in specs())


def get(check_id: str) -> CheckSpec:
    for spec in specs():
        if spec.id == check_id:
            return spec
    raise CheckError(f"unknown check {check_id!r}", fix="Choose from " + ", ".join(ids()))


def quick_help() -> str:
    """The quick tier's checks, as the CLI's help says them."""
    always = [s.id for s in BUILTIN if s.quick and s.quick_when is None]
    when = [f"{s.id} with a {s.quick_when.replace('_', ' ')}" for s in BUILTIN if s.quick and s.quick_when]
    return ", ".join(always) + (f" (+ {', '.join(when)})" if when else "")


def full_only_help() -> str:
    return ", ".join(s.id for s in BUILTIN if not s.quick)
