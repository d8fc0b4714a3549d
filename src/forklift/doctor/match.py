"""The matcher: clean text lines in, ranked findings out. Pure: no files, no processes, no printing.

One pass over the lines with bounded state per rule, so a log of any length is fine. A combined
regular expression screens each line first; only lines that could match are tested rule by rule.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from forklift.doctor.advice import kv_advice
from forklift.doctor.kb import load_rules
from forklift.doctor.lines import iter_text
from forklift.doctor.model import SEVERITY_RANK, Finding, Report, Rule

MAX_QUOTED = 6
TAIL = 12
_ERRORISH = re.compile(
    r"(?:Error|Exception|Traceback|FATAL|CRITICAL|Killed|failed|timed out)\b|\bERROR\b|\berror:", re.IGNORECASE
)
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass
class _Hit:
    index: int
    line: str


@dataclass
class _State:
    rule: Rule
    all_re: list[re.Pattern[str]]
    any_re: list[re.Pattern[str]]
    none_re: list[re.Pattern[str]]
    all_hits: list[_Hit | None]
    any_hit: _Hit | None = None
    excluded: bool = False
    next_ordered: int = 0
    facts: dict[str, str] = field(default_factory=dict)

    def feed(self, index: int, line: str) -> None:
        if self.excluded:
            return
        for rx in self.none_re:
            if rx.search(line):
                self.excluded = True
                return
        if self.rule.match.ordered:
            k = self.next_ordered
            if k < len(self.all_re):
                m = self.all_re[k].search(line)
                if m:
                    self.all_hits[k] = _Hit(index, line)
                    self._facts(m)
                    self.next_ordered += 1
        else:
            for k, rx in enumerate(self.all_re):
                if self.all_hits[k] is None:
                    m = rx.search(line)
                    if m:
                        self.all_hits[k] = _Hit(index, line)
                        self._facts(m)
        for rx in self.any_re:
            m = rx.search(line)
            if m:
                if self.any_hit is None:
                    self.any_hit = _Hit(index, line)
                self._facts(m)

    def _facts(self, m: re.Match[str]) -> None:
        for key, value in m.groupdict().items():
            if value is not None and key not in self.facts:
                self.facts[key] = value

    def matched(self) -> bool:
        if self.excluded or any(h is None for h in self.all_hits):
            return False
        return not self.any_re or self.any_hit is not None

    def hits(self) -> list[_Hit]:
        found = [h for h in self.all_hits if h is not None]
        if self.any_hit is not None:
            found.append(self.any_hit)
        unique = {h.index: h for h in found}
        return [unique[i] for i in sorted(unique)]


def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def version_applies(spec: str | None, version: str | None) -> bool | None:
    """True/False when both are known; None when either is missing or unreadable."""
    if not spec or not version:
        return None
    have = _version_tuple(version)
    if not have:
        return None
    for clause in spec.split(","):
        m = re.fullmatch(r"\s*(>=|<=|==|<|>)\s*([\d.]+)\s*", clause)
        if not m:
            return None
        op, want = m.group(1), _version_tuple(m.group(2))
        width = max(len(have), len(want))
        a = have + (0,) * (width - len(have))
        b = want + (0,) * (width - len(want))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "<": a < b, ">": a > b}[op]
        if not ok:
            return False
    return True


def _fill(template: str, facts: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: facts.get(m.group(1), "unknown"), template)


class Matcher:
    """Compiled rules, reusable across diagnoses."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        sources = []
        for r in self.rules:
            for p in (*r.match.all, *r.match.any, *r.match.none):
                sources.append("(?:" + _NAMED_GROUP.sub("(?:", p) + ")")
        self._screen = re.compile("|".join(sources)) if sources else None

    def run(self, lines: Iterable[str], *, vllm_version: str | None = None) -> Report:
        states = [
            _State(r, [re.compile(p) for p in r.match.all], [re.compile(p) for p in r.match.any],
                   [re.compile(p) for p in r.match.none], [None] * len(r.match.all))
            for r in self.rules
        ]
        tail: deque[str] = deque(maxlen=TAIL)
        count = 0
        for index, line in enumerate(iter_text(lines)):
            count = index + 1
            if _ERRORISH.search(line):
                tail.append(line)
            if self._screen is not None and not self._screen.search(line):
                continue
            for s in states:
                s.feed(index, line)
        findings = [self._finding(s, vllm_version) for s in states if s.matched()]
        return Report(_rank(findings, {r.id: r for r in self.rules}), count, list(tail))

    def _finding(self, s: _State, vllm_version: str | None) -> Finding:
        r = s.rule
        confidence = r.confidence
        applies = version_applies(r.versions, vllm_version)
        if applies is False:
            confidence *= 0.5
        facts = dict(s.facts)
        if vllm_version:
            facts.setdefault("vllm_version", vllm_version)
        hits = s.hits()
        quoted = [h.line for h in hits[:MAX_QUOTED]]
        advice = kv_advice(facts) if r.advice == "kv_cache" else []
        return Finding(
            rule=r.id, title=r.title, category=r.category, severity=r.severity, confidence=confidence,
            cause=_fill(r.cause, facts).strip(), fix=_fill(r.fix, facts).strip(), lines=quoted,
            references=list(r.references), facts=facts, advice=advice,
        )


def _rank(findings: list[Finding], rules: dict[str, Rule]) -> list[Finding]:
    """Most specific first: superseded last; errors before warnings before info; then confidence."""
    by_id = {f.rule: f for f in findings}
    superseded: dict[str, str] = {}
    for f in findings:
        rule = rules.get(f.rule)
        for victim in rule.supersedes if rule else []:
            if victim in by_id:
                superseded.setdefault(victim, f.rule)
    out = []
    for f in findings:
        if f.rule in superseded:
            f = Finding(**{**f.__dict__, "superseded_by": superseded[f.rule]})
        out.append(f)

    def key(f: Finding) -> tuple[int, int, float, str]:
        rule = rules.get(f.rule)
        npat = (len(rule.match.all) + (1 if rule.match.any else 0)) if rule else 0
        return (1 if f.superseded_by else 0, SEVERITY_RANK[f.severity], -(f.confidence + 0.01 * npat), f.rule)

    return sorted(out, key=key)


_default: Matcher | None = None


def default_matcher() -> Matcher:
    global _default
    if _default is None:
        _default = Matcher(load_rules())
    return _default


def diagnose_report(lines: Iterable[str], *, vllm_version: str | None = None,
                    rules: Sequence[Rule] | None = None) -> Report:
    """Findings plus the lines read and the last error-looking lines (for 'nothing matched')."""
    matcher = default_matcher() if rules is None else Matcher(rules)
    return matcher.run(lines, vllm_version=vllm_version)


def diagnose(lines: Iterable[str], *, vllm_version: str | None = None) -> list[Finding]:
    """Ranked findings for log lines (any mix of ranks, colours and progress bars), most specific first."""
    return diagnose_report(lines, vllm_version=vllm_version).findings
