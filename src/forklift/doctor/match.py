"""The exact-signature layer: kept lines in, rule findings out. Pure: no files, no processes, no printing.

One pass over the lines with bounded state per rule. The screen (``screen.py``) names the rules whose
literal anchors a line holds; only their regular expressions run on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from forklift.doctor.advice import kv_advice
from forklift.doctor.findings import SEVERITY_RANK, Finding, Line, Rule
from forklift.doctor.kb import load_rules
from forklift.doctor.screen import build as build_screen

MAX_QUOTED = 6
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass
class _State:
    rule: Rule
    all_re: list[re.Pattern[str]]
    any_re: list[re.Pattern[str]]
    none_re: list[re.Pattern[str]]
    all_hits: list[Line | None]
    any_hit: Line | None = None
    excluded: bool = False
    next_ordered: int = 0
    facts: dict[str, str] = field(default_factory=dict)

    def feed(self, line: Line) -> None:
        if self.excluded:
            return
        text = line.text
        for rx in self.none_re:
            if rx.search(text):
                self.excluded = True
                return
        if self.rule.match.ordered:
            k = self.next_ordered
            if k < len(self.all_re):
                m = self.all_re[k].search(text)
                if m:
                    self.all_hits[k] = line
                    self._facts(m)
                    self.next_ordered += 1
        else:
            for k, rx in enumerate(self.all_re):
                if self.all_hits[k] is None:
                    m = rx.search(text)
                    if m:
                        self.all_hits[k] = line
                        self._facts(m)
        for rx in self.any_re:
            m = rx.search(text)
            if m:
                if self.any_hit is None:
                    self.any_hit = line
                self._facts(m)

    def _facts(self, m: re.Match[str]) -> None:
        for key, value in m.groupdict().items():
            if value is not None and key not in self.facts:
                self.facts[key] = value

    def matched(self) -> bool:
        if self.excluded or any(h is None for h in self.all_hits):
            return False
        return not self.any_re or self.any_hit is not None

    def hits(self) -> list[Line]:
        found = [h for h in self.all_hits if h is not None]
        if self.any_hit is not None:
            found.append(self.any_hit)
        unique = {(h.source, h.number, h.text): h for h in found}
        return [unique[k] for k in sorted(unique, key=lambda k: (k[0], k[1]))]


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


def fill(template: str, facts: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: facts.get(m.group(1), "unknown"), template)


class Matcher:
    """Compiled rules, reusable across diagnoses."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self.by_id = {r.id: r for r in self.rules}
        self.screen = build_screen(self.rules)
        self._compiled = [([re.compile(p) for p in r.match.all], [re.compile(p) for p in r.match.any],
                           [re.compile(p) for p in r.match.none]) for r in self.rules]

    def run(self, lines: Iterable[Line], *, vllm_version: str | None = None) -> list[Finding]:
        """Rule findings (confidence = the rule's prior), ranked, superseded ones marked."""
        states = [_State(r, a, b, c, [None] * len(a)) for r, (a, b, c) in zip(self.rules, self._compiled, strict=True)]
        for line in lines:
            for i in sorted(self.screen.rules_for(line.text.encode("utf-8", "ignore").lower())):
                states[i].feed(line)
        findings = [self._finding(s, vllm_version) for s in states if s.matched()]
        return rank(findings, self.by_id)

    def _finding(self, s: _State, vllm_version: str | None) -> Finding:
        r = s.rule
        confidence = r.confidence
        if version_applies(r.versions, vllm_version) is False:
            confidence *= 0.5
        facts = dict(s.facts)
        if vllm_version:
            facts.setdefault("vllm_version", vllm_version)
        hits = s.hits()
        advice = kv_advice(facts) if r.advice == "kv_cache" else []
        return Finding(
            rule=r.id, title=r.title, category=r.category, severity=r.severity, confidence=confidence,
            cause=fill(r.cause, facts).strip(), fix=fill(r.fix, facts).strip(),
            lines=[h.text for h in hits[:MAX_QUOTED]], references=list(r.references), facts=facts,
            advice=advice, layer="rule", key=r.key, patch=r.patch, evidence=hits[:MAX_QUOTED],
        )


def rank(findings: list[Finding], rules: dict[str, Rule]) -> list[Finding]:
    """Most specific first: superseded last; errors before warnings before info; then confidence."""
    by_id = {f.rule: f for f in findings}
    superseded: dict[str, str] = {}
    for f in findings:
        rule = rules.get(f.rule)
        for victim in rule.supersedes if rule else []:
            if victim in by_id:
                superseded.setdefault(victim, f.rule)
    specific = [f.rule for f in findings if f.severity != "info" and not (rules.get(f.rule) and rules[f.rule].generic)
                and f.rule not in superseded]
    if specific:
        for f in findings:
            rule = rules.get(f.rule)
            if rule and rule.generic:
                superseded.setdefault(f.rule, specific[0])
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
