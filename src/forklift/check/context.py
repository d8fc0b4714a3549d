"""What a check receives: the session on the target, the tier, the user's options, and what parity and golden
compare against. Built-in and plugin checks take one :class:`CheckContext` and return a CheckResult."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forklift.check import needle
from forklift.errors import CheckError

if TYPE_CHECKING:
    from forklift.check.parity import Transcript
    from forklift.check.registry import Tier
    from forklift.check.session import Session
    from forklift.endpoint import Target


@dataclass(frozen=True)
class Options:
    """What the user chose beyond the tier."""

    needle_lengths: tuple[int, ...] | None = None
    needle_depths: tuple[float, ...] = needle.DEFAULT_DEPTHS
    reference: Transcript | Target | None = None
    only: tuple[str, ...] | None = None
    seed: int | None = None
    golden: Path | None = None
    """Compare against this golden transcript instead of the run's own (canary: the baseline's)."""
    save_golden: bool = True
    """Save the run's golden transcript after a healthy check when it has none (canary's candidate: no)."""
    new_golden: bool = False
    """Record afresh and replace the run's golden transcript when every check passes."""


@dataclass(frozen=True)
class Golden:
    """What the golden check compares against: the transcript (None: record one), where it lives, or why it
    cannot be read."""

    transcript: Transcript | None = None
    where: str | None = None
    error: CheckError | None = None


@dataclass(frozen=True)
class CheckContext:
    session: Session
    tier: Tier = "quick"
    options: Options = field(default_factory=Options)
    reference: Transcript | Session | None = None
    golden: Golden = field(default_factory=Golden)
