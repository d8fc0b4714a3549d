"""The knowledge base as data: every rule shows what it matches, cites where it comes from, names real
recipe keys and catalog patches, and fires on real text."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest

from forklift.doctor import Rule, load_categories, load_rules, scan_text
from forklift.doctor.match import default_matcher
from forklift.patches import catalog
from forklift.recipe.schema import Recipe

from .conftest import excerpts, train_items

RULES = load_rules()
TRAIN = train_items()
OLD = excerpts()
THREADS = {i.thread for i in TRAIN} | {e.cites for e in OLD if e.cites}


def _fields(model: Any) -> dict[str, Any]:
    return dict(model.model_fields)


def key_exists(key: str) -> bool:
    """A dotted recipe key (``serve.max_model_len``, ``nodes[].data_ip``, ``env``) names a real field."""
    from pydantic import BaseModel

    models: list[type[BaseModel]] = [Recipe]
    for part in key.split("."):
        name = part.removesuffix("[]")
        nxt: list[type[BaseModel]] = []
        found = False
        for m in models:
            field = m.model_fields.get(name)
            if field is None:
                continue
            found = True
            for arg in [field.annotation, *get_args(field.annotation)]:
                for inner in [arg, *get_args(arg)]:
                    for leaf in [inner, *get_args(inner)]:
                        if isinstance(leaf, type) and issubclass(leaf, BaseModel):
                            nxt.append(leaf)
        if not found:
            return False
        models = nxt
    return True


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_rule_matches_its_examples_and_has_one(rule: Rule) -> None:
    assert rule.examples, f"{rule.id} carries no example line"
    patterns = [re.compile(p) for p in (*rule.match.all, *rule.match.any)]
    for ex in rule.examples:
        assert any(p.search(ex) for p in patterns), f"{rule.id}: no pattern matches its example {ex[:80]!r}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_rule_cites_real_sources(rule: Rule) -> None:
    for ref in rule.references:
        if re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", ref):
            assert ref in THREADS, f"{rule.id} cites {ref}, which is not a thread of the training corpus"
        else:
            known = re.match(r"(seed:\d{3}_\w+\.txt|https?://|vllm \d|ray \d|torch \d|transformers \d|triton |linux |"
                             r"NCCL |forklift |huggingface_hub |CPython |docker |tokenizers |caused:)", ref)
            assert known, f"{rule.id}: {ref!r} names no source"


@pytest.mark.parametrize("rule", [r for r in RULES if r.key], ids=lambda r: r.id)
def test_rule_keys_are_recipe_fields(rule: Rule) -> None:
    assert rule.key is not None and key_exists(rule.key), f"{rule.id}: {rule.key} is not a recipe field"


def test_category_keys_are_recipe_fields() -> None:
    bad = {c: i.key for c, i in load_categories().items() if i.key and not key_exists(i.key)}
    assert bad == {}


def test_key_checker_refuses_made_up_keys() -> None:
    assert key_exists("serve.max_model_len") and key_exists("nodes[].data_ip") and key_exists("ray.port")
    assert not key_exists("serve.max_model_lenght") and not key_exists("network.nope")


def test_patch_ids_are_catalog_entries() -> None:
    known = set(catalog())
    assert {r.patch for r in RULES if r.patch} <= known


def test_every_category_has_a_rule_and_a_description() -> None:
    assert {r.category for r in RULES} == set(load_categories())


def _fires(rule: Rule, lines: list[str]) -> bool:
    """The rule matches (as the exact-signature layer reports it, before categories are merged)."""
    return rule.id in {f.rule for f in default_matcher().run(scan_text(lines).lines)}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_rule_fires_on_real_text(rule: Rule) -> None:
    """Each rule fires on its examples read as one input, or on a training or in-sample excerpt."""
    if _fires(rule, [x for ex in rule.examples for x in ex.splitlines()]):
        return
    texts = [i.text for i in TRAIN] + [e.log.read_text(errors="replace") for e in OLD]
    assert any(_fires(rule, t.splitlines()) for t in texts), f"{rule.id} fires on no real text"
