"""A Runner that executes nothing: it answers argv from rules and records every call.

For unit tests of code above this layer (render, preflight judgement, node checks, net parsing). Tests that
need a real process use ``LocalRunner`` or the namespace cluster's sshd instead.

    fake = FakeRunner("spark-a").on(["cat", "/proc/meminfo"], stdout="MemAvailable: 1024 kB\\n")
    fake.run(["cat", "/proc/meminfo"]).stdout
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from forklift.runner.base import Completed, Spawned

Matcher = Sequence[str] | re.Pattern[str] | Callable[[Sequence[str]], bool]


@dataclass(frozen=True)
class Call:
    """One command the fake was asked to run or spawn."""

    argv: tuple[str, ...]
    env: dict[str, str]
    input: str | None = None
    spawned: bool = False
    log_path: str | None = None
    secret_names: tuple[str, ...] = ()


@dataclass
class _Rule:
    match: Matcher
    stdout: str | Callable[[Sequence[str]], str]
    stderr: str
    returncode: int


def _matches(rule: Matcher, argv: Sequence[str]) -> bool:
    if isinstance(rule, re.Pattern):
        return rule.search(" ".join(argv)) is not None
    if callable(rule):
        return bool(rule(argv))
    return list(argv[: len(rule)]) == list(rule)


@dataclass
class FakeRunner:
    """Answers ``run`` from the first rule whose argv prefix (or pattern, or predicate) matches; otherwise
    ``default``. ``spawn`` returns increasing fake pids. Every call is kept in ``calls``."""

    host: str = "fake"
    default_returncode: int = 0
    calls: list[Call] = field(default_factory=list)
    _rules: list[_Rule] = field(default_factory=list)
    _next_pid: int = 4000

    def on(self, match: Matcher, *, stdout: str | Callable[[Sequence[str]], str] = "", stderr: str = "",
           returncode: int = 0) -> FakeRunner:
        """Add a rule (first added wins); returns self so rules chain."""
        self._rules.append(_Rule(match, stdout, stderr, returncode))
        return self

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        self.calls.append(Call(tuple(argv), dict(env or {}), input))
        for rule in self._rules:
            if _matches(rule.match, argv):
                out = rule.stdout(argv) if callable(rule.stdout) else rule.stdout
                return Completed(self.host, tuple(argv), rule.returncode, out, rule.stderr)
        return Completed(self.host, tuple(argv), self.default_returncode, "", "")

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Spawned:
        self.calls.append(Call(tuple(argv), dict(env or {}), None, True, log_path, tuple(sorted(secret_env or {}))))
        self._next_pid += 1
        return Spawned(self.host, self._next_pid, log_path)

    def ran(self, *prefix: str) -> list[Call]:
        """The calls whose argv starts with ``prefix``."""
        return [c for c in self.calls if list(c.argv[: len(prefix)]) == list(prefix)]
