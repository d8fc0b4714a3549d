"""Each rule's verdict on the real excerpts it was written from."""

from __future__ import annotations

import pytest

from forklift.doctor import diagnose, load_rules

from .conftest import Excerpt, excerpts

ALL = excerpts()


@pytest.mark.parametrize("ex", [e for e in ALL if e.rule], ids=lambda e: e.name)
def test_top_finding_is_the_expected_rule(ex: Excerpt) -> None:
    findings = diagnose(ex.log.read_text(errors="replace").splitlines())
    assert findings, f"{ex.name}: nothing matched"
    assert (findings[0].rule, findings[0].category) == (ex.rule, ex.category)
    assert findings[0].lines, "a finding quotes the lines that show it"


@pytest.mark.parametrize("ex", [e for e in ALL if not e.rule], ids=lambda e: e.name)
def test_healthy_logs_have_no_error_finding(ex: Excerpt) -> None:
    findings = diagnose(ex.log.read_text(errors="replace").splitlines())
    assert [f.rule for f in findings if f.severity == "error"] == []


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r.id)
def test_every_rule_has_an_excerpt_whose_source_it_cites(rule: object) -> None:
    from forklift.doctor import Rule

    assert isinstance(rule, Rule)
    backing = [e for e in ALL if e.rule == rule.id]
    assert backing, f"{rule.id} has no excerpt under tests/data/doctor/excerpts"
    assert any(e.cites in rule.references for e in backing), (
        f"{rule.id} cites none of its excerpts' sources: {[e.cites for e in backing]}")


def test_knowledge_base_size_and_categories() -> None:
    rules = load_rules()
    assert len(rules) >= 40
    from typing import get_args

    from forklift.doctor import Category

    assert {r.category for r in rules} == set(get_args(Category)), "every category has a rule"
